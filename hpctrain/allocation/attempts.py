"""The attempt loop of one allocation: the same for a local run and for the batch step.

:func:`supervise` takes a built :class:`~.supervisor.Supervisor` and runs its attempts to
the end, then handles a clean stop after the scheduler's warning (PREEMPTED): requeue when
the scheduler can, else STOPPED (:func:`.recovery.after_stop`), and ends the tracking
callbacks with the status the run is left in. What differs between the two callers is a
parameter:

* **signals**: a local run installs the handlers for the run here
  (:func:`.recovery.supervisor_signals`) and takes a warning that came while the command
  was starting (:data:`.recovery.EARLY`); the batch step installed them before it waited
  for the run's lock, on a :class:`.recovery.PendingStop`, which is handed over
  (``pending``).
* **requeue**: a local run has nothing that can requeue it (``requeue`` None); the batch
  step gives the scheduler's requeue and ``can_requeue``. From PREEMPTED to the requeue
  SIGTERM and SIGHUP are blocked, so that the time limit's SIGTERM cannot leave
  ``state.json`` saying REQUEUED with nothing queued.
* **progress**: a local run's progress panel is closed (``on_close``) before the
  callbacks' ``on_end``; the job id, the warning timer, the GPU binding and the ranks'
  environment are the Supervisor's own arguments, which the caller chooses.
"""
from __future__ import annotations

import contextlib
import signal
from typing import Any, Callable, Iterator, Optional

from hpctrain.rundir.layout import RunDir
from hpctrain.allocation.recovery import (EARLY, PendingStop, after_stop,
                                                    supervisor_signals)
from hpctrain.allocation.supervisor import INTERRUPTED, PREEMPTED, REQUEUED, Supervisor
from hpctrain.allocation.tracking import CallbackRunner


def supervise(run: RunDir, sup: Supervisor, failure_config: Any, *,
              tracking: CallbackRunner,
              pending: Optional[PendingStop] = None,
              requeue: Optional[Callable[[], object]] = None,
              can_requeue: bool = False,
              on_close: Optional[Callable[[], None]] = None) -> str:
    """Run ``sup``'s attempts to the end in this allocation; return the run's status.

    :param failure_config: the run's ``FailureConfig`` (requeue, max_requeues).
    :param tracking: the callbacks' runner, started here (its ``tick`` is the caller's to
        put in the supervisor's ``on_tick``) and ended with the final status.
    :param pending: the stand-in the caller's signal handlers already reach (the batch
        step); None: install the handlers for the run here (a local run).
    :param requeue: continues the run in a new allocation once ``state.json`` says
        REQUEUED (the batch step); None: nothing here can requeue the run.
    :param can_requeue: whether the scheduler can requeue (with ``requeue``).
    :param on_close: called at the end before the callbacks end (a progress panel).
    """
    status = INTERRUPTED
    try:
        with _signals(sup, failure_config.warning_signal, pending):
            tracking.start()
            status = sup.run_to_end()
            if status == PREEMPTED:
                if requeue is not None:
                    # from here to the requeue, the scheduler's SIGTERM (the time limit)
                    # must not leave state.json saying REQUEUED with nothing queued
                    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP})
                status = after_stop(run, sup, failure_config,
                                    can_requeue=requeue is not None and can_requeue)
    except BaseException:
        _close(on_close)
        tracking.end(status)
        raise
    _close(on_close)
    return end_allocation(run, status, tracking, requeue)


@contextlib.contextmanager
def _signals(sup: Supervisor, warning_signal: str,
             pending: Optional[PendingStop]) -> Iterator[None]:
    if pending is not None:  # the caller's handlers: a warning from now on reaches sup
        pending.hand_over(sup)
        yield
        return
    # SIGTERM/SIGHUP stop the ranks (they run in their own sessions and would not get
    # it); the warning signal (USR1) stops them cleanly at a checkpoint
    with supervisor_signals(sup, warning_signal):
        early = EARLY.take()  # a warning while `hpctrain run` was starting
        if early:
            sup.request_stop(early)
        yield


def _close(on_close: Optional[Callable[[], None]]) -> None:
    if on_close is not None:
        on_close()


def end_allocation(run: RunDir, status: str, tracking: CallbackRunner,
                   requeue: Optional[Callable[[], object]]) -> str:
    """The allocation's end: requeue first (the scheduler's warning window is for the
    requeue, not for the trackers), then the callbacks' last reports and ``on_end``:
    with the status the run is left in (STOPPED when the requeue failed), which is
    returned. After a Slurm requeue the scheduler may end this process during the
    callbacks (SIGTERM is blocked here; SIGKILL follows after Slurm's KillWait): what
    they had not delivered, the next allocation delivers (the offset in
    ``tracking.json``)."""
    ended = status
    try:
        if status == REQUEUED and requeue is not None:
            requeue()
            ended = run.read_state().get("status", status)
    finally:
        tracking.end(ended)
    return status
