"""This rank's progress, moved by the training thread and read by the rank's heartbeat
thread (``worker/heartbeat.py``) for the supervisor's hang watchdog.

Nothing here costs the training thread a call per batch. ``report()`` calls
:func:`beat` (one increment). A prepared data loader registers the
iterator of each pass with :func:`reading` (once per pass) and the heartbeat thread reads
the batch count that torch's own DataLoader iterator keeps (``_num_yielded``); when the
pass ends, :func:`done_reading` adds its batches to :data:`count`. :func:`moves` is the
total the heartbeat writes: reports and batches so far, the same on every rank of a
data-parallel loop at the same step.
"""
from __future__ import annotations

from typing import Any, Dict

count = 0  # reports, and batches of the passes that ended
_reading: Dict[int, Any] = {}  # id -> iterator of a pass being read (torch counts its batches)
#: seconds this rank spent inside report() so far (Ray's
#: train_report_total_blocked_time_s; the supervisor's metrics file shows it)
report_blocked_s = 0.0


#: the wall-clock time of this rank's latest report, and the count it left (report() sets
#: them: the straggler statistics want the moment a rank arrived, which a heartbeat
#: written seconds later cannot tell)
reported_at = 0.0
reported_count = -1


def reported(at: float) -> None:
    """A report began at ``at`` (epoch seconds), after its :func:`beat`."""
    global reported_at, reported_count
    reported_at, reported_count = at, count


def beat() -> None:
    """This rank made progress (a report; a loader without a batch count of its own)."""
    global count
    count += 1


def reading(iterator: Any) -> None:
    """A pass of a prepared loader begins: its iterator counts its batches itself."""
    _reading[id(iterator)] = iterator


def done_reading(iterator: Any) -> None:
    """The pass ended (or was abandoned): its batches join :data:`count`."""
    global count
    if _reading.pop(id(iterator), None) is not None:
        count += batches(iterator)


def batches(iterator: Any) -> int:
    n = getattr(iterator, "_num_yielded", 0)
    return n if isinstance(n, int) else 0


def moves() -> int:
    """Reports and batches so far (read from another thread: a pass ending at the same
    moment may be counted twice for one look, never lost)."""
    live = list(_reading.values())
    return count + sum(batches(it) for it in live)


def blocked(seconds: float) -> None:
    """One ``report()`` call took ``seconds`` of the training thread's time."""
    global report_blocked_s
    report_blocked_s += seconds
