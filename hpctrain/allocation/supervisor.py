"""The supervisor owns the worker group of one run inside one allocation.

It runs in the batch step on a cluster (``python -m hpctrain.cli.batch``) and in
the driver process for local runs, the same code either way. Per attempt it picks the
checkpoint to resume from (the latest committed one that verifies), starts every rank
through the launcher, waits, and on a failure stops the remaining ranks, finds the rank
that failed first, counts the failure in ``state.json`` and restarts while
``max_failures`` allows.

The scheduler's warning (a signal handed to :meth:`Supervisor.request_stop`, or the
supervisor's own timer ``warn_at``) writes the attempt's stop file; the ranks agree on it
at their next report, commit the next checkpoint and exit cleanly. Ranks still running at
the deadline are stopped. :meth:`Supervisor.run_to_end` then returns PREEMPTED and the
caller requeues (batch step) or ends the run as STOPPED (local).
"""
from __future__ import annotations

import glob
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from hpctrain.config import CheckpointConfig, FailureConfig
from hpctrain.launchers.base import ExitRecord, Launcher, LineSink, WorkerGroup
from hpctrain.allocation.watchdog import Hang, Watchdog
from hpctrain.allocation.badnodes import blame, blamed_host
from hpctrain.allocation.stragglers import Pace
from hpctrain.allocation.lead import MARGIN, measured_lead_s
from hpctrain.allocation.budgets import (HANG, NODE, USER, count_failure, give_up,
                                                   no_progress, spent)
from hpctrain.common.log import get_logger
from hpctrain.common.deadline import ENV_COST, ENV_ENDS_AT, stop_window_s

_logger = get_logger("supervisor")
from hpctrain.rundir.commit import verify_checkpoint
from hpctrain.rundir.handed_in import finish_handed_in
from hpctrain.rundir.local_tier import damaged_checkpoints, restore_summary
from hpctrain.common.fsutil import read_json
from hpctrain.rundir.layout import DECISION_FILE, RunDir
from hpctrain.common.fsutil import atomic_write_bytes, atomic_write_json
from hpctrain.worker.heartbeat import (DEFAULT_INTERVAL_S as DEFAULT_HEARTBEAT_S,
                                                ENV_INTERVAL as ENV_HEARTBEAT, STACKS_REQUEST)
from hpctrain.worker.entry import (ENV_ATTEMPT, ENV_CKPT_INDEX, ENV_GROUP_SECRET,
                                             ENV_RESUME, ENV_RUN_DIR, ENV_START_ITER,
                                             ENV_WARNING_SIGNAL, STOP_FILE)
from hpctrain.launchers.local import LocalLauncher
from hpctrain.containers import worker_command
from hpctrain.launchers.warm import WarmLocalLauncher, warm_spares_requested

FINISHED, FAILED, RUNNING, INTERRUPTED = "FINISHED", "FAILED", "RUNNING", "INTERRUPTED"
#: The run stopped cleanly after the scheduler's warning; REQUEUED: waiting for its next
#: allocation; STOPPED: not requeued (local run, requeue off, or no progress).
PREEMPTED, REQUEUED, STOPPED = "PREEMPTED", "REQUEUED", "STOPPED"
#: An attempt ended by a sweep's scheduler to start again (a PBT exploit).
RESTARTED = "RESTARTED"
#: An attempt that was RUNNING when its allocation vanished (node loss, kill -9 of the job).
LOST = "LOST"

#: Errors a rank raises because a *peer* went away (Gloo/NCCL/MPI lost the connection).
#: They are consequences: a rank that died on its own (a signal, its own exception) is
#: the root cause even when a peer's record of the lost connection carries an earlier time.
SECONDARY = ("Connection closed by peer", "Connection reset by peer", "Read error",
             "Broken pipe", "Connection refused", "NCCL communicator was aborted",
             "Socket Timeout", "connection closed",
             # XGBoost's collective when a peer is gone ("Ring Allreduce failed. ... Poll
             # error condition"): its message is in the traceback, above a native stack
             "Allreduce failed", "Allgather failed", "Broadcast failed", "Poll error")


@dataclass
class Failure:
    rank: int
    time: float
    summary: str
    traceback: str
    host: str = ""
    pid: int = 0
    #: the launcher could not start the ranks (its own message): never a consequence
    launcher: bool = False
    #: what the failure counts toward (budgets.py): "user", "node" or "hang"
    cause: str = NODE


@dataclass
class _Ending:
    """How the watch of one attempt's ranks ended."""
    exits: List[ExitRecord]
    hang: Optional[Hang] = None
    #: the ranks were stopped at the stop deadline after the warning
    at_deadline: bool = False
    #: a sweep's scheduler decided (rank 0's decision file)
    decision: Optional[Dict] = None


