"""This rank's progress count, moved by the training thread and read by the rank's
heartbeat thread (``_internal/worker/heartbeat.py``) for the supervisor's hang watchdog.

:func:`beat` is called by ``report()`` and by each batch of a prepared data loader: one
integer increment and one clock read, cheap enough for every step.
"""
from __future__ import annotations

import time

count = 0          # moves made so far
at = time.time()   # when the count last moved


def beat() -> None:
    """This rank made progress (a report, a batch)."""
    global count, at
    count += 1
    at = time.time()
