"""A checkpoint that cannot finish before the deadline is not started.

The deadline of a checkpoint is, after the scheduler's warning, the supervisor's stop
deadline (the attempt's stop file: ranks still running then are stopped); before it, the
allocation's end (``ENV_ENDS_AT``, the job's start + its walltime) less ``SLACK_S`` for the
requeue. The cost is what this run measured: the costliest of the last checkpoints of this
attempt (the time ``report()`` blocked, plus the background commit's drain), else the
costliest of the last committed ones (``commit_seconds``, handed over by the supervisor in
``ENV_COST``), else unknown (never late).

Rank 0 decides at each agreement (its clock) and the decision travels with the agreement,
so every rank skips the same checkpoint: ``should_checkpoint()`` answers False, and a
checkpoint handed in anyway is not staged (a warning names the deadline and the cost). The
stop's checkpoint takes precedence: once a stop is agreed ``should_checkpoint()`` says True;
handed in too late, it is not started and the training ends at once, without it: the next
attempt resumes from the last committed one, and the allocation's remaining time is not
burned on a checkpoint that would be killed half-written. (A loop that hands in no
checkpoint after the warning is stopped at the deadline, as before.)
"""
from __future__ import annotations

from typing import Mapping, Optional, Tuple

#: The ranks' environment: when the allocation ends (epoch seconds), and the measured
#: cost of a checkpoint (seconds) from the run's committed checkpoints.
ENV_ENDS_AT = "HPCTRAIN_ALLOCATION_ENDS_AT"
ENV_COST = "HPCTRAIN_CHECKPOINT_COST_S"
#: Kept for the requeue before the allocation's end (as the supervisor's stop deadline).
SLACK_S = 15.0


def stop_window_s(lead_s: float) -> float:
    """The seconds the ranks get to stop after a warning ``lead_s`` before the end: the
    rest (``SLACK_S``, or half the lead when that is shorter) is kept for the requeue. The
    supervisor's stop deadline and the warning's lead time (lead.py) both follow it.

    >>> stop_window_s(120.0), stop_window_s(20.0)
    (105.0, 10.0)
    """
    return max(lead_s * 0.5, lead_s - SLACK_S)


def env_seconds(env: Mapping[str, str], name: str) -> Optional[float]:
    """A positive number of seconds from the environment, else None.

    >>> env_seconds({"X": "12.5"}, "X"), env_seconds({"X": "nan"}, "X"), env_seconds({}, "X")
    (12.5, None, None)
    """
    try:
        value = float(env.get(name, ""))
    except ValueError:
        return None
    return value if value > 0 and value != float("inf") else None


def checkpoint_deadline(ends_at: Optional[float], stop_deadline: Optional[float]) -> Optional[float]:
    """The time a checkpoint started now must be committed by (epoch seconds; None: none
    known). A warning's stop deadline wins; else the allocation's end less ``SLACK_S``.

    >>> checkpoint_deadline(1000.0, None), checkpoint_deadline(1000.0, 900.0)
    (985.0, 900.0)
    >>> checkpoint_deadline(None, None) is None
    True
    """
    if stop_deadline is not None:
        return stop_deadline
    return None if ends_at is None else ends_at - SLACK_S


def too_late(now: float, cost_s: Optional[float], deadline: Optional[float]) -> bool:
    """Would a checkpoint started at ``now`` that costs ``cost_s`` end after ``deadline``?

    >>> too_late(100.0, 5.0, 104.0), too_late(100.0, 5.0, 106.0)
    (True, False)
    >>> too_late(100.0, None, 101.0), too_late(100.0, 5.0, None)
    (False, False)
    """
    return cost_s is not None and deadline is not None and now + cost_s > deadline


def lateness(now: float, pace_s: float, cost_s: Optional[float],
             deadline: Optional[float]) -> Tuple[bool, bool, bool]:
    """Would a checkpoint handed in now, at the next report (``pace_s`` later), or at the
    next report after this one's own commit ended, end after ``deadline``?

    >>> lateness(100.0, 1.0, 3.0, 104.5)   # now fits; the next report's does not
    (False, False, True)
    >>> lateness(100.0, 1.0, 3.0, 103.5), lateness(100.0, 1.0, None, 101.0)
    ((False, True, True), (False, False, False))
    """
    return (too_late(now, cost_s, deadline), too_late(now + pace_s, cost_s, deadline),
            too_late(now + (cost_s or 0.0) + pace_s, cost_s, deadline))


def skipped_message(iteration: int, deadline: float, now: float, cost_s: float,
                    stopping: bool) -> str:
    """The warning of a checkpoint that is not started.

    >>> print(skipped_message(7, 103.0, 100.0, 5.25, False))
    the checkpoint of report 7 is not started: the deadline (the allocation's end) is in 3.0 s and a checkpoint of this run costs 5.2 s (measured); the last committed checkpoint stays the one a restart resumes from
    """
    which = "the stop deadline after the scheduler's warning" if stopping \
        else "the allocation's end"
    then = ("; the ranks stop now, and the next attempt resumes from the last committed "
            "checkpoint" if stopping else
            "; the last committed checkpoint stays the one a restart resumes from")
    return (f"the checkpoint of report {iteration} is not started: the deadline ({which}) "
            f"is in {max(0.0, deadline - now):.1f} s and a checkpoint of this run costs "
            f"{cost_s:.1f} s (measured){then}")


__all__ = ["ENV_ENDS_AT", "ENV_COST", "SLACK_S", "stop_window_s", "env_seconds",
           "checkpoint_deadline", "too_late", "skipped_message"]