SETTLE_S = 1.0  # after a rank failed, how long its peers get to end (and record) on their own


def compact_ranks(ranks: List[int]) -> str:
    """``[0, 1, 2, 3, 7]`` → ``"0-3, 7"``."""
    spans: List[List[int]] = []
    for r in sorted(set(ranks)):
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def _maybe_warm(launcher: Launcher, python: str, extra_env: Optional[Dict[str, str]]):
    """The local launcher with warm spares when ``HPCTRAIN_WARM_SPARES=1`` (see
    :mod:`hpctrain.launchers.warm`); any other launcher as given."""

    if type(launcher) is LocalLauncher and launcher.container is None and (
            warm_spares_requested() or warm_spares_requested(extra_env or {})):
        return WarmLocalLauncher(python)
    return launcher


def is_secondary(f: Failure) -> bool:
    """True for a failure that reports a lost peer rather than its own fault (its last
    line, or its traceback when a library's message sits above a native stack trace).

    >>> is_secondary(Failure(0, 0.0, "[bt] (8) libxgboost.so(+0x5add07)",
    ...                      "XGBoostError: Ring Allreduce failed. [bt] (8) ..."))
    True
    >>> is_secondary(Failure(1, 0.0, "ValueError: bad shape", "ValueError: bad shape"))
    False
    """
    return not f.launcher and any(s in f.summary or s in f.traceback for s in SECONDARY)


@dataclass
class AttemptPlan:
    """What every attempt of one run in this allocation starts from, built once (by
    ``Run.run_here``): the same for each attempt."""
    num_workers: int
    job_id: str
    #: the budgets, the warning's signal, the hang limit, the straggler factor
    failure: FailureConfig = field(default_factory=FailureConfig)
    #: the node-local tier (``local_dir``); how a checkpoint the ranks handed in but did
    #: not publish is committed after their end (handed_in.py)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    #: how long before the end the warning comes (None: ``failure``'s warning_time; a
    #: batch job: the one its script asked the scheduler for)
    warning_s: Optional[float] = None
    #: epoch seconds: the supervisor's own timer (PBS), and when the allocation ends
    #: (None: unknown)
    warn_at: Optional[float] = None
    ends_at: Optional[float] = None
    #: the first attempt resumes from it when the run has no checkpoint of its own
    initial_checkpoint: Optional[str] = None
    first_checkpoint_index: int = 0
    python: str = sys.executable
    #: added to every rank's environment
    extra_env: Dict[str, str] = field(default_factory=dict)
    #: between SIGTERM and SIGKILL when the ranks are stopped
    kill_grace_s: float = 10.0

    def __post_init__(self) -> None:
        if self.warning_s is None:
            self.warning_s = self.failure.warning_s
        #: None: learned from the run's pace; 0: no watchdog
        self.hang_timeout_s = self.failure.hang_timeout_s

    @property
    def max_failures(self) -> int:
        return self.failure.max_failures

    @property
    def warning_signal(self) -> str:
        return self.failure.warning_signal

    @property
    def local_tier(self) -> bool:
        """CheckpointConfig(local_dir=...): a restart reads the ranks' local copies, so
        the shared copy is checked by sizes here and by content only where a rank reads
        it."""
        return bool(self.checkpoint.local_dir)


