"""``CheckpointConfig(checkpoint_frequency=...)``: when the loop should checkpoint.

* ``None`` (default): the loop decides; ``should_checkpoint()`` turns true only on the
  scheduler's warning.
* an integer N: ``should_checkpoint()`` is also true before every N-th report (after
  reports N-1, 2N-1, …), so that a loop that checkpoints when told hands in a checkpoint
  at reports N, 2N, ….
* ``"auto"``: the Young–Daly interval, from the measured cost of this run's checkpoints
  and the interruptions this run and its site have seen, re-computed as measurements
  come in. Rank 0 decides (its clock), the decision travels with the agreement of the
  reports, so every rank sees ``should_checkpoint()`` turn true after the same report
  (until the next report).

The interval (Daly 2006, "A higher order estimate of the optimum checkpoint interval for
restart dumps"; Young 1974 is its first term ``sqrt(2 C M)``)::

    T = sqrt(2 C M) * (1 + sqrt(C / (2 M)) / 3 + C / (18 M)) - C     for C < 2 M
    T = M                                                          otherwise

with C the time a checkpoint costs the training (the time ``report()`` blocks: the whole
commit when synchronous, the snapshot when asynchronous) and M the mean time between
interruptions that lose work. M is estimated from the run's attempts in ``state.json``
(each attempt that ended other than FINISHED is one interruption, except a preemption
whose warning was answered with a committed checkpoint before the deadline: it lost
nothing, so it must not shorten the interval; the time observed is the attempts' running
time) with the site's ``failure.mtbi`` as a prior worth one interruption::

    M = (observed seconds + mtbi) / (interruptions + 1)

so a fresh run uses the site's figure and a run that keeps being interrupted moves
towards its own rate. Before the first checkpoint of the run is measured, C is taken as
``DEFAULT_COST_S``.

Two tiers (``CheckpointConfig(local_dir=...)``, and any asynchronous commit): C is the
local commit (what ``report()`` blocks for), and the drain to the shared tier takes D
seconds in the background. A checkpoint counts only once drained, so an interruption
loses D more on average — a constant that does not move the optimum — but a checkpoint
handed in before the previous drain ended waits for it. So the interval is
``max(T(C, M), D)`` (:func:`tiered_interval`), D the median of the measured drains.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from typing import Any, Dict, Iterable, List, Optional

from hpctrain.errors import ConfigError
from hpctrain.common.deadline import ENV_COST, env_seconds

#: failure.mtbi when neither the job nor its site sets one: one interruption a day.
DEFAULT_MTBI_S = 24 * 3600.0
#: The checkpoint cost assumed until one is measured.
DEFAULT_COST_S = 1.0
#: The interval is never below this (a loop that reports often would otherwise be told
#: to checkpoint at every report when checkpoints are nearly free).
MIN_INTERVAL_S = 1.0
#: Attempt outcomes that are not interruptions.
_NOT_INTERRUPTED = ("FINISHED", "RUNNING", None)


def young_daly_interval(cost_s: float, mtbi_s: float, *,
                        minimum_s: float = MIN_INTERVAL_S) -> float:
    """Seconds of training between checkpoints (Daly's higher-order estimate).

    >>> round(young_daly_interval(10, 86400), 1)
    1307.9
    >>> young_daly_interval(100, 40)
    40.0
    """
    if cost_s < 0 or mtbi_s <= 0 or not math.isfinite(cost_s) or not math.isfinite(mtbi_s):
        raise ValueError(f"young_daly_interval: need cost >= 0 and mtbi > 0, got "
                         f"{cost_s!r}, {mtbi_s!r}")
    if cost_s >= 2 * mtbi_s:
        interval = float(mtbi_s)
    else:
        ratio = cost_s / (2 * mtbi_s)
        interval = (math.sqrt(2 * cost_s * mtbi_s)
                    * (1 + math.sqrt(ratio) / 3 + cost_s / (18 * mtbi_s)) - cost_s)
    return max(minimum_s, interval)


def tiered_interval(cost_s: float, mtbi_s: float, drain_s: float = 0.0, *,
                    minimum_s: float = MIN_INTERVAL_S) -> float:
    """The interval with a local tier: Young–Daly of the local commit's cost, but never
    shorter than the drain to the shared tier (a checkpoint would wait for the previous
    one's drain).

    >>> round(tiered_interval(2, 86400, 30), 1), tiered_interval(2, 86400, 900)
    (586.5, 900.0)
    """
    return max(young_daly_interval(cost_s, mtbi_s, minimum_s=minimum_s), float(drain_s))


def observed_mtbi(attempts: Iterable[Dict[str, Any]], site_mtbi_s: float,
                  now: Optional[float] = None) -> float:
    """Mean time between interruptions: the run's attempts (``state.json``) with the
    site's figure as a prior worth one interruption.

    >>> observed_mtbi([], 3600.0)
    3600.0
    >>> observed_mtbi([{"started": 0, "ended": 600, "outcome": "PREEMPTED"},
    ...                {"started": 700, "ended": 1300, "outcome": "FAILED"}], 3600.0)
    1600.0

    A preemption answered with a checkpoint (the agreed stop, before the deadline) lost
    nothing and is not an interruption:

    >>> observed_mtbi([{"started": 0, "ended": 600, "outcome": "PREEMPTED",
    ...                 "stop_checkpoint": "checkpoint_000003", "stopped_at_deadline": False},
    ...                {"started": 700, "ended": 1300, "outcome": "FAILED"}], 3600.0)
    2400.0
    """
    now = time.time() if now is None else now
    seconds, interruptions = 0.0, 0
    for a in attempts:
        start = a.get("started")
        if not isinstance(start, (int, float)):
            continue
        end = a.get("ended")
        end = end if isinstance(end, (int, float)) else now
        seconds += max(0.0, end - start)
        if a.get("outcome") not in _NOT_INTERRUPTED and a.get("ended") is not None \
                and not _lost_nothing(a):
            interruptions += 1
    return (seconds + site_mtbi_s) / (interruptions + 1)


def _lost_nothing(attempt: Dict[str, Any]) -> bool:
    """A preempted attempt whose ranks all stopped with a committed checkpoint on the
    warning (the supervisor's record: ``stop_checkpoint``, not ``stopped_at_deadline``)."""
    return (attempt.get("outcome") == "PREEMPTED" and bool(attempt.get("stop_checkpoint"))
            and not attempt.get("stopped_at_deadline"))


def frequency_value(value: Any) -> Any:
    """Check ``checkpoint_frequency``: None, 0 (= None), an integer ≥ 1, or "auto"."""

    if value is None or value == 0 and not isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ConfigError(
        f"checkpoint.checkpoint_frequency: expected \"auto\" or a number of reports "
        f"(an integer >= 1), got {value!r}",
        hint="\"auto\" picks the interval from the measured checkpoint cost and the "
             "interruptions seen (Young–Daly); leave it unset to decide in the loop")


class FrequencyPolicy:
    """One session's checkpoint schedule (rank 0 decides ``"auto"``)."""

    def __init__(self, frequency: Any = None, *, mtbi_s: float = DEFAULT_MTBI_S,
                 clock=time.monotonic, history_cost_s: Optional[float] = None,
                 history_commit_s: Optional[float] = None):
        self.frequency = frequency_value(frequency)
        self.mtbi_s = float(mtbi_s)
        self.clock = clock
        self.costs: List[float] = []
        self.drains: List[float] = []  # background commits (the local tier's drain)
        self._history_cost = history_cost_s
        self._history_commit = history_commit_s  # a committed checkpoint's whole cost
        self.last = clock()  # the start, or the last checkpoint

    @classmethod
    def for_session(cls, session: Any) -> "FrequencyPolicy":
        freq = getattr(session.checkpoint_config, "checkpoint_frequency", None)
        site = getattr(session, "mtbi_s", None) or DEFAULT_MTBI_S
        mtbi = site
        if freq == "auto" and session.info.world_rank == 0:
            try:
                attempts = session.run.read_state().get("attempts", [])
            except (OSError, ValueError):
                attempts = []
            mtbi = observed_mtbi(attempts, site)
        return cls(freq, mtbi_s=mtbi,
                   history_commit_s=env_seconds(os.environ, ENV_COST))

    # -- measurements -----------------------------------------------------------------
    def observe_cost(self, seconds: float) -> None:
        """A checkpoint report blocked the training for ``seconds`` (rank 0)."""
        self.costs.append(max(0.0, seconds))
        del self.costs[:-5]

    def observe_drain(self, seconds: float) -> None:
        """A background commit (the drain to the shared tier) took ``seconds``."""
        self.drains.append(max(0.0, seconds))
        del self.drains[:-5]

    def drain_s(self) -> float:
        return statistics.median(self.drains) if self.drains else 0.0

    def cost_s(self) -> float:
        if self.costs:
            return statistics.median(self.costs)
        return self._history_cost if self._history_cost is not None else DEFAULT_COST_S

    def commit_cost_s(self) -> Optional[float]:
        """What a checkpoint costs until it is committed (deadline.py): the costliest of
        the last ones measured here (blocked + the costliest drain), else the committed
        checkpoints' cost the supervisor handed over; None: unknown.

        >>> p = FrequencyPolicy(history_commit_s=4.0)
        >>> p.commit_cost_s()
        4.0
        >>> p.observe_cost(1.0); p.observe_cost(2.0); p.observe_drain(0.5); p.commit_cost_s()
        2.5
        """
        if self.costs:
            return max(self.costs) + (max(self.drains) if self.drains else 0.0)
        return self._history_commit

    def interval_s(self) -> Optional[float]:
        """The chosen interval in seconds (``"auto"`` only)."""
        if self.frequency != "auto":
            return None
        return tiered_interval(self.cost_s(), self.mtbi_s, self.drain_s())

    def checkpointed(self) -> None:
        self.last = self.clock()

    # -- decisions ----------------------------------------------------------------------
    def due_by_time(self) -> bool:
        interval = self.interval_s()
        return interval is not None and self.clock() - self.last >= interval

    def due_by_count(self, iteration: int) -> bool:
        """After ``iteration`` reports: should the next one carry a checkpoint?"""
        f = self.frequency
        return isinstance(f, int) and (iteration + 1) % f == 0


def describe_interval(seconds: float) -> str:
    """``"every 22m04s"``-style text for the progress output.

    >>> describe_interval(1323.5), describe_interval(4.2), describe_interval(7300)
    ('22m04s', '4.2s', '2h01m')
    """
    if seconds < 60:
        return f"{seconds:.2g}s" if seconds < 10 else f"{seconds:.0f}s"
    if seconds < 3600:
        m, s = divmod(int(round(seconds)), 60)
        return f"{m}m{s:02d}s"
    h, m = divmod(int(round(seconds)) // 60, 60)
    return f"{h}h{m:02d}m"


__all__ = ["young_daly_interval", "tiered_interval", "observed_mtbi", "frequency_value", "FrequencyPolicy",
           "describe_interval", "DEFAULT_MTBI_S"]
