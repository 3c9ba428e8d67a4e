"""Stragglers: each rank's step time from its own progress beats, and a warning when one
rank is persistently slower than the rest.

The supervisor already reads every rank's heartbeat record (``heartbeat.rank-R.json``:
its progress count, the exact time of its latest move when that was a report, else the
time its heartbeat saw the count move (a batch of a prepared data loader), and its node)
for the hang watchdog; :class:`Pace` keeps the (count, time) pairs it sees per rank in
the training phase. Two cases:

* ranks that are **not in lock step** move at their own pace: a rank's step time is the
  slope of its time over its count;
* ranks **in lock step** (every report is an agreement of all ranks, so they all move at
  the slowest one's pace) still *arrive* at each report at different times: the late
  rank is the slow one. With the common step time P, the rank's offset ``time − count ×
  P`` (a median over its records) says how much later it arrives than the others, and
  its busy time per step is P minus the time it waits for the last rank.

Once every rank has made ``MIN_STEPS`` moves, the slowest rank's step time is compared
with the median of the others'; past ``FailureConfig.straggler_factor`` the supervisor
warns, once per attempt, naming the rank and its node. The statistics are kept in the
attempt's record of ``state.json`` (``pace``), shown by ``hpctrain status`` and
``hpctrain results``. Where a collective inside the step (DDP's allreduce) holds the
fast ranks back, they arrive at the report with the slow one, and the statistics show
the job's pace without a culprit.
"""
from __future__ import annotations

import statistics
from typing import Any, Dict, List, Optional, Tuple

#: Moves every rank must have made before a rank is called a straggler.
MIN_STEPS = 5
#: Ranks whose own paces differ less than this are taken to be in lock step.
LOCK_STEP = 1.2
KEEP = 400  # (count, time) pairs kept per rank (thinned beyond)


class Pace:
    def __init__(self, factor: float):
        self.factor = factor                 # 0: no warning
        self._seen: Dict[int, List[Tuple[int, float]]] = {}
        self._host: Dict[int, str] = {}
        self.warned = False
        self.saved = 0.0                     # when the summary last reached state.json
        self._new = False                    # a record since the last warning check

    def observe(self, rank: int, rec: Dict[str, Any]) -> None:
        """A rank's heartbeat record (the watchdog's reading)."""
        if rec.get("phase") != "train":
            return
        seen = self._seen.setdefault(rank, [])
        # the moment of the move where the rank knows it (a report), else when its
        # heartbeat saw the count move (up to a heartbeat interval later)
        point = (int(rec.get("progress", 0)), float(rec.get("moved_at") or rec["time"]))
        if seen and seen[-1][0] == point[0]:
            return
        seen.append(point)
        self._new = True
        if len(seen) > KEEP:  # keep the first and every other one of the rest
            del seen[1::2]
        self._host[rank] = str(rec.get("host") or "")

    def per_rank(self) -> Dict[int, Dict[str, Any]]:
        """rank → {"host", "steps", "step_s"} for the ranks with at least one step."""
        slopes = {}
        for rank, seen in self._seen.items():
            steps = seen[-1][0] - seen[0][0]
            if steps > 0:
                slopes[rank] = (seen[-1][1] - seen[0][1]) / steps
        if not slopes:
            return {}
        step_s = dict(slopes)
        if len(slopes) > 1 and max(slopes.values()) <= LOCK_STEP * max(min(slopes.values()),
                                                                        1e-9):
            period = statistics.median(slopes.values())
            offset = {r: statistics.median(t - c * period for c, t in self._seen[r])
                      for r in slopes}
            last = max(offset.values())
            step_s = {r: max(period - (last - offset[r]), period * 1e-3) for r in slopes}
        return {r: {"host": self._host.get(r, ""), "steps": self._seen[r][-1][0]
                    - self._seen[r][0][0], "step_s": round(step_s[r], 6)}
                for r in sorted(slopes)}

    def first_move(self) -> Optional[float]:
        """When the training began (epoch seconds): the latest of the ranks' first moves,
        each extrapolated back from the first record seen at its pace; None before."""
        firsts = []
        for rank, seen in self._seen.items():
            c, t = seen[0]
            steps = seen[-1][0] - c
            if c > 1 and steps <= 0:
                return None  # one record past the first move: no pace to go back with
            firsts.append(t - (c - 1) * (seen[-1][1] - t) / steps if c > 1 else t)
        return max(firsts) if firsts else None

    def summary(self) -> Optional[Dict[str, Any]]:
        """The statistics for ``state.json``: per rank, and the slowest rank against the
        median of the others (``ratio``); None before two ranks made a step."""
        ranks = self.per_rank()
        if len(ranks) < 2:
            return None
        slowest = max(ranks, key=lambda r: (ranks[r]["step_s"], r))
        others = statistics.median(v["step_s"] for r, v in ranks.items() if r != slowest)
        ratio = ranks[slowest]["step_s"] / others if others > 0 else 1.0
        return {"ranks": {str(r): v for r, v in ranks.items()}, "slowest_rank": slowest,
                "slowest_host": ranks[slowest]["host"], "others_step_s": round(others, 6),
                "ratio": round(ratio, 3),
                "min_steps": min(v["steps"] for v in ranks.values())}

    def warning(self) -> Optional[str]:
        """The straggler warning, once, when the slowest rank is past the factor after
        every rank made :data:`MIN_STEPS` moves; else None."""
        if self.warned or not self.factor or not self._new:
            return None
        self._new = False
        s = self.summary()
        if s is None or s["min_steps"] < MIN_STEPS or s["ratio"] < self.factor:
            return None
        self.warned = True
        rank, host = s["slowest_rank"], s["slowest_host"]
        return (f"straggler: rank {rank}{f' on {host}' if host else ''} takes "
                f"{s['ranks'][str(rank)]['step_s']:.3g} s per step, {s['ratio']:.2f}× the "
                f"other ranks' median ({s['others_step_s']:.3g} s; failure.straggler_factor "
                f"= {self.factor:g})")


def describe(pace: Optional[Dict[str, Any]]) -> Optional[str]:
    """One line for ``hpctrain status``/``results`` from an attempt's ``pace``."""
    if not pace:
        return None
    rank = pace["slowest_rank"]
    host = f" on {pace['slowest_host']}" if pace.get("slowest_host") else ""
    per = ", ".join(f"{r}: {v['step_s']:.3g}" for r, v in sorted(
        pace["ranks"].items(), key=lambda kv: int(kv[0])))
    return (f"step time per rank (s) {per}; slowest rank {rank}{host}, "
            f"{pace['ratio']:.2f}× the others' median")
