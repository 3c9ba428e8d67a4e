"""The allocation side: what runs on the first node of a job (or in the driver for a local
run) and owns the worker group across attempts.

* :mod:`.supervisor` — starts, watches and restarts the ranks of one attempt.
* :mod:`.recovery` — the scheduler's signals, stop/requeue/resubmit after a clean stop.
* :mod:`.tracking` — runs the tracking callbacks next to the supervisor.
"""
