"""The supervisor's hang watchdog: every rank's progress (``worker/heartbeat.py``), a
timeout learned from the run's own pace, and which rank stopped first.

A rank's progress is a count its training thread moves at every report and every batch of
a prepared data loader; its heartbeat file says when the count last moved. The watchdog
reads every rank's file (at most every ``check_s`` seconds) and learns from them:

* the longest gap between two moves of any rank in this attempt (a slow step, a
  checkpoint's report, an evaluation pass) — the training timeout is
  ``max(floor_s, FACTOR × that gap)``;
* before a rank's first move (start-up: imports, the process group, the first batch)
  the limit is ``max(startup_floor_s, FACTOR × the longest start-up seen)``, where the
  start-ups seen are this attempt's other ranks' and the run's earlier attempts'
  (``state.json``'s ``learned_startup_s``).

``FailureConfig(hang_timeout=...)`` replaces both limits with one fixed value (0: no
watchdog). A rank whose count has not moved for longer than its limit is hung; with every
rank of a collective waiting for one that never came, the rank blamed is the one whose
count stopped first.
"""
from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

from hpctrain.common.fsutil import read_json
from hpctrain.worker.heartbeat import interval_s as heartbeat_interval_s

STAGES = ("start", "loaded", "ready", "train")  # a rank's phases, in order (heartbeat.py)
FACTOR = 3.0
FLOOR_S = 300.0          # a training step or checkpoint may take 5 minutes before it counts
STARTUP_FLOOR_S = 600.0  # imports and the process group at scale: 10 minutes


@dataclass
class Hang:
    """A hang: the rank blamed (its count stopped first), every stalled rank, the limit."""

    rank: int
    host: str
    stalled: List[int]
    last_progress: Dict[int, float]
    limit_s: float
    learned: bool
    phase: str
    seen_at: float = field(default_factory=time.time)

    def summary(self) -> str:
        idle = self.seen_at - self.last_progress.get(self.rank, self.seen_at)
        where = {"start": "while starting (before its training function was loaded: "
                          "imports)",
                 "loaded": "while forming the process group",
                 "ready": "before its first report or batch"}.get(self.phase,
                                                                   "in the training")
        return (f"hang: rank {self.rank}{f' on {self.host}' if self.host else ''} made no "
                f"progress for {idle:.0f} s {where}, over the "
                f"{'learned' if self.learned else 'configured'} limit of {self.limit_s:.0f} s")


class Watchdog:
    def __init__(self, attempt_dir: str, num_workers: int, *, started: float,
                 timeout_s: Optional[float] = None, floor_s: float = FLOOR_S,
                 startup_floor_s: float = STARTUP_FLOOR_S,
                 learned_startup_s: float = 0.0, check_s: float = 1.0,
                 on_record: Optional[Callable[[int, Dict], None]] = None):
        self.attempt_dir = attempt_dir
        self.num_workers = num_workers
        self.started = started
        self.timeout_s = timeout_s            # a fixed limit (FailureConfig.hang_timeout)
        self.floor_s = floor_s
        self.startup_floor_s = startup_floor_s
        self.check_s = check_s
        self.max_gap_s = 0.0                  # the longest gap between two moves, any rank
        self.max_startup_s = learned_startup_s
        self._last: Dict[int, Dict] = {}      # rank -> its latest heartbeat record
        self._checked = 0.0
        self.on_record = on_record            # each rank's record as read (stragglers.py)

    def limits(self) -> tuple:
        """(training limit, start-up limit, learned?) in seconds."""
        if self.timeout_s:
            return self.timeout_s, self.timeout_s, False
        return (max(self.floor_s, FACTOR * self.max_gap_s),
                max(self.startup_floor_s, FACTOR * self.max_startup_s), True)

    def _read(self) -> None:
        for path in glob.glob(os.path.join(self.attempt_dir, "heartbeat.rank-*.json")):
            rec = read_json(path)
            if not rec or "rank" not in rec:
                continue
            rank = int(rec["rank"])
            prev = self._last.get(rank)
            if prev is not None and rec.get("progress") != prev.get("progress"):
                if prev.get("phase") != "train":
                    self.max_startup_s = max(self.max_startup_s, rec["time"] - self.started)
                else:
                    self.max_gap_s = max(self.max_gap_s, rec["time"] - prev["time"])
            elif prev is None and rec.get("phase") == "train":
                self.max_startup_s = max(self.max_startup_s, rec["time"] - self.started)
            self._last[rank] = rec
            if self.on_record is not None:
                self.on_record(rank, rec)

    def startup_seen_s(self) -> float:
        return self.max_startup_s

    def poll(self, now: Optional[float] = None) -> Optional[Hang]:
        """A :class:`Hang` once some rank is past its limit, else None."""
        now = time.time() if now is None else now
        if self.timeout_s == 0 or now - self._checked < self.check_s:
            return None
        self._checked = now
        self._read()
        train_limit, start_limit, learned = self.limits()
        last: Dict[int, float] = {}
        stalled: List[int] = []
        phases: Dict[int, str] = {}
        for rank in range(self.num_workers):
            rec = self._last.get(rank)
            phase = rec.get("phase", "start") if rec else "start"
            since = rec["time"] if rec and phase == "train" else self.started
            last[rank], phases[rank] = since, phase
            if now - since > (train_limit if phase == "train" else start_limit):
                stalled.append(rank)
        if not stalled:
            return None
        # a rank's heartbeat records its moves every heartbeat interval (not each move):
        # ranks that stopped together differ by up to that much, so once one is past its
        # limit, every rank within that much of its own limit counts as stalled too
        slack = heartbeat_interval_s() + self.check_s
        stalled = [r for r in range(self.num_workers)
                   if now - last[r] > (train_limit if phases[r] == "train" else start_limit)
                   - slack]
        # the rank that stopped first, among all ranks (a rank waiting for a missing peer
        # goes past its limit first): the earliest start-up stage (a rank still importing
        # while its peers wait to form the process group), then the fewest moves (a rank
        # waiting in a collective has taken the batch its peer never got), then the
        # earliest last move
        def order(r: int):
            rec = self._last.get(r) or {}
            return (STAGES.index(rec.get("phase", "start")) if rec.get("phase", "start")
                    in STAGES else 0, int(rec.get("progress", -1)), last[r], r)

        blamed = min(range(self.num_workers), key=order)
        rec = self._last.get(blamed) or {}
        return Hang(rank=blamed, host=rec.get("host", ""), stalled=stalled,
                    last_progress=last,
                    limit_s=train_limit if phases[blamed] == "train" else start_limit,
                    learned=learned, phase=phases[blamed], seen_at=now)
