"""The warning's lead time before the walltime, from the run's measured checkpoint cost.

``warning_time`` is a guess made before the run; the committed checkpoints record what a
checkpoint really cost (``commit_seconds``: from its report's start to its commit). After
a warning the ranks get ``max(lead / 2, lead − 15 s)`` to stop at a checkpoint (the rest
is for the requeue); they should get ``MARGIN`` × the costliest of the last checkpoints.
When the allocation's end is known (the job's start and walltime), the supervisor warns
by itself that much earlier when ``warning_time`` is too short for it.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional, Tuple

from hpctrain.common.deadline import SLACK_S

MARGIN = 2.0     # the stop's checkpoint may cost twice the costliest one seen
RECENT = 5       # the checkpoints that count: the last ones


def measured_lead_s(records: Iterable[Any], warning_s: float) -> Tuple[float, Optional[float]]:
    """``(lead, cost)``: the lead time in seconds and the measured cost it came from
    (None: no committed checkpoint records one; the lead is ``warning_s``). The lead is
    the shortest that gives the ranks ``MARGIN × cost`` to stop, at least ``warning_s``.

    >>> class R:
    ...     def __init__(self, s): self.metadata = {"commit_seconds": s}
    >>> measured_lead_s([R(1.0), R(40.0), R(2.0)], 120)
    (120, 40.0)
    >>> measured_lead_s([R(80.0)], 120)
    (175.0, 80.0)
    >>> measured_lead_s([R(3.0)], 10)
    (12.0, 3.0)
    >>> measured_lead_s([R(0.2)], 10), measured_lead_s([], 120)
    ((10, 0.2), (120, None))
    """
    costs = [float(r.metadata["commit_seconds"]) for r in list(records)[-RECENT:]
             if isinstance(getattr(r, "metadata", None), dict)
             and isinstance(r.metadata.get("commit_seconds"), (int, float))]
    if not costs:
        return warning_s, None
    cost = max(costs)
    need = MARGIN * cost  # what the ranks should get: deadline.stop_window_s(lead)
    return max(warning_s, min(2 * need, need + SLACK_S)), cost
