"""A worker group that is one launcher process (``srun``, ``mpiexec``, ``mpirun``).

Inside an allocation one launcher command starts every rank on every node; this side
sees only that one process. Its exit is the exit of the whole step, recorded as rank -1
(the supervisor then finds the failed rank from the ranks' own error records). Each rank
writes its own output to ``logs/<job>/rank-R.out`` (the worker redirects itself when
``HPCTRAIN_RANK_LOG_DIR`` is set); the launcher's own output goes to ``launcher.out``.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from typing import Dict, List, Optional, Sequence

from .base import ExitRecord, LineSink, WorkerGroup

#: Set by step launchers: the worker sends its stdout/stderr to ``<dir>/rank-<R>.out``.
ENV_RANK_LOG_DIR = "HPCTRAIN_RANK_LOG_DIR"


class StepWorkerGroup(WorkerGroup):
    """One launcher process standing for all ranks."""

    def __init__(self, argv: Sequence[str], env: Dict[str, str], log_dir: str):
        os.makedirs(log_dir, exist_ok=True)
        self.argv = list(argv)
        self._log = open(os.path.join(log_dir, "launcher.out"), "ab")
        self._log.write(("[hpctrain] " + shlex.join(self.argv) + "\n").encode())
        self._log.flush()
        env = dict(env)
        env[ENV_RANK_LOG_DIR] = log_dir
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(self.argv, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self._exit: Optional[ExitRecord] = None

    def _poll(self, timeout: float) -> None:
        if self._exit is not None:
            return
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return
        self._exit = ExitRecord(-1, code, time.time())
        self._log.close()

    def wait_any_failure(self, timeout: float) -> Optional[List[ExitRecord]]:
        self._poll(timeout)
        return None if self._exit is None else [self._exit]

    def exits(self) -> List[ExitRecord]:
        self._poll(0)
        return [] if self._exit is None else [self._exit]

    def terminate(self, grace: float = 10.0) -> None:
        """SIGTERM the launcher (srun and mpirun pass it on to every rank), SIGKILL the
        launcher's process group after ``grace`` seconds."""
        if self._exit is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            self._poll(grace)
        if self._exit is None:
            _signal_group(self.proc.pid, signal.SIGKILL)
            self._poll(30.0)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
