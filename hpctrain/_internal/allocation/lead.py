"""The warning's lead time before the walltime, from the run's measured checkpoint cost.

``warning_time`` is a guess made before the run; the committed checkpoints record what a
checkpoint really cost (``commit_seconds``: from its report's start to its commit). When
the allocation's end is known (the job's start and walltime), the supervisor warns by
itself at ``max(warning_time, MARGIN × the costliest of the last checkpoints + SLACK_S)``
before the end, so that the stop's checkpoint can finish and the requeue still happen.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional, Tuple

MARGIN = 2.0     # the stop's checkpoint may cost twice the costliest one seen
SLACK_S = 15.0   # the ranks' next report, the requeue
RECENT = 5       # the checkpoints that count: the last ones


def measured_lead_s(records: Iterable[Any], warning_s: float) -> Tuple[float, Optional[float]]:
    """``(lead, cost)``: the lead time in seconds and the measured cost it came from
    (None: no committed checkpoint records one; the lead is ``warning_s``).

    >>> class R:
    ...     def __init__(self, s): self.metadata = {"commit_seconds": s}
    >>> measured_lead_s([R(1.0), R(40.0), R(2.0)], 120)
    (120, 40.0)
    >>> measured_lead_s([R(80.0)], 120)
    (175.0, 80.0)
    >>> measured_lead_s([], 120)
    (120, None)
    """
    costs = [float(r.metadata["commit_seconds"]) for r in list(records)[-RECENT:]
             if isinstance(getattr(r, "metadata", None), dict)
             and isinstance(r.metadata.get("commit_seconds"), (int, float))]
    if not costs:
        return warning_s, None
    cost = max(costs)
    return max(warning_s, MARGIN * cost + SLACK_S), cost
