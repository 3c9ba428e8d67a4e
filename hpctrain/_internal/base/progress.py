"""This rank's progress count, moved by the training thread and read by the rank's
heartbeat thread (``_internal/worker/heartbeat.py``) for the supervisor's hang watchdog.

:func:`beat` is called by ``report()`` and by each batch of a prepared data loader: one
integer increment and one clock read, cheap enough for every step.
"""
from __future__ import annotations

import time

count = 0          # moves made so far
at = time.time()   # when the count last moved
#: seconds this rank spent inside report() so far (Ray's
#: train_report_total_blocked_time_s; the supervisor's metrics file shows it)
report_blocked_s = 0.0


def beat() -> None:
    """This rank made progress (a report, a batch)."""
    global count, at
    count += 1
    at = time.time()


def blocked(seconds: float) -> None:
    """One ``report()`` call took ``seconds`` of the training thread's time."""
    global report_blocked_s
    report_blocked_s += seconds