class Supervisor:
    def __init__(self, run: RunDir, plan: AttemptPlan, *, launcher: Launcher,
                 on_line: Optional[LineSink] = None,
                 on_tick: Optional[Callable[[], None]] = None):
        self.run = run
        self.plan = plan
        self.launcher = _maybe_warm(launcher, plan.python, plan.extra_env)
        self.on_line = on_line
        self.on_tick = on_tick or (lambda: None)
        self.attempt_checkpoint: Optional[str] = None  # the newest one when it started
        # the warning's lead time from the measured checkpoint cost (lead.py)
        self.lead_s, self.checkpoint_cost = plan.warning_s, None
        self.stop_lead_s: Optional[float] = None  # the lead of a warning of our own
        self.lead_checked = 0.0
        self.stop_reason: Optional[str] = None
        self.stop_time: Optional[float] = None
        self.checkpoint_at_start: Optional[str] = None
        self.own_failures: List[int] = []  # set by _root_cause

    # -- the warning ---------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        """The scheduler warned (time limit, preemption): stop at the next checkpoint.
        Signal-handler safe (only sets attributes); the wait loop acts on it."""
        if self.stop_time is None:
            self.stop_reason, self.stop_time = reason, time.time()

    @property
    def stop_deadline(self) -> Optional[float]:
        """When ranks still running after the warning are stopped: late enough to
        checkpoint, early enough to requeue before the scheduler kills the job."""
        if self.stop_time is None:
            return None
        lead = self.stop_lead_s or self.plan.warning_s
        return self.stop_time + stop_window_s(lead)

    def _check_timer(self) -> None:
        if self.plan.warn_at is not None and self.stop_time is None and time.time() >= self.plan.warn_at:
            self.request_stop(f"{self.plan.warning_s:.0f} s before the walltime ends "
                              "(the supervisor's timer)")
        if self.plan.ends_at is not None and self.stop_time is None \
                and self.lead_s > self.plan.warning_s and time.time() >= self.plan.ends_at - self.lead_s:
            self.stop_lead_s = self.lead_s
            self.request_stop(
                f"{self.lead_s:.0f} s before the walltime ends (the supervisor's timer: "
                f"the ranks get {MARGIN:g} × the measured checkpoint cost of "
                f"{self.checkpoint_cost:.1f} s to stop, more than failure.warning_time "
                f"= {self.plan.warning_s:.0f} s allows)")

    def run_to_end(self) -> str:
        """Run attempts until success or until failures exceed ``max_failures``.
        Returns the final status (FINISHED or FAILED)."""
        with self.run.exclusive():
            # the previous allocation's last attempt (its supervisor may have died with it)
            self._settle_staged(len((self.run.read_state() or {}).get("attempts") or []))
            with self.run.update_state() as s:
                s.setdefault("created", time.time())
                s.setdefault("name", self.run.name)
                s.setdefault("attempts", [])
                s.setdefault("failures", 0)
                for a in s["attempts"]:  # this run's previous allocation vanished under it
                    if a.get("outcome") == RUNNING:
                        a["outcome"] = LOST
                s["status"] = RUNNING
                s.pop("stopped_because", None)
                if s.pop("gave_up", None):  # started again by hand: fresh attempts
                    s["idle_attempts"] = 0
                s["job_ids"] = s.get("job_ids", []) + (
                    [] if self.plan.job_id in s.get("job_ids", []) else [self.plan.job_id])
                s["max_failures"] = self.plan.max_failures
            latest = self.run.list_checkpoints()
            self.checkpoint_at_start = latest[-1].path if latest else None
            self.lead_s, self.checkpoint_cost = measured_lead_s(latest, self.plan.warning_s)
            try:
                while True:
                    self._check_timer()
                    if self.stop_time is not None:  # warned before (another) attempt started
                        self._log(f"warned ({self.stop_reason}) before the ranks started; "
                                  "not starting them")
                        return PREEMPTED
                    status = self._one_attempt()
                    if status is not None:
                        return status
            finally:
                close = getattr(self.launcher, "close", None)
                if close is not None:  # warm spares (fast restarts) end with the run
                    close()

    def made_progress(self) -> bool:
        """True when this allocation committed a checkpoint newer than the one it began
        with."""
        latest = self.run.list_checkpoints()
        return bool(latest) and latest[-1].path != self.checkpoint_at_start

    def _resume_point(self):
        """The newest committed checkpoint that passes verification (sizes and content
        digests), and the newer ones that did not: a checkpoint damaged after its commit
        is skipped in favour of the previous one, with a warning, and moved aside
        (``.damaged_…``, kept): it no longer counts toward ``num_to_keep``, so retention
        keeps that many good ones, and the one resumed from is the latest. With a local
        tier, content digests are checked only for a checkpoint that a rank of the last
        attempt, reading it, found damaged (:mod:`..rundir.local_tier`)."""
        skipped = []
        last = len(self.run.read_state().get("attempts") or [])
        damaged = set(damaged_checkpoints(self.run, last)) if self.plan.local_tier and last else set()
        for record in reversed(self.run.list_checkpoints()):
            problems = verify_checkpoint(record.path, self.run.storage,
                                         contents=not self.plan.local_tier or
                                         os.path.basename(record.path) in damaged)
            if not problems:
                return record, skipped
            name = os.path.basename(record.path)
            try:
                aside = self.run.set_aside(record.path)
            except OSError as e:  # left in place: still skipped
                aside = f"{record.path} (it could not be moved aside: {e.strerror or e})"
            self._log(f"WARNING: checkpoint {name} failed verification "
                      f"({'; '.join(problems[:3])}); resuming from an earlier one. Moved "
                      f"aside to {aside} (kept, not deleted)")
            skipped.append({"checkpoint": name, "problems": problems[:10], "moved_to": aside})
        return None, skipped

    def _one_attempt(self) -> Optional[str]:
        """One attempt: start its ranks, watch them until an ending, settle the ending
        into a status (None: restart) and the budgets."""
        attempt, env = self._begin_attempt()
        container = self.launcher.container
        group = self.launcher.launch(
            command=container.command(self.run.path) if container is not None
            else worker_command([self.plan.python], self.run.path),
            env=env, num_workers=self.plan.num_workers,
            log_dir=self.run.logs_dir(self.plan.job_id), on_line=self.on_line)
        pace = Pace(self.plan.failure.straggler_factor or 0)
        watchdog = self._watchdog(attempt, pace)
        try:
            ending = self._watch(attempt, group, pace, watchdog)
        except BaseException:  # Ctrl-C or the driver dying: never leave ranks behind
            # the state first: the scheduler's SIGKILL may follow its SIGTERM sooner than
            # the ranks end (Slurm's KillWait; 5 s on the test cluster, kill_grace_s is 10)
            try:
                self._end_attempt(attempt, INTERRUPTED, None)
                with self.run.update_state() as s:
                    s["status"] = INTERRUPTED
            finally:
                group.terminate(self.plan.kill_grace_s)
            self._settle_staged(attempt, group, clean=False)  # the next allocation cleans
            raise
        return self._settle(attempt, group, ending, pace, watchdog)

    def _begin_attempt(self) -> Tuple[int, Dict[str, str]]:
        """Record the next attempt in state.json (what it resumes from) and return its
        number and its ranks' environment."""
        latest, skipped = self._resume_point()
        resume = latest.path if latest else self.plan.initial_checkpoint
        newest = self.run.list_checkpoints()
        self.attempt_checkpoint = newest[-1].path if newest else None
        self.lead_s, self.checkpoint_cost = measured_lead_s(newest, self.plan.warning_s)
        self.lead_checked = time.time()
        with self.run.update_state() as s:
            attempt = len(s["attempts"]) + 1
            s["attempts"].append({"attempt": attempt, "job_id": self.plan.job_id,
                                  "started": time.time(), "resumed_from": resume,
                                  "outcome": RUNNING})
            if skipped:
                s["attempts"][-1]["skipped_checkpoints"] = skipped
            s["restart_count"] = attempt - 1
        env = dict(os.environ)
        env.update(self.plan.extra_env)
        env.update({
            ENV_RUN_DIR: self.run.path, ENV_ATTEMPT: str(attempt),
            # a fresh secret per attempt for the ranks' coordination group (rendezvous.py):
            # the environment only, never argv (Open MPI exports it by name, -x NAME)
            ENV_GROUP_SECRET: secrets.token_hex(16),
            "HPCTRAIN_RESTART_COUNT": str(attempt - 1), "HPCTRAIN_JOB_ID": self.plan.job_id,
            ENV_RESUME: resume or "", ENV_CKPT_INDEX: str(max(self.run.next_checkpoint_index(),
                                   self.plan.first_checkpoint_index)),
            ENV_START_ITER: str(latest.iteration if latest else 0),
            ENV_WARNING_SIGNAL: self.plan.warning_signal,
            # a checkpoint that cannot be committed before the deadline is not started
            # (deadline.py): the ranks learn the allocation's end and the measured cost
            ENV_ENDS_AT: f"{self.plan.ends_at:.3f}" if self.plan.ends_at else "",
            ENV_COST: f"{self.checkpoint_cost:.3f}" if self.checkpoint_cost else "",
        })
        hang_s = self.plan.hang_timeout_s
        if hang_s and ENV_HEARTBEAT not in env:  # a short fixed limit: beat often
            env[ENV_HEARTBEAT] = f"{min(DEFAULT_HEARTBEAT_S, max(0.2, hang_s / 5)):g}"
        for d in (self.run.logs_dir(self.plan.job_id), self.run.attempt_dir(attempt)):
            self.run.makedirs(d)  # the run's mode whatever this process's umask
        return attempt, env

    def _watch(self, attempt: int, group: WorkerGroup, pace: Pace,
               watchdog: Optional[Watchdog]) -> "_Ending":
        """Watch the ranks until they all ended, one failed, a hang, a sweep's decision,
        or the stop deadline after the warning (the warning itself writes the stop file)."""
        stop_written = False
        decision_file = os.path.join(self.run.attempt_dir(attempt), DECISION_FILE)
        while True:
            exits = group.wait_any_failure(0.1)  # also how soon a warning is acted on
            if os.path.exists(decision_file):  # a sweep's scheduler decided (tune._control)
                return _Ending(exits or [], decision=read_json(decision_file) or None)
            self.on_tick()
            self._check_timer()
            hang = watchdog.poll() if watchdog is not None and exits is None \
                and not stop_written else None
            self._pace_tick(attempt, pace)
            if self.plan.ends_at is not None and time.time() - self.lead_checked > 30:
                self.lead_checked = time.time()  # the checkpoints committed since
                self.lead_s, self.checkpoint_cost = measured_lead_s(
                    self.run.list_checkpoints(), self.plan.warning_s)
            if exits is not None:
                return _Ending(exits)
            if hang is not None:
                self._collect_stacks(attempt, hang)
                group.terminate(self.plan.kill_grace_s)
                return _Ending(group.exits(), hang=hang)
            if self.stop_time is not None and not stop_written:
                stop_written = True
                self._write_stop(attempt)
            if stop_written and time.time() >= self.stop_deadline:
                self._log("the ranks did not commit a checkpoint by the deadline; "
                          "stopping them (the run resumes from its last committed "
                          "checkpoint)")
                # SIGKILL early enough to requeue before the scheduler's own kill
                left = self.stop_time + self.plan.warning_s - time.time()
                group.terminate(min(self.plan.kill_grace_s, max(1.0, left / 2)))
                return _Ending(group.exits(), at_deadline=True)

    def _settle(self, attempt: int, group: WorkerGroup, ending: "_Ending", pace: Pace,
                watchdog: Optional[Watchdog]) -> Optional[str]:
        """The attempt's status from how its watch ended: FINISHED, PREEMPTED, FAILED, or
        None (the next attempt starts)."""
        # a sweep's decision written while the watch ended otherwise (a hang, the
        # deadline, the ranks' exits) is still followed
        decision = ending.decision or read_json(
            os.path.join(self.run.attempt_dir(attempt), DECISION_FILE))
        if decision:
            return self._after_decision(attempt, group, decision)
        if self.stop_time is None and glob.glob(os.path.join(
                self.run.attempt_dir(attempt), "stopped.rank-*.json")):
            # the ranks got the warning signal themselves (`scancel --signal=USR1 <job>`
            # signals the job's steps, not the batch step) and stopped at a checkpoint
            self.request_stop("the warning signal, sent to the ranks")
        if self.stop_time is not None:
            outcome = self._after_warning(attempt, group, ending.exits, ending.at_deadline)
            if outcome is not None:
                return outcome
        if watchdog is not None:
            self._learn(watchdog)
        self._pace_tick(attempt, pace, final=True)
        failed = [e for e in ending.exits if e.returncode != 0]
        if ending.hang is not None:
            failed = failed or [ExitRecord(ending.hang.rank, -15, time.time())]
        if not failed:
            group.terminate(self.plan.kill_grace_s)  # reaps output threads; ranks are done
            self.on_tick()
            self._end_attempt(attempt, FINISHED, None)
            with self.run.update_state() as s:
                s["status"] = FINISHED
            return FINISHED
        return self._after_failure(attempt, group, failed, ending.hang)

    def _after_failure(self, attempt: int, group: WorkerGroup, failed: List[ExitRecord],
                       hang: Optional[Hang]) -> Optional[str]:
        """A rank failed or hung: find the root cause, record it, count it toward its
        budgets; None (restart from the latest checkpoint) or FAILED (a budget spent)."""
        if hang is None:
            # the other ranks a moment to end on their own: ranks that raise the same error
            # at the same step each record it, and the report names them all
            settle = time.time() + SETTLE_S
            while time.time() < settle and len(group.exits()) < self.plan.num_workers:
                time.sleep(0.05)
        group.terminate(self.plan.kill_grace_s)
        # every exit now, not only those seen when the first failure woke us: a rank
        # killed by a signal is recorded by its own waiter thread, which on a busy node
        # can run after a peer's "connection closed" exit (the peer would be blamed)
        failed = [e for e in group.exits() if e.returncode != 0] or failed
        # commit what every rank handed in, then free what the failed attempt left
        # half-written (a full disk needs the room for state.json and error.txt)
        self._settle_staged(attempt, group)
        failure = self._hang_failure(attempt, hang) if hang is not None \
            else self._root_cause(attempt, failed)
        self._end_attempt(attempt, FAILED, failure,
                          [failure.rank] if hang is not None else self.own_failures)
        if hang is not None:
            with self.run.update_state() as s:
                s["attempts"][attempt - 1]["hang"] = {
                    "rank": hang.rank, "stalled_ranks": hang.stalled, "limit_s": hang.limit_s,
                    "learned": hang.learned, "phase": hang.phase,
                    "stacks": sorted(os.path.basename(p) for p in glob.glob(os.path.join(
                        self.run.attempt_dir(attempt), "stacks.rank-*.txt")))}
        self.on_tick()
        failures, gave_up = self._count_failure(attempt, failure, hang)
        if gave_up is None:
            self.run.clean_incomplete()
            who = f"rank {failure.rank} failed" if failure.rank >= 0 else "the launcher failed"
            limit = self.plan.max_failures
            self._log(f"{who} ({failure.summary}); restarting the worker "
                      f"group from the latest checkpoint (failure {failures} of "
                      f"{'unlimited' if limit == -1 else limit})")
            return None
        self._log(f"WARNING: not restarting: {gave_up[1]}")
        self._write_error(attempt, failure, gave_up[1])
        with self.run.update_state() as s:
            s["status"] = FAILED
        return FAILED

    def _count_failure(self, attempt: int, failure: Failure, hang: Optional[Hang]
                       ) -> Tuple[int, Optional[Tuple[str, str]]]:
        """Count the failure toward its cause's budget and max_failures (budgets.py),
        blame its node; returns the failures so far and (reason, message) where the run
        gives up (a budget spent, or no progress)."""
        cause = HANG if hang is not None else failure.cause
        newest = self.run.list_checkpoints()
        progressed = bool(newest) and newest[-1].path != self.attempt_checkpoint
        budgets = self.plan.failure
        with self.run.update_state() as s:
            s["attempts"][attempt - 1]["cause"] = cause
            count_failure(s, cause, progressed)
            if cause != USER:  # its node is kept out of the next allocation
                blame(s, hang.host if hang is not None else blamed_host(
                    self.run.attempt_dir(attempt), failure.rank, failure.host),
                      cause, attempt, self.plan.job_id)
            gave_up = spent(s, cause, budgets)
            idle = no_progress(s, budgets, failed=True) if gave_up is None else None
            if idle:
                gave_up = ("no_progress", idle)
            if gave_up is not None:
                give_up(s, *gave_up)
            return s["failures"], gave_up

    # -- hangs -------------------------------------------------------------------------
    def _watchdog(self, attempt: int, pace: Pace) -> Optional[Watchdog]:
        if self.plan.hang_timeout_s == 0:
            return None
        state = self.run.read_state() or {}
        return Watchdog(self.run.attempt_dir(attempt), self.plan.num_workers, started=time.time(),
                        timeout_s=self.plan.hang_timeout_s,
                        learned_startup_s=float(state.get("learned_startup_s") or 0.0),
                        check_s=min(1.0, (self.plan.hang_timeout_s or 5.0) / 5),
                        on_record=pace.observe)

    # -- stragglers --------------------------------------------------------------------
    PACE_SAVE_S = 10.0  # how often a running attempt's step times reach state.json

    def _pace_tick(self, attempt: int, pace: Pace, final: bool = False) -> None:
        """Warn once about a straggler; keep the per-rank step times in the attempt's
        record (every PACE_SAVE_S, and at its end)."""
        warning = pace.warning()
        if warning:
            self._log(f"WARNING: {warning}")
        now = time.time()
        if not (final or warning or now - pace.saved >= self.PACE_SAVE_S):
            return
        pace.saved = now
        summary, first = pace.summary(), pace.first_move()
        if summary is None and first is None:
            return
        with self.run.update_state() as s:
            rec = s["attempts"][attempt - 1]
            if first is not None:  # the end of its start-up (goodput.py)
                rec["first_progress"] = round(first, 3)
            if summary is not None:
                rec["pace"] = summary
            if warning:
                rec["straggler"] = warning

    def _learn(self, watchdog: Watchdog) -> None:
        """Keep the longest start-up seen for the next attempts' start-up limit."""
        seen = watchdog.startup_seen_s()
        if seen > 0:
            with self.run.update_state() as s:
                s["learned_startup_s"] = max(seen, float(s.get("learned_startup_s") or 0.0))

    def _collect_stacks(self, attempt: int, hang: Hang) -> None:
        """Ask every rank for its Python stacks and give them a few heartbeats to write
        them (``stacks.rank-R.txt`` in the attempt's directory)."""
        adir = self.run.attempt_dir(attempt)
        self._log(f"WARNING: {hang.summary()}; stalled ranks: {compact_ranks(hang.stalled)}. "
                  f"Writing every rank's stack to {adir}, then ending the attempt")
        atomic_write_json(os.path.join(adir, STACKS_REQUEST), {"time": time.time(),
                                                               "reason": hang.summary()},
                          sync=False, mode=self.run.file_mode)
        try:
            beat = float(os.environ.get(ENV_HEARTBEAT) or DEFAULT_HEARTBEAT_S)
        except ValueError:
            beat = DEFAULT_HEARTBEAT_S
        if self.plan.hang_timeout_s:
            beat = min(beat, max(0.2, self.plan.hang_timeout_s / 5))
        deadline = time.time() + 2 * beat + 3
        while time.time() < deadline and len(glob.glob(
                os.path.join(adir, "stacks.rank-*.txt"))) < self.plan.num_workers:
            time.sleep(0.1)
        time.sleep(0.2)  # the last file's writer finishing

    def _hang_failure(self, attempt: int, hang: Hang) -> Failure:
        adir = self.run.attempt_dir(attempt)
        parts = [hang.summary() + f"; stalled ranks: {compact_ranks(hang.stalled)}.\n"]
        for rank in range(self.plan.num_workers):
            path = os.path.join(adir, f"stacks.rank-{rank}.txt")
            shown = [hang.rank] + [r for r in hang.stalled if r != hang.rank][:1]
            if os.path.exists(path) and rank in shown:
                try:
                    with open(path, errors="replace") as f:
                        parts.append(f"\n--- {os.path.relpath(path, self.run.path)} ---\n"
                                     + f.read()[-6000:])
                except OSError:
                    pass
        missing = [r for r in range(self.plan.num_workers)
                   if not os.path.exists(os.path.join(adir, f"stacks.rank-{r}.txt"))]
        if missing:
            parts.append(f"\nranks {compact_ranks(missing)} wrote no stacks (their Python "
                         "threads could not run: native code holding the GIL, or the "
                         "process gone)\n")
        parts.append(f"\nevery rank's stacks: {os.path.relpath(adir, self.run.path)}"
                     "/stacks.rank-*.txt\n")
        return Failure(hang.rank, time.time(), hang.summary(), "".join(parts), hang.host, 0)

    def _after_decision(self, attempt: int, group, decision: Dict) -> Optional[str]:
        """Rank 0 of a sweep's trial ended on its scheduler's decision (written at a
        report): stop the other ranks; "stop" ends the run as FINISHED (its committed
        checkpoints kept, ``stopped_by`` in state.json), "restart" (a PBT exploit: the
        newest checkpoint and the config were replaced) starts the next attempt, not
        counted as a failure."""
        group.terminate(self.plan.kill_grace_s)
        if decision.get("action") == "restart":
            # a PBT exploit: rank 0 published the donor's checkpoint as the newest; what the
            # trial itself staged must not be committed after it
            self.run.clean_incomplete()
        else:
            self._settle_staged(attempt, group)
        self.on_tick()
        reason = decision.get("reason", "")
        if decision.get("action") == "restart":
            self._end_attempt(attempt, RESTARTED, None)
            self._log(f"{reason}: restarting the worker group from the newest checkpoint")
            return None
        self._end_attempt(attempt, FINISHED, None)
        with self.run.update_state() as s:
            s["attempts"][attempt - 1]["stopped_by"] = reason
            s["stopped_by"] = reason
            s["stopped_at_iteration"] = decision.get("iteration")
            s["status"] = FINISHED
        self._log(f"stopped after report {decision.get('iteration')}: {reason}")
        return FINISHED

    def _write_stop(self, attempt: int) -> None:
        self._log(f"warning: {self.stop_reason}; the ranks checkpoint at their next report "
                  f"and stop (deadline in {self.stop_deadline - time.time():.0f} s)")
        adir = self.run.attempt_dir(attempt)
        self.run.makedirs(adir)
        atomic_write_json(os.path.join(adir, STOP_FILE), {
            "reason": self.stop_reason, "time": self.stop_time,
            "deadline": self.stop_deadline}, sync=False, mode=self.run.file_mode)

    def _after_warning(self, attempt: int, group, exits: List[ExitRecord],
                       at_deadline: bool) -> Optional[str]:
        """How an attempt ended after the warning: FINISHED (the training completed
        anyway), PREEMPTED (stopped cleanly, or at the deadline), or None: a rank failed
        on its own before the deadline, handled as any failure."""
        group.terminate(self.plan.kill_grace_s)
        adir = self.run.attempt_dir(attempt)
        stopped = [read_json(p) or {} for p in
                   sorted(glob.glob(os.path.join(adir, "stopped.rank-*.json")))]
        failed = [e for e in exits if e.returncode != 0]
        if not stopped and not failed and not at_deadline:
            return None  # every rank returned: the training finished
        if failed and not at_deadline and not stopped:
            return None  # a real failure during the grace period
        self._settle_staged(attempt, group)
        iterations = sorted({st.get("iteration") for st in stopped})
        checkpoint = next((st.get("checkpoint") for st in stopped if st.get("checkpoint")),
                          None)
        with self.run.update_state() as s:
            rec = s["attempts"][attempt - 1]
            rec.update(ended=time.time(), outcome=PREEMPTED, warning=self.stop_reason,
                       warned_at=self.stop_time, stopped_at_deadline=at_deadline,
                       stopped_iterations=iterations, stop_checkpoint=checkpoint)
        if at_deadline:
            self._log("stopped at the deadline; the next attempt resumes from the last "
                      "committed checkpoint")
        elif checkpoint is None:
            self._log(f"every rank stopped after report {iterations[-1] if iterations else '?'}"
                      " without a checkpoint (it would not have been committed by the "
                      "deadline); the next attempt resumes from the last committed one")
        else:
            self._log(f"every rank stopped after report {iterations[-1] if iterations else '?'}"
                      f" with checkpoint {checkpoint} committed")
        return PREEMPTED

    def _root_cause(self, attempt: int, failed: List[ExitRecord]) -> Failure:
        """The earliest failure: a rank's own error record if it left one, else its exit."""
        candidates: List[Failure] = []
        for path in glob.glob(os.path.join(self.run.attempt_dir(attempt), "error.rank-*.json")):
            e = read_json(path)
            if e:
                last = (e.get("traceback") or "").strip().splitlines()
                candidates.append(Failure(e["rank"], e["time"],
                                          last[-1] if last else e.get("type", "error"),
                                          e.get("traceback", ""), e.get("host", ""),
                                          e.get("pid", 0), cause=USER))
        seen = {c.rank for c in candidates}
        if any(x.rank >= 0 for x in failed):  # the launcher named the ranks: drop the step
            failed = [x for x in failed if x.rank >= 0 or x.message]
        for x in failed:
            if x.message:  # the launcher could not start the ranks: its own words
                candidates.append(Failure(x.rank, x.time, x.message.splitlines()[0],
                                          x.message + "\n", launcher=True))
            elif x.rank not in seen:
                how = (f"killed by signal {-x.returncode}" if x.returncode < 0
                       else f"exit code {x.returncode}")
                candidates.append(Failure(x.rank, x.time, f"rank {x.rank} {how}",
                                          f"rank {x.rank} ended with {how} and left no "
                                          "traceback (killed, out of memory, or a crash in "
                                          "native code); see its log.\n"))
        # the ranks that failed of their own fault, not for a lost peer (Result's
        # WorkerGroupError.worker_failures)
        self.own_failures = sorted({c.rank for c in candidates
                                    if c.rank >= 0 and not is_secondary(c)})
        first = min(candidates, key=lambda c: (is_secondary(c), c.time))
        if is_secondary(first):  # only lost peers: their node or process went away
            first.cause = NODE
        return first

    def _settle_staged(self, attempt: int, group: Optional[WorkerGroup] = None, *,
                       clean: bool = True) -> None:
        """After the ranks of ``attempt`` (``group``; None: a previous allocation's, long
        gone): commit the checkpoints every rank handed in that were not published yet
        (handed_in.py), only once the launcher says every rank ended; then (``clean``)
        remove what is left half-written."""
        if attempt > 0 and (group is None or group.ended()):
            try:
                finish_handed_in(self.run, attempt, self.plan.checkpoint,
                                 first_index=self.plan.first_checkpoint_index)
            except Exception as e:  # noqa: BLE001 - the commit is a bonus; the run goes on
                self._log(f"WARNING: could not commit the checkpoints the ranks handed in at "
                          f"their last reports ({e}); the run continues from the last "
                          "committed one")
        if clean:
            self.run.clean_incomplete()

    def _end_attempt(self, attempt: int, outcome: str, failure: Optional[Failure],
                     failed_ranks: Optional[List[int]] = None) -> None:
        with self.run.update_state() as s:
            rec = s["attempts"][attempt - 1]
            rec.update(ended=time.time(), outcome=outcome)
            if failure is not None:
                rec.update(failed_rank=failure.rank, error=failure.summary)
            if failed_ranks is not None:
                rec["failed_ranks"] = list(failed_ranks)
            restored = restore_summary(self.run, attempt) if self.plan.local_tier else None
            if restored:  # the node-local tier: where the ranks' checkpoint came from
                rec["restored"] = restored

    def _write_error(self, attempt: int, f: Failure, why: str = "") -> None:
        where = f" on {f.host} (pid {f.pid})" if f.host else ""
        same = self._ranks_with_traceback(attempt, f.traceback)
        also = (f"; ranks {compact_ranks(same)} raised the same error (the traceback of each is "
                "in its log)") if len(same) > 1 else ""
        who = f"rank {f.rank}" if f.rank >= 0 else "the launcher"
        text = (f"Training failed: {who}{where}, attempt {attempt}, job "
                f"{self.plan.job_id}, at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(f.time))}"
                f"{also}\n{'Not restarted: ' + why + chr(10) if why else ''}\n{f.traceback}")
        atomic_write_bytes(self.run.error_file, text.encode(), sync=False,
                           mode=self.run.file_mode)

    def _ranks_with_traceback(self, attempt: int, text: str) -> List[int]:
        """The ranks of ``attempt`` whose error record holds this very traceback."""
        if not text.strip():
            return []
        ranks = []
        for path in glob.glob(os.path.join(self.run.attempt_dir(attempt), "error.rank-*.json")):
            e = read_json(path)
            if e and e.get("traceback", "").strip() == text.strip():
                ranks.append(int(e["rank"]))
        return sorted(ranks)

    def _log(self, msg: str) -> None:
        if msg.lower().startswith("warning:"):
            _logger.warning(msg)
        else:
            _logger.info(msg)
