"""What the supervisor's process does with signals, and what follows a clean stop.

* :func:`supervisor_signals`: the scheduler's warning signal (``failure.warning_signal``)
  asks the supervisor for a coordinated stop; SIGTERM and SIGHUP (cancel, the time
  limit, a closed terminal) stop the ranks at once and raise KeyboardInterrupt.
* :func:`after_stop`: after the ranks stopped cleanly, decide between requeueing (the
  batch step: ``scontrol requeue`` / ``qsub -W depend=afterany``) and ending the run as
  STOPPED, and record why in ``state.json``.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator, Optional

from hpctrain.rundir.layout import RunDir
from hpctrain.common.trust import private_copy, read_trusted
from hpctrain.allocation.supervisor import REQUEUED, STOPPED, Supervisor
from hpctrain.common.log import progress_line
from hpctrain.allocation.badnodes import exclusion_limit, to_exclude
from hpctrain.allocation.budgets import (DEFAULT_IDLE_ATTEMPTS, NO_PROGRESS,
                                                   count_attempt_progress, give_up, no_progress)

#: A chain of allocations ends after this many in a row that committed no new checkpoint
#: (a loop that never reaches a checkpoint within one allocation would requeue forever),
#: unless ``FailureConfig.max_attempts_without_progress`` says otherwise.
MAX_IDLE_ALLOCATIONS = DEFAULT_IDLE_ATTEMPTS


def _log(msg: str) -> None:
    progress_line(f"[hpctrain] {msg}")


class PendingStop:
    """Stands for the supervisor until it exists (the job waits for the run's lock
    first): a warning that comes meanwhile is kept and handed over."""

    def __init__(self) -> None:
        self.reason: Optional[str] = None
        self._sup: Optional[Supervisor] = None

    def request_stop(self, reason: str) -> None:
        if self._sup is not None:
            self._sup.request_stop(reason)
        elif self.reason is None:
            self.reason = reason

    def hand_over(self, sup: Supervisor) -> None:
        self._sup = sup
        if self.reason is not None:
            sup.request_stop(self.reason)

    def take(self) -> Optional[str]:
        """The warning kept so far (then forgotten)."""
        reason, self.reason = self.reason, None
        return reason


#: A warning that reached ``hpctrain run`` while it was still starting (loading the spec,
#: importing the framework), before the run's supervisor existed.
EARLY = PendingStop()


def catch_early_warnings() -> None:
    """Keep the usual warning signals in :data:`EARLY` instead of dying of them (their
    default action) until the supervisor takes over."""
    if threading.current_thread() is not threading.main_thread():
        return
    for name in ("USR1", "USR2"):
        signal.signal(getattr(signal, "SIG" + name),
                      lambda signum, frame, name=name: EARLY.request_stop(
                          f"signal SIG{name} (while starting)"))


class ThreadedRuns:
    """The supervisors of runs in threads other than the main one (a local sweep's
    trials), where no signal handler can be installed: the main thread's handler hands
    the warning to every one of them with :meth:`request_stop`, also to one that
    registers afterwards (until :meth:`reset`)."""

    def __init__(self) -> None:
        self._sups: list = []
        self._lock = threading.Lock()
        self.reason: Optional[str] = None

    def add(self, sup: Any) -> None:
        with self._lock:
            self._sups.append(sup)
        reason = self.reason  # read after adding: a warning now reaches it one way or both
        if reason is not None:
            sup.request_stop(reason)

    def discard(self, sup: Any) -> None:
        with self._lock:
            self._sups = [s for s in self._sups if s is not sup]

    def request_stop(self, reason: str) -> None:
        """Signal-handler safe: sets attributes, takes no lock."""
        if self.reason is None:
            self.reason = reason
        for sup in tuple(self._sups):
            sup.request_stop(reason)

    def reset(self) -> None:
        self.reason = None


#: Runs in worker threads of this process (see :class:`ThreadedRuns`).
THREADED = ThreadedRuns()


@contextlib.contextmanager
def supervisor_signals(sup: Any, warning_signal: str = "USR1") -> Iterator[None]:
    """Install the handlers for the duration of a run (main thread only; in another
    thread the supervisor is registered in :data:`THREADED` instead, for the main
    thread's handler to reach it); ``sup`` is a :class:`Supervisor` or a
    :class:`PendingStop`."""
    if threading.current_thread() is not threading.main_thread():
        THREADED.add(sup)
        try:
            yield
        finally:
            THREADED.discard(sup)
        return
    with stop_signals(warning_signal, sup.request_stop):
        yield


@contextlib.contextmanager
def stop_signals(warning_signal: str, on_warning: Callable[[str], None]) -> Iterator[None]:
    """The main thread's handlers while runs go on: SIGTERM/SIGHUP raise
    KeyboardInterrupt (the ranks run in their own sessions and would not get them), the
    warning signal calls ``on_warning("signal SIG<name>")``; the old handlers come back
    afterwards."""
    def terminate(signum, frame):
        raise KeyboardInterrupt(f"hpctrain got signal {signum}")

    def warn(signum, frame):
        on_warning(f"signal SIG{warning_signal}")

    handlers = {sig: terminate for sig in (signal.SIGTERM, signal.SIGHUP)}
    handlers[int(getattr(signal, "SIG" + warning_signal))] = warn
    old = {sig: signal.signal(sig, h) for sig, h in handlers.items()}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def after_stop(run: RunDir, sup: Supervisor, failure_config: Any, *, can_requeue: bool) -> str:
    """Record how a run continues after a clean stop: REQUEUED or STOPPED (with the
    reason in ``state.json``'s ``stopped_because``). Returns that status."""
    with run.update_state() as s:
        progressed = sup.made_progress()
        s["idle_allocations"] = 0 if progressed else s.get("idle_allocations", 0) + 1
        count_attempt_progress(s, progressed)
        requeues = s.get("requeues", 0)
        why = None
        if not can_requeue:
            why = "a run started here (not by a batch scheduler) is not requeued"
        elif not failure_config.requeue:
            why = "failure.requeue is false"
        elif failure_config.max_requeues != -1 and requeues >= failure_config.max_requeues:
            why = f"failure.max_requeues ({failure_config.max_requeues}) is reached"
        elif no_progress(s, failure_config):
            why = no_progress(s, failure_config)
            give_up(s, NO_PROGRESS, why)
        if why:
            s["status"] = STOPPED
            s["stopped_because"] = why
        else:
            s["status"] = REQUEUED
            s["requeues"] = requeues + 1
            s.pop("stopped_because", None)
    if why:
        _log(f"run STOPPED after a clean stop, not requeued: {why}. Continue it by running "
             f"or submitting it again, or with Trainer.restore({run.path!r}).fit()")
        return STOPPED
    return REQUEUED


def requeue(run: RunDir, scheduler: Any, job_id: str, *, num_nodes: int = 1,
            max_excluded: int = 0) -> Optional[str]:
    """Continue the run in a new allocation (state already says REQUEUED), without the
    nodes blamed for its failures where the scheduler can (badnodes.py). Returns the
    new job id of a resubmission; after a Slurm requeue this process is usually killed
    by the scheduler before it returns."""
    exclude = to_exclude(run.read_state(), exclusion_limit(
        max_excluded, scheduler.partition_nodes() if max_excluded else 0, num_nodes))
    _log(f"requeueing: job {job_id} continues in a new allocation from its latest "
         "committed checkpoint" + (f", without node(s) {', '.join(exclude)} (blamed for a "
                                   "failure)" if exclude else ""))
    sys.stdout.flush()
    # the scheduler ends this instance now: leave quietly instead of as an interruption
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        # PBS and LSF submit job.sh again from disk: only a script nobody else could
        # write, and exactly the bytes checked (a private copy: the run directory's path
        # may lead elsewhere by the time qsub reads it)
        try:
            script = read_trusted(run.job_script, what="the job script to submit again")
        except FileNotFoundError:  # (Slurm requeues its own copy of the script)
            new_id = scheduler.requeue_excluding(job_id, run.job_script, exclude)
        else:
            with private_copy(script, os.path.basename(run.job_script)) as path:
                new_id = scheduler.requeue_excluding(job_id, path, exclude)
    except Exception as e:  # noqa: BLE001 - the run must end in a clear state
        with run.update_state() as s:
            s["status"] = STOPPED
            s["stopped_because"] = f"requeueing failed: {e}"
            s["requeues"] = max(0, s.get("requeues", 1) - 1)
        _log(f"requeueing failed ({e}); the run is STOPPED and resumes when submitted "
             "again")
        return None
    if new_id:
        with run.update_state() as s:
            s.setdefault("submissions", []).append(
                {"job_id": new_id, "scheduler": scheduler.name, "time": time.time(),
                 "script": "job.sh", "after": job_id,
                 **({"excluded_nodes": exclude} if exclude else {})})
        _log(f"submitted job {new_id} to continue after job {job_id}")
    return new_id
