"""Each rank's progress, for the supervisor's hang watchdog (``allocation/watchdog.py``).

The training thread only counts (``common/progress``: ``report()`` moves a count,
a prepared data loader's batches are counted by torch's own iterator). A daemon thread of
the rank looks at the total every ``interval`` seconds and, when it moved, rewrites
``<attempt>/heartbeat.rank-R.json`` with the total and the time it saw it move. A rank
stuck anywhere (a collective whose peer is gone, a data loader that sleeps, a deadlock, a
process group that never forms) stops moving its count; its file goes stale, and the
supervisor, which reads every rank's file, can tell which rank stopped first.

The same thread answers the supervisor's request for stacks: when ``<attempt>/stacks.request``
appears it writes every Python thread's stack (``faulthandler``) to
``<attempt>/stacks.rank-R.txt``. It works while the training thread waits in native code
that released the GIL (a Gloo or NCCL wait, a sleep, a read); a thread spinning in native
code that holds the GIL leaves no stacks, and the supervisor says so.
"""
from __future__ import annotations

import faulthandler
import json
import os
import socket
import threading
import time
from typing import Optional

from hpctrain.common import progress

ENV_INTERVAL = "HPCTRAIN_HEARTBEAT_S"
DEFAULT_INTERVAL_S = 5.0
HEARTBEAT_FILE = "heartbeat.rank-{rank}.json"
STACKS_REQUEST = "stacks.request"
STACKS_FILE = "stacks.rank-{rank}.txt"



def interval_s() -> float:
    try:
        value = float(os.environ.get(ENV_INTERVAL, DEFAULT_INTERVAL_S))
    except ValueError:
        value = DEFAULT_INTERVAL_S
    return max(0.05, value)


class Heartbeat:
    """The rank's heartbeat thread (started once, before anything slow)."""

    def __init__(self, attempt_dir: str, rank: int, interval: Optional[float] = None,
                 host: Optional[str] = None):
        self.attempt_dir = attempt_dir
        self.rank = rank
        self.host = host or socket.gethostname()
        self.interval = interval if interval is not None else interval_s()
        self.path = os.path.join(attempt_dir, HEARTBEAT_FILE.format(rank=rank))
        self._seen = -1
        self._dumped = False
        self.stage = "start"
        self.ready_at: Optional[float] = None
        self._thread = threading.Thread(target=self._loop, name="hpctrain-heartbeat",
                                        daemon=True)

    def start(self) -> "Heartbeat":
        self._write()
        self._thread.start()
        return self

    def reached(self, stage: str) -> None:
        """A start-up stage passed: ``"loaded"`` (the training function and its modules
        imported), ``"ready"`` (the process group formed). Not progress: the start-up
        limit still applies until the first report or batch."""
        self.stage = stage
        if stage == "ready" and self.ready_at is None:
            self.ready_at = time.time()  # the worker group's start ends at its last rank's
        self._write()

    def flush(self) -> None:
        """Write the record now (the training function ended: its last figures)."""
        self._write()

    def _write(self, moves: Optional[int] = None) -> None:
        if moves is None:
            moves = progress.moves()
        phase = "train" if moves else self.stage
        record = {"rank": self.rank, "host": self.host, "pid": os.getpid(),
                  "progress": moves,
                  # when this thread saw the count move (a batch leaves no time stamp)
                  "time": time.time(), "phase": phase, "ready_at": self.ready_at,
                  # when the latest move happened, where it is known: a report, with no
                  # batch of a prepared loader since (the straggler statistics)
                  "moved_at": progress.reported_at if moves == progress.reported_count
                  else None,
                  "report_blocked_s": round(progress.report_blocked_s, 6)}
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a full or vanished filesystem: the watchdog sees a stale file

    def _loop(self) -> None:
        self._seen = progress.moves()
        while True:
            time.sleep(self.interval)
            moves = progress.moves()
            if moves != self._seen:
                self._seen = moves
                self._write(moves)
            if not self._dumped and os.path.exists(
                    os.path.join(self.attempt_dir, STACKS_REQUEST)):
                self._dumped = True
                self.dump_stacks()

    def dump_stacks(self) -> None:
        path = os.path.join(self.attempt_dir, STACKS_FILE.format(rank=self.rank))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"rank {self.rank} on {self.host} (pid {os.getpid()}), "
                        f"{time.strftime('%Y-%m-%d %H:%M:%S')}, progress count {progress.moves()}\n\n")
                f.flush()
                faulthandler.dump_traceback(file=f, all_threads=True)
        except OSError:
            pass
