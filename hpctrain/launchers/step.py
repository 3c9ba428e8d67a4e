"""A worker group that is one launcher process (``srun``, ``mpiexec``, ``mpirun``).

Inside an allocation one launcher command starts every rank on every node; this side
sees only that one process. Its exit is the exit of the whole step, recorded as rank -1
(the supervisor then finds the failed rank from the ranks' own error records). Each rank
writes its own output to ``logs/<job>/rank-R.out`` (the worker redirects itself when
``HPCTRAIN_RANK_LOG_DIR`` is set); the launcher's own output goes to ``launcher.out``,
appended to by every attempt of the job: the ranks a launcher reports as failed are read
from this attempt's part only.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from typing import Dict, List, Optional, Sequence

from .base import ExitRecord, WorkerGroup, open_log

#: Set by step launchers: the worker sends its stdout/stderr to ``<dir>/rank-<R>.out``.
ENV_RANK_LOG_DIR = "HPCTRAIN_RANK_LOG_DIR"


class StepWorkerGroup(WorkerGroup):
    """One launcher process standing for all ranks."""

    def __init__(self, argv: Sequence[str], env: Dict[str, str], log_dir: str):
        os.makedirs(log_dir, exist_ok=True)
        self.argv = list(argv)
        self._log = open_log(log_dir, "launcher.out")
        # where this attempt's output starts: earlier attempts of the job are above it
        self._log_start = self._log.tell()
        self._log.write(("[hpctrain] " + shlex.join(self.argv) + "\n").encode())
        self._log.flush()
        env = dict(env)
        env[ENV_RANK_LOG_DIR] = log_dir
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(self.argv, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self._exit: Optional[ExitRecord] = None
        self._records: List[ExitRecord] = []

    def _poll(self, timeout: float) -> None:
        if self._exit is not None:
            return
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return
        now = time.time()
        self._log.close()
        records = [ExitRecord(-1, code, now)]
        if code != 0:
            try:
                with open(self._log.name, "rb") as f:
                    f.seek(self._log_start)
                    text = f.read().decode(errors="replace")
            except OSError:
                text = ""
            # ranks the launcher saw fail, in the order it reported them
            records += [ExitRecord(rank, rc, now + 1e-6 * i)
                        for i, (rank, rc) in enumerate(rank_exits_from_output(text))]
        self._records = records
        self._exit = records[0]

    def wait_any_failure(self, timeout: float) -> Optional[List[ExitRecord]]:
        self._poll(timeout)
        return None if self._exit is None else list(self._records)

    def exits(self) -> List[ExitRecord]:
        self._poll(0)
        return [] if self._exit is None else list(self._records)

    def terminate(self, grace: float = 10.0) -> None:
        """SIGTERM the launcher (srun and mpirun pass it on to every rank), SIGKILL the
        launcher's process group after ``grace`` seconds."""
        if self._exit is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            self._poll(grace)
        if self._exit is None:
            _signal_group(self.proc.pid, signal.SIGKILL)
            self._poll(30.0)


_SIGNALS = {"Killed": 9, "Terminated": 15, "Segmentation fault": 11, "Aborted": 6,
            "Bus error": 7}
_OMPI_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")
_OMPI_EXIT = re.compile(r"Process name: \[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(\d+)")
_SRUN = re.compile(r"srun: error: \S+: tasks? ([\d,\-]+): (.+)")


def rank_exits_from_output(text: str) -> List[tuple]:
    r"""``(rank, returncode)`` of the ranks a launcher reports as failed; negative
    returncode: killed by that signal.

    >>> rank_exits_from_output("mpirun noticed that process rank 0 with PID 7 on node vm "
    ...                        "exited on signal 9 (Killed).")
    [(0, -9)]
    >>> rank_exits_from_output("srun: error: n2: tasks 2-3: Exited with exit code 1\n"
    ...                        "srun: error: n1: task 0: Killed")
    [(2, 1), (3, 1), (0, -9)]
    """
    out: List[tuple] = []
    for m in _OMPI_SIGNAL.finditer(text):
        out.append((int(m.group(1)), -int(m.group(2))))
    for m in _OMPI_EXIT.finditer(text):
        out.append((int(m.group(1)), int(m.group(2))))
    for m in _SRUN.finditer(text):
        how = m.group(2).strip()
        code = re.match(r"Exited with exit code (\d+)", how)
        rc = int(code.group(1)) if code else -_SIGNALS.get(how.split(" (")[0], 9)
        for part in m.group(1).split(","):
            lo, _, hi = part.partition("-")
            for rank in range(int(lo), int(hi or lo) + 1):
                out.append((rank, rc))
    seen, unique = set(), []
    for rank, rc in out:
        if rank not in seen:
            seen.add(rank)
            unique.append((rank, rc))
    return unique


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
