"""Local launcher: ``num_workers`` processes on this machine, torchrun-style variables.

Each rank gets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``GROUP_RANK=0``, ``NODE_RANK=0`` (Ray's name), ``MASTER_ADDR=127.0.0.1`` and a
``MASTER_PORT`` the kernel just handed out (so two local runs never pick the same port). Each rank runs in its own session, so
Ctrl-C reaches the supervisor only, and stopping a rank stops its children too.
Output (stdout and stderr, merged) goes to ``logs/<job>/rank-R.out`` and to ``on_line``.
"""
from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import threading
import time
from typing import Dict, List, Optional, Sequence

from ..common.log import get_logger
from .base import ExitRecord, Launcher, LineSink, WorkerGroup, open_log


_HANDED_OUT: "collections.deque[int]" = collections.deque(maxlen=256)
_HANDED_OUT_LOCK = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bound to port 0, then released), and not one
    this process handed out recently: the kernel may give a released port to the next
    ``bind(0)``, and two trials of a local sweep, starting at once in one process, then got
    the same port for their rank 0 (seen in CI: EADDRINUSE in the process group)."""
    with _HANDED_OUT_LOCK:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
            if port not in _HANDED_OUT:
                break
        _HANDED_OUT.append(port)
        return port


class LocalWorkerGroup(WorkerGroup):
    def __init__(self, procs: List[subprocess.Popen], log_files, on_line: Optional[LineSink]):
        self.procs = procs
        self._exits: Dict[int, ExitRecord] = {}
        self._cond = threading.Condition()
        self._threads = []
        for rank, (p, log) in enumerate(zip(procs, log_files)):
            t = threading.Thread(target=self._pump, args=(rank, p, log, on_line), daemon=True)
            t.start()
            self._threads.append(t)

    def _pump(self, rank: int, p: subprocess.Popen, log, on_line: Optional[LineSink]) -> None:
        try:
            for raw in iter(p.stdout.readline, b""):
                if log is not None:
                    try:
                        log.write(raw)
                        log.flush()
                    except OSError as e:  # a full disk must not stop the exit being seen
                        log = _drop_log(log, rank, e)
                if on_line is not None:
                    on_line(rank, raw.decode(errors="replace").rstrip("\n"))
        finally:
            if log is not None:
                try:
                    log.close()
                except OSError:
                    pass
        code = p.wait()
        record = self._exit_record(rank, code)
        with self._cond:
            self._exits[rank] = record
            self._cond.notify_all()

    def _exit_record(self, rank: int, code: int) -> ExitRecord:
        """How rank ``rank`` ended, its process having exited with ``code``."""
        return ExitRecord(rank, code, time.time())

    def exits(self) -> List[ExitRecord]:
        with self._cond:
            return sorted(self._exits.values(), key=lambda e: e.time)

    def ended(self) -> bool:
        with self._cond:
            return len(self._exits) == len(self.procs)

    def wait_any_failure(self, timeout: float) -> Optional[List[ExitRecord]]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                done = len(self._exits) == len(self.procs)
                failed = any(e.returncode != 0 for e in self._exits.values())
                if done or failed:
                    return sorted(self._exits.values(), key=lambda e: e.time)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def terminate(self, grace: float = 10.0) -> None:
        for p in self.procs:
            signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in self.procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                signal_group(p, signal.SIGKILL)
        for p in self.procs:
            p.wait()
        for t in self._threads:
            t.join(timeout=5)


def _drop_log(log, rank: int, err: OSError) -> None:
    """Stop writing a rank's log file (e.g. the disk is full); its output still reaches
    ``on_line``. Returns None, the new log."""

    get_logger("launcher").warning(f"rank {rank}: cannot write its log {log.name} "
                                   f"({err.strerror}); further output of this rank is not "
                                   "logged")
    try:
        log.close()
    except OSError:
        pass
    return None


def signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class LocalLauncher(Launcher):
    name = "local"

    def launch(self, *, command: Sequence[str], env: Dict[str, str], num_workers: int,
               log_dir: str, on_line: Optional[LineSink] = None) -> LocalWorkerGroup:
        os.makedirs(log_dir, exist_ok=True)
        port = env.get("MASTER_PORT") or str(free_port())
        procs, logs = [], []
        for rank in range(num_workers):
            wenv = dict(env)
            wenv.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(num_workers),
                        LOCAL_WORLD_SIZE=str(num_workers), GROUP_RANK="0", NODE_RANK="0",
                        MASTER_ADDR=env.get("MASTER_ADDR", "127.0.0.1"), MASTER_PORT=port,
                        PYTHONUNBUFFERED="1", HPCTRAIN_PARENT_PID=str(os.getpid()))
            logs.append(open_log(log_dir, f"rank-{rank}.out"))
            procs.append(subprocess.Popen(list(command), env=wenv, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True))
        return LocalWorkerGroup(procs, logs, on_line)
