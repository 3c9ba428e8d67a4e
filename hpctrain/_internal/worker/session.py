"""The worker-side session behind ``hpctrain.report``, ``get_checkpoint``, ``get_context``.

One session per worker process. A ``report()`` on rank 0 appends one line; on the
other ranks it records nothing. Agreement across ranks — "did any rank hand in a
checkpoint?", "must we stop?" — costs one small collective (an element-wise max of three
integers over the job's own communicator), and only at *agreement reports*:

* every report while reports are slower than ``AGREE_BUDGET_S`` apart (the usual
  per-epoch or per-N-steps loop: each checkpoint is committed before ``report()``
  returns), and every report once a stop was agreed;
* when reports come faster, every K-th one, K chosen by rank 0 from the observed pace
  (at most ``MAX_GAP``) and carried in the agreement itself, so every rank computes the
  same schedule; checkpoints handed in between are committed at the next agreement (and
  the report after one that carried a checkpoint is an agreement report again);
* and once more when the training function returns.

While reports come fast and the last agreement saw nothing to act on, an agreement
report *posts* its values (:meth:`Coordinator.allreduce_max_async`) instead of waiting,
and the agreement report ``POSTED_DEPTH`` agreement reports later takes that round's
result: every rank posted it at the same report and reads it at the same later one, so
decisions stay the same on every rank. A result with anything to act on (a checkpoint staged, a commit in flight, a stop,
a checkpoint due, slow reports) makes that report a waiting agreement, as above.

A rank stages the checkpoint files of earlier reports before it can enter the
collective, so a completed agreement proves those shards complete. When a rank hands in a
checkpoint at the agreement report itself, the agreement says so (and whether rank 0 is
one of them, so that the others skip the names rank 0 writes), the ranks stage, and one
more collective proves this report's shards complete. Rank 0 then publishes them (in
report order), each by one rename. Every rank learns a stop decision at the same report.
"""
from __future__ import annotations

import collections
import functools
import hashlib
import json
import os
import shutil
import socket
import sys
import threading
import time
import warnings
import weakref
from typing import Any, Deque, Dict, List, Optional, Tuple

import cloudpickle

# re-exported: the worker and the tests reach the session's state through this module too
from hpctrain._internal.base import progress
from hpctrain._internal.base.checkpoint_interval import FrequencyPolicy
from hpctrain._internal.base.deadline import (ENV_ENDS_AT, checkpoint_deadline, env_seconds,
                                             lateness, skipped_message)
from hpctrain._internal.base.context import (  # noqa: F401
    Coordinator, Posted, SingleProcessCoordinator, current_session, get_session, request_stop,
    set_session, stop_pending)
from hpctrain.checkpoint import (Checkpoint, METADATA_FILE, ReportedCheckpoint,
                                 ReportedCheckpointStatus)
from hpctrain.config.validation import task_config_of
from hpctrain.cluster_env import WorkerInfo
from hpctrain.config import CheckpointConfig, CheckpointUploadMode, upload_mode
from hpctrain._internal.rundir.async_commit import BackgroundCommit, snapshot
from hpctrain._internal.rundir.local_tier import LocalTier, restore as restore_local
from hpctrain._internal.rundir.commit import digest_shard, new_staging_dir, publish, stage_shard, staged_iterations
# NOTHING_IN_FLIGHT: "no background commit", in the agreement and in the mark alike
from hpctrain._internal.rundir.handed_in import NOTHING_IN_FLIGHT, ReportMark, report_record
from hpctrain._internal.base.log import get_logger
from hpctrain._internal.base.fsutil import Background, atomic_write_json, json_default, read_json
from hpctrain._internal.rundir.layout import (DECISION_FILE, STOP_FILE, ResultWriter, RunDir,
                                              autofilled)
from hpctrain.preemption import PreemptionInfo, allocation_ranks
from hpctrain._internal.worker.agreement import Vote, checkpoint_asked, decide
from hpctrain._internal.worker.trial import trial_control
from hpctrain.errors import ConfigError

_log = get_logger("session")
DETAILED_ENV = "HPCTRAIN_RESULT_ENABLE_DETAILED_AUTOFILLED_METRICS"
AGREE_BUDGET_S = 0.005   # agree about this often, at most, when reports come faster
#: and at least every MAX_GAP reports. 256: where reports come back to back (about 10 µs
#: apart), the budget alone would space them some 500 apart; one report in 256 posting a
#: round (0.4 %) keeps the posting's cost (60-250 µs on 2 cores) out of the 99th
#: percentile of report(). The price is the case of reports that suddenly slow down:
#: the schedule agreed at the fast pace still holds, for up to
#: (POSTED_DEPTH + 1) * MAX_GAP reports (docs/guide/checkpoints.md)
MAX_GAP = 256
#: a posted agreement is applied this many agreement reports after it was posted (while
#: reports come fast: see _post_agreement), so a rank or a collective's thread that the
#: machine holds back for a few milliseconds does not make the others wait: 2 rounds of
#: at most 5 ms each
POSTED_DEPTH = 2
#: broadcast_from_rank_zero: Ray's limit (a warning beyond it), and hpctrain's (an error)
WARN_BROADCAST_BYTES = 1000
MAX_BROADCAST_BYTES = 16 << 20
#: get_all_reported_checkpoints() on a rank > 0 waits at most this long for rank 0 to
#: publish the checkpoints agreed at its last report (rank 0 fails the run otherwise)
PUBLISH_WAIT_S = 600.0


class StopTraining(BaseException):
    """Raised by ``report()`` on every rank at the same report: a stop was agreed (the
    scheduler's warning) and this report's checkpoint is committed. It unwinds the
    training function (a BaseException, so ``except Exception`` in user code does not
    swallow it); the worker then exits cleanly."""

    def __init__(self, iteration: int, checkpoint: Optional[str]):
        super().__init__(f"stopped after report {iteration} (checkpoint {checkpoint})")
        self.iteration = iteration
        self.checkpoint = checkpoint


class Session:
    def __init__(self, *, info: WorkerInfo, run: RunDir, coordinator: Coordinator,
                 checkpoint_config: CheckpointConfig, run_name: str,
                 resume_checkpoint: Optional[str], start_iteration: int,
                 next_checkpoint_index: int, use_gpu: bool = False,
                 per_rank_results: bool = False, attempt: int = 1,
                 datasets: Optional[Dict[str, Any]] = None,
                 datasets_to_split: Any = "all",
                 metadata: Optional[Dict[str, Any]] = None,
                 trial: Optional[Dict[str, str]] = None, gpus_per_worker: int = 0,
                 mtbi_s: Optional[float] = None, validation: Any = None):
        self.info = info
        #: the trainer's ValidationConfig (None: report(validation=...) is refused)
        self.validation = validation
        #: rank 0: the validation asked at each report not yet published
        self._validation_requests: Dict[int, Dict[str, Any]] = {}
        self.mtbi_s = mtbi_s  # FailureConfig.mtbi: checkpoint_frequency="auto"'s prior
        self.run = run
        self.coordinator = coordinator
        self.checkpoint_config = checkpoint_config
        self.run_name = run_name
        self.iteration = start_iteration
        self.attempt = attempt
        # CheckpointConfig(local_dir=...): the node-local tier (None: the run directory only)
        self._local = LocalTier.open(
            getattr(checkpoint_config, "local_dir", None), run, rank=info.world_rank,
            node=info.hosts[info.node_rank] if 0 <= info.node_rank < len(info.hosts)
            else socket.gethostname(), job_id=os.environ.get("HPCTRAIN_JOB_ID", ""))
        self.resume_checkpoint = resume_checkpoint
        if self._local is not None and resume_checkpoint and start_iteration > 0:
            self.resume_checkpoint = restore_local(self._local, resume_checkpoint,
                                                   start_iteration, run=run,
                                                   attempt=attempt, rank=info.world_rank)
        self.next_checkpoint_index = next_checkpoint_index
        self.use_gpu = use_gpu
        self.datasets = datasets or {}
        self.datasets_to_split = datasets_to_split
        self.metadata = dict(metadata or {})
        self.trial = trial_names(run_name, run.path, trial)
        self.gpus_per_worker = gpus_per_worker
        self._warned_duplicates = False  # once per run (attempt), on rank 0
        self._shards: Dict[str, Any] = {}
        self._detailed = os.environ.get(DETAILED_ENV, "0") not in ("", "0", "false", "False")
        self._started = time.time()
        self._last = time.perf_counter()
        self._writer = ResultWriter(run) if info.world_rank == 0 else None
        self._rank_results = None
        if per_rank_results:
            d = os.path.join(run.internal_dir, "worker-results")
            os.makedirs(d, exist_ok=True)
            self._rank_results = open(os.path.join(d, f"rank-{info.world_rank}.jsonl"), "a",
                                      buffering=1)
        self._stop_requested = threading.Event()
        self._preemption: Optional[PreemptionInfo] = None
        if stop_pending():
            self._stop_requested.set()
        self.stop_agreed = False
        self._agreed_checkpoint = False  # the last agreement saw a staged checkpoint
        #: a stop agreed at a report that carried a checkpoint (committed there): the stop
        #: waits one report for a checkpoint the told ranks hand in; (report, its name)
        self._deferred_stop: Optional[Tuple[int, Optional[str]]] = None
        self._defer_now = False  # this report's agreement deferred the stop
        self._background = Background()
        self._next_agreement = start_iteration + 1
        self._agreed_at, self._agreed_iteration = time.perf_counter(), start_iteration
        self._staged_since_agreement = False
        #: the next agreement report posts its round without waiting (an agreed decision)
        self._posting = False
        #: the rounds posted at the last such reports, oldest first (at most POSTED_DEPTH)
        self._posted: Deque[Posted] = collections.deque()
        self._posted_gap = 1  # the gap to the next agreement that round's poster used
        self._publish_due = False
        self._need_proof = False
        self._publish_below = NOTHING_IN_FLIGHT  # publish staged reports before this one
        self._inflight: Optional[Any] = None  # this rank's BackgroundCommit
        self._due_at = -1  # the report after which checkpoint_frequency="auto" said so
        self.committed: List[Tuple[int, str]] = []  # (iteration, name) published here
        #: how far this rank staged, for the supervisor after a crash (handed_in.py)
        self._mark = _open_mark(run, attempt, info.world_rank, info.world_size,
                                start_iteration)
        #: rank 0 publishes, at the latest agreement, what is staged up to this report
        self._published_through = -1

        self._frequency = FrequencyPolicy.for_session(self)
        # a checkpoint that cannot be committed before the deadline is not started
        # (deadline.py): the allocation's end, rank 0's stop deadline, and the decisions
        # of the last agreement (this report's checkpoint is late; the next one would be)
        self._ends_at = env_seconds(os.environ, ENV_ENDS_AT)
        self._stop_deadline: Optional[float] = None
        self._late_now = self._late_next = self._stop_now = False
        self._reports_since_agreement: Dict[int, Tuple[Dict[str, Any], float,
                                                       Optional[Dict[str, Any]]]] = {}
        self.last_metrics: Dict[str, Any] = {}
        # a sweep's trial: its scheduler and stopping criteria are consulted on rank 0
        self._tune_hook = _tune_hook(run, trial) if info.world_rank == 0 else None
        # data epochs: prepared loaders (in the order they were made) and dataset shards
        # record where a resumed run must start them (see data_epochs())
        self._epoch_counters: List[Any] = []
        self._resume_epochs: Optional[Dict[str, Any]] = None

    # -- reporting ----------------------------------------------------------------
    def report(self, metrics: Dict[str, Any], checkpoint: Optional[Checkpoint] = None,
               checkpoint_upload_mode: Any = None,
               delete_local_checkpoint_after_upload: Optional[bool] = None,
               checkpoint_upload_fn: Any = None, validation: Any = False) -> None:
        task = None if validation is False else task_config_of(validation)
        if task is not None:
            self._ask_validation(task, checkpoint)
        if checkpoint_upload_fn is not None:
            raise ConfigError(
                "report(checkpoint_upload_fn=...): not supported by hpctrain; a checkpoint "
                "is committed into the run directory (checkpoints/checkpoint_NNNNNN), "
                "atomically, by every rank together",
                hint="pass the directory as checkpoint=; to copy a committed checkpoint "
                     "elsewhere as well, do it from Result.checkpoint or a UserCallback's "
                     "after_report")
        if delete_local_checkpoint_after_upload not in (None, True, False):
            raise ConfigError("report(delete_local_checkpoint_after_upload=...): expected "
                              f"True, False or None, got {delete_local_checkpoint_after_upload!r}")
        if not isinstance(metrics, dict):
            raise TypeError(f"hpctrain.report: metrics must be a dict, got {type(metrics).__name__}")
        if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
            raise TypeError("hpctrain.report: checkpoint must be a hpctrain.Checkpoint "
                            "(e.g. Checkpoint.from_directory(path)), got "
                            f"{type(checkpoint).__name__}")
        progress.beat()
        started = time.time()
        progress.reported(started)
        blocked_from = time.perf_counter()
        iteration = self.iteration + 1
        rank = self.info.world_rank
        files: List[str] = []
        aside: List[str] = []
        use_async = checkpoint is not None and self._async(checkpoint_upload_mode)
        # None: SYNC keeps the files, ASYNC moves them away (the emptied directory stays,
        # to be reused); True: the directory goes too; False: ASYNC copies them instead
        delete_local = delete_local_checkpoint_after_upload is True
        # one background commit in flight per rank: a later checkpoint waits for it; a
        # finished one is taken in (its error raised) before any agreement
        if self._inflight is not None and (checkpoint is not None or self._inflight.done()):
            self._harvest()
        agreed = iteration >= self._next_agreement
        if agreed and self._posting and self._post_agreement(iteration):
            agreed = False  # posted: the rest is a report between agreements
        if checkpoint is not None and not agreed and self._late_next:
            checkpoint = self._skip_late(iteration, checkpoint)  # the last agreement said so
            use_async = False
        # at an agreement report the ranks agree before staging (who hands in a
        # checkpoint now, rank 0 among them?) and prove it staged after
        ckpt_now, rank0_now = (self._agree_before_staging(iteration, checkpoint is not None,
                                                          async_here=use_async)
                               if agreed else (False, False))
        if agreed and checkpoint is not None and self._late_now:
            checkpoint = self._skip_late(iteration, checkpoint)
            use_async = False
        if agreed and self.stop_agreed:
            # the training stops after this report's checkpoint: everything synchronous
            use_async = False
            if self._inflight is not None:
                self._harvest()
        complete = getattr(checkpoint, "_complete", None)  # hpctrain.torch.checkpoints
        request = None if task is None else {
            "fn_kwargs": self.validation.kwargs_for(task),
            "timeout_s": task.timeout_s if task.timeout_s is not None
            else self.validation.task_config.timeout_s}
        epochs = self.data_epochs() if rank == 0 else None
        # what rank 0 would publish this report's checkpoint with: in its shard's manifest,
        # for the supervisor to publish it should the attempt end before an agreement
        record = report_record(metrics, started, epochs, request, self.metadata) \
            if rank == 0 and checkpoint is not None else None
        if checkpoint is not None and use_async and self._local is not None:
            # the node-local tier: the files go there now, the drain runs in the background
            local = self._local.fresh(iteration)
            take = functools.partial(snapshot, self.run, rank, iteration, checkpoint,
                                     keep=delete_local_checkpoint_after_upload is False,
                                     into=local)
            if complete is None:
                take()
            self._inflight = BackgroundCommit(
                self.run, iteration, rank, local, sync=self.checkpoint_config.sync_to_disk,
                announce=self.info.world_size > 1, wait_for_rank0=rank0_now and rank != 0,
                complete=functools.partial(_seal_local, self._local, iteration, self.attempt,
                                           complete and (complete, take)),
                keep_snapshot=True, report=record)
            self._background.submit(self._local.prune, self.run, self.attempt)
            if complete is None and (getattr(checkpoint, "_temporary", False) or delete_local):
                _delete_handed_in(checkpoint)
        elif checkpoint is not None and use_async:
            snap = snapshot(self.run, rank, iteration, checkpoint,
                            keep=delete_local_checkpoint_after_upload is False)
            self._inflight = BackgroundCommit(
                self.run, iteration, rank, snap, sync=self.checkpoint_config.sync_to_disk,
                announce=self.info.world_size > 1, wait_for_rank0=rank0_now and rank != 0,
                complete=complete, report=record)
            if getattr(checkpoint, "_temporary", False) or delete_local:
                _delete_handed_in(checkpoint)
        elif checkpoint is not None:
            if complete is not None:
                complete()  # the files of a torch state checkpoint, written now
            manifest = stage_shard(self.run, iteration, rank, checkpoint,
                                   sync=self.checkpoint_config.sync_to_disk,
                                   announce=self.info.world_size > 1,
                                   wait_for_rank0=rank0_now and rank != 0, report=record)
            files = list(manifest["files"])
            aside = [rel for rel, info in manifest["files"].items() if info.get("aside")]
            if getattr(checkpoint, "_temporary", False) or delete_local:
                _delete_handed_in(checkpoint)
            if not agreed:
                self._staged_since_agreement = True
        if self._mark is not None:  # this report's shard is staged (or in flight)
            self._mark.set(iteration, self._inflight.iteration if self._inflight is not None
                           else NOTHING_IN_FLIGHT)
        if rank == 0:
            self._reports_since_agreement[iteration] = (dict(metrics), started, epochs)
            if request is not None:
                self._validation_requests[iteration] = request
        published = self._publish_agreed(iteration) if agreed else {}
        name = published.get(iteration)
        if files:  # after the commit, so that hashing never competes with it
            self._background.submit(digest_shard, self.run, iteration, rank, files, name,
                                    aside)
        now = time.perf_counter()
        row = dict(metrics)
        row.update(autofilled(iteration, now - self._last, started, started - self._started,
                              self._detailed))
        row["checkpoint_dir_name"] = name
        if self._writer is not None and self._frequency.frequency == "auto":
            # the interval checkpoint_frequency="auto" chose (the progress output shows it)
            row["_checkpoint_interval_s"] = round(self._frequency.interval_s(), 3)
        if self._writer is not None:
            self._writer.write(row)
        if self._rank_results is not None:
            self._rank_results.write(json.dumps(
                {"rank": rank, "attempt": self.attempt, "metrics": row,
                 "checkpoint": checkpoint is not None, "checkpoint_dir_name": name},
                default=json_default) + "\n")
        self.iteration = iteration
        self.last_metrics = row
        self._last = now
        progress.blocked(time.perf_counter() - blocked_from)
        if checkpoint is not None and rank == 0:
            self._frequency.observe_cost(time.perf_counter() - blocked_from)
        if self._tune_hook is not None:
            decision = self._tune_hook.on_report(row)
            if decision:
                self._end_for_decision(decision)
        if agreed and self.stop_agreed and self._agreed_checkpoint:
            # every rank is here at the same report: the checkpoint handed in since the
            # stop was agreed is committed, so the training can end now and resume later
            raise StopTraining(iteration, name)
        if agreed and self.stop_agreed and self._stop_now:
            # the stop's checkpoint would not be committed before the deadline: end now,
            # the next attempt resumes from the last committed checkpoint
            raise StopTraining(iteration, name)
        if agreed and self._defer_now:
            self._defer_now, self._deferred_stop = False, (iteration, name)
        elif agreed and self.stop_agreed and self._deferred_stop is not None:
            # told at the deferred report, the loop handed in no checkpoint since: stop,
            # resuming from the one committed there (this report's step is done again)
            raise StopTraining(iteration, self._deferred_stop[1])

    def _skip_late(self, iteration: int, checkpoint: Checkpoint) -> None:
        """A checkpoint handed in that would not be committed before the deadline: not
        staged (every rank decides the same, from the agreement); rank 0 warns."""
        if self.info.world_rank == 0:
            now = time.time()
            deadline = checkpoint_deadline(self._ends_at, self._stop_deadline)
            message = skipped_message(iteration, deadline if deadline is not None else now,
                                      now, self._frequency.commit_cost_s() or 0.0,
                                      self.stop_agreed)
            _log.warning("%s", message)
        if getattr(checkpoint, "_temporary", False):
            _delete_handed_in(checkpoint)
        return None

    def _end_for_decision(self, decision: Dict[str, Any]) -> None:
        """Rank 0, a sweep's scheduler decided (hpctrain.tune._control): commit what a lone
        rank staged (a stop keeps it), hand the decision to the supervisor, and end this
        process; the supervisor stops the other ranks and ends the trial or restarts it."""
        if decision.get("action") == "stop" and self.info.world_size == 1:
            self._commit_what_is_staged()
        self._background.drain()
        if self._writer is not None:
            self._writer.close()
        if self._rank_results is not None:
            self._rank_results.close()
        adir = self.run.attempt_dir(self.attempt)
        os.makedirs(adir, exist_ok=True)
        atomic_write_json(os.path.join(adir, DECISION_FILE), dict(decision, time=time.time()))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def _local_values(self, iteration: int, ckpt_here: bool, *, final: bool = False,
                      async_here: bool = False) -> Vote:
        """This rank's values for an agreement at ``iteration`` (see
        :meth:`_agree_before_staging`); rank 0 adds the gap to the next agreement, chosen
        from the pace of the reports since the previous one."""
        gap = 0
        due_here = False
        late = (False, False, False)
        if self.info.world_rank == 0 and not final:
            now = time.perf_counter()
            pace = (now - self._agreed_at) / max(1, iteration - self._agreed_iteration)
            gap = MAX_GAP if pace <= 0 else max(1, min(MAX_GAP, int(AGREE_BUDGET_S / pace)))
            due_here = self._frequency.due_by_time()
            late = self._lateness(pace)
        return Vote(
            staged_since=self._staged_since_agreement, stop=self._stop_requested.is_set(),
            gap=gap, ckpt_now=ckpt_here, rank0_now=ckpt_here and self.info.world_rank == 0,
            in_flight=(self._inflight.iteration if self._inflight is not None
                       else iteration if ckpt_here and async_here else NOTHING_IN_FLIGHT),
            async_now=ckpt_here and async_here, sync_now=ckpt_here and not async_here,
            due=due_here, late_now=late[0], late_next=late[1], late_after=late[2])

    def _post_agreement(self, iteration: int) -> bool:
        """An agreement report while reports come fast and nothing is to commit: post
        this report's round without waiting, and apply the round posted ``POSTED_DEPTH``
        agreement reports ago (every rank waits for that same round here, long after
        every rank posted it); the report then goes on like one between agreements (a
        checkpoint handed in now is committed at a later, synchronous agreement). Returns
        False when this report must agree synchronously instead: the applied round saw a
        checkpoint staged, a commit in flight, a stop asked, a checkpoint due, or reports
        slower than ``AGREE_BUDGET_S`` apart — the same decision on every rank, since
        every rank got the same values."""
        gap = self._posted_gap
        if len(self._posted) >= POSTED_DEPTH:
            v = Vote.from_wire(self._posted.popleft().wait())
            gap = v.gap
            # (a checkpoint that would end after the deadline: the waiting agreement
            # decides afresh which are skipped)
            if v.staged_since or v.stop or v.gap <= 1 or v.due or v.late_now or v.late_next \
                    or v.in_flight != NOTHING_IN_FLIGHT:
                self._posting = False
                return False
        self._posted.append(self.coordinator.allreduce_max_async(
            self._local_values(iteration, False).to_wire()))
        self._posted_gap = gap
        self._next_agreement = iteration + gap
        self._agreed_at, self._agreed_iteration = time.perf_counter(), iteration
        return True

    def _settle_posted(self) -> None:
        """Wait for the rounds posted at the last agreement reports (before any blocking
        collective of the coordinator); a synchronous agreement covers what they saw."""
        while self._posted:
            self._posted.popleft().wait()

    def _agree_before_staging(self, iteration: int, ckpt_here: bool, *,
                              final: bool = False, async_here: bool = False
                              ) -> Tuple[bool, bool]:
        """One agreement (every rank at the same report): learn whether any rank staged a
        checkpoint since the last agreement or hands one in at this very report (rank 0
        among them?), whether any asked to stop, and when the next agreement is; whether
        a rank has a background commit in flight or hands in an asynchronous checkpoint
        now (then nothing is published yet, see :mod:`.async_commit`), and whether a
        checkpoint is due (``checkpoint_frequency="auto"``: rank 0's decision). Returns
        (a checkpoint is handed in now, rank 0 hands one in now)."""
        self._settle_posted()
        local = self._local_values(iteration, ckpt_here, final=final,
                                   async_here=async_here).to_wire()
        v = Vote.from_wire(self.coordinator.allreduce_max(local)
                           if self.info.world_size > 1 else local)
        d = decide(v, iteration=iteration, stop_agreed=self.stop_agreed,
                   publish_due=self._publish_due, final=final,
                   world_size=self.info.world_size)
        self._late_now, self._late_next, self._stop_now = d.late_now, d.late_next, d.stop_now
        self.stop_agreed = d.stop_agreed
        self._agreed_checkpoint, self._defer_now = d.agreed_checkpoint, d.defer_now
        self._need_proof, self._publish_below = d.need_proof, d.publish_below
        if d.checkpointed:
            self._frequency.checkpointed()
        if d.due_here:
            self._due_at = iteration  # should_checkpoint() says so after this report
        self._publish_due, self._next_agreement = d.publish_due, d.next_agreement
        self._agreed_at, self._agreed_iteration = time.perf_counter(), iteration
        self._staged_since_agreement = False
        self._posting, self._posted_gap = d.posting, d.gap
        return d.ckpt_now, d.rank0_now

    def _lateness(self, pace: float) -> Tuple[bool, bool, bool]:
        """Rank 0: would a checkpoint handed in at this report, at the next one (a report
        later), or at the next one after this report's own commit, end after the
        deadline? (deadline.py)"""
        cost = self._frequency.commit_cost_s()
        if cost is None:
            return False, False, False
        if self._stop_requested.is_set() and self._stop_deadline is None:
            stop = read_json(os.path.join(self.run.attempt_dir(self.attempt), STOP_FILE),
                             default={}) or {}
            deadline = stop.get("deadline") if isinstance(stop, dict) else None
            if isinstance(deadline, (int, float)):
                self._stop_deadline = float(deadline)
        return lateness(time.time(), pace, cost,
                        checkpoint_deadline(self._ends_at, self._stop_deadline))

    def _publish_agreed(self, iteration: int) -> Dict[int, str]:
        """After the agreement and this report's staging: when a rank staged at this
        report (or waited for its background commit), one more collective proves every
        rank done; then rank 0 publishes what is staged up to ``iteration`` — unless a
        commit is still in flight somewhere (then at a later agreement). Returns
        {iteration: published checkpoint name}."""
        if self._need_proof and self.info.world_size > 1:
            self.coordinator.allreduce_max([0])  # every rank staged this report's files
        published: Dict[int, str] = {}
        below = self._publish_below
        if self._publish_due:  # rank 0 publishes what is staged up to here, now
            self._published_through = min(iteration, below - 1)
        if self.info.world_rank == 0:
            if self._publish_due:
                for it in staged_iterations(self.run, up_to=min(iteration, below - 1)):
                    metrics, started, epochs = self._reports_since_agreement.get(
                        it, ({}, time.time(), None))
                    name, dropped = publish(
                        self.run, it, self.next_checkpoint_index, metrics=metrics,
                        world_size=self.info.world_size, config=self.checkpoint_config,
                        started=started, metadata=self.metadata, data_epochs=epochs,
                        on_duplicates=self._warn_duplicates,
                        validation=self._validation_requests.pop(it, None))
                    if name:
                        self.next_checkpoint_index += 1
                        published[it] = name
                        self.committed.append((it, name))
                    for path in dropped:
                        self._background.submit(self.run.storage.delete, path)
            for it in [it for it in self._reports_since_agreement if it < below]:
                del self._reports_since_agreement[it]
        # a checkpoint still in flight is published at a later agreement
        self._publish_due = self._publish_due and below != NOTHING_IN_FLIGHT
        return published

    def _ask_validation(self, task: Any, checkpoint: Optional[Checkpoint]) -> None:
        """Refuse ``report(validation=...)`` that cannot be honoured (Ray's checks)."""
        if self.validation is None:
            raise ConfigError("report(validation=...): the trainer has no validation "
                              "function", hint="pass validation_config=ValidationConfig("
                              "fn=...) to the trainer")
        if checkpoint is None:
            raise ConfigError("report(validation=...): a validation runs on the "
                              "checkpoint of its report, and this report has none",
                              hint="report(metrics, checkpoint=..., validation=True)")
        try:
            json.dumps(self.validation.kwargs_for(task))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"report(validation=...): fn_kwargs must be JSON: {e}") from e

    # -- collectives (hpctrain.train.collective) ---------------------------------------
    def barrier(self) -> None:
        """Return once every rank has called it (over the session's coordinator)."""
        if self.info.world_size > 1:
            for posted in self._posted:  # done before the next collective, kept
                posted.wait()
            self.coordinator.barrier()

    def broadcast_from_rank_zero(self, data: Any) -> Any:
        """Rank 0's ``data`` on every rank (pickled with cloudpickle; a barrier too)."""
        if self.info.world_size <= 1:
            return data
        payload = None
        if self.info.world_rank == 0:
            payload = cloudpickle.dumps(data)
            if len(payload) > MAX_BROADCAST_BYTES:
                raise ValueError(
                    f"broadcast_from_rank_zero: the data is {len(payload)} bytes pickled, "
                    f"more than {MAX_BROADCAST_BYTES}; it is meant for small values (a "
                    "path, a seed, a few settings).\nHINT: write large data to a file in "
                    "the run directory and broadcast its path")
            if len(payload) > WARN_BROADCAST_BYTES:
                _log.warning("broadcast_from_rank_zero: the data is %d bytes pickled; it is "
                             "meant for small values (< %d bytes)", len(payload),
                             WARN_BROADCAST_BYTES)
        for posted in self._posted:  # done before the next collective, kept
            posted.wait()
        return cloudpickle.loads(self.coordinator.broadcast_bytes(payload))

    def reported_checkpoints(self) -> List[Any]:
        """The run's committed checkpoints still kept, oldest first, with their metrics
        (``hpctrain.get_all_reported_checkpoints()``), once rank 0 has published those
        of this rank's reports so far that were agreed on."""
        if self.info.world_rank != 0 and self._published_through >= 0:
            # this rank's report returned before rank 0 renamed those checkpoints into
            # place: wait until nothing up to that report is left staged
            deadline = time.monotonic() + PUBLISH_WAIT_S
            while (staged_iterations(self.run, up_to=self._published_through)
                   and time.monotonic() < deadline):
                progress.beat()
                time.sleep(0.005)
        return [ReportedCheckpoint(rec.checkpoint(), dict(rec.metrics),
                                   ReportedCheckpointStatus(rec.status))
                for rec in self.run.list_checkpoints()]

    # -- asynchronous commits (see .async_commit) --------------------------------------
    def _async(self, mode: Any) -> bool:

        if mode is None and self._local is not None:
            return True  # the local tier drains in the background
        if mode is None:
            mode = getattr(self.checkpoint_config, "checkpoint_upload_mode", "sync")
        return upload_mode(mode) is CheckpointUploadMode.ASYNC

    def _harvest(self) -> None:
        """Wait for this rank's commit in flight; raise its error (the run's error: its
        ``.tmp_`` directory is never published), or count its shard as staged."""
        commit, self._inflight = self._inflight, None
        if commit is None:
            return
        manifest = commit.result()
        if self.info.world_rank == 0 and commit.finished is not None:
            # checkpoint_frequency="auto": the drain bounds the interval from below
            self._frequency.observe_drain(commit.finished - commit.started)
        self._staged_since_agreement = True
        files = list(manifest["files"])
        if files:
            aside = [rel for rel, info in manifest["files"].items() if info.get("aside")]
            self._background.submit(digest_shard, self.run, commit.iteration, commit.rank,
                                    files, None, aside)

    def wait_for_commit(self) -> None:
        """Wait for this rank's checkpoint commit in flight (its shard staged and
        fsynced); raise its error. Publishing follows at the next agreement."""
        self._harvest()

    def _warn_duplicates(self, duplicated: Dict[str, List[int]]) -> None:
        """Rank 0, once per run: several ranks handed in the same file names."""
        if self._warned_duplicates:
            return
        self._warned_duplicates = True
        names = ", ".join(f"{rel!r} (ranks {', '.join(map(str, r))})"
                          for rel, r in sorted(duplicated.items())[:10])
        more = f" and {len(duplicated) - 10} more" if len(duplicated) > 10 else ""
        warnings.warn(
            f"hpctrain: several ranks reported checkpoint files with the same names: "
            f"{names}{more}. The checkpoint keeps one copy of each name, rank 0's (or the "
            "lowest rank's that has it); the other ranks' copies are not kept. Saving on "
            "rank 0 alone is cheaper: "
            "`if hpctrain.get_context().get_world_rank() == 0:` around the save, and "
            "report(metrics, checkpoint=None) on the other ranks. Distinct names per rank "
            "make a sharded checkpoint. (This warning is shown once per run.)",
            UserWarning, stacklevel=_outside_hpctrain())

    # -- datasets -------------------------------------------------------------------
    def get_dataset_shard(self, name: str):
        """This rank's :class:`~hpctrain.data.DatasetShard` of ``datasets[name]`` (one
        per name and process: its epoch counter carries over between calls); the whole
        dataset when ``DataConfig.datasets_to_split`` leaves ``name`` out."""
        if name not in self._shards:
            if name not in self.datasets:

                have = ", ".join(repr(n) for n in self.datasets) or "none"
                raise ConfigError(
                    f"get_dataset_shard: no dataset named {name!r} (this run has {have})",
                    hint="pass datasets={%r: \"/path/file.h5:images,labels\"} to the "
                         "trainer, or add it to the job file's [datasets]" % name)
            from hpctrain.data import as_dataset

            source = as_dataset(self.datasets[name], f"datasets.{name}")
            split = self.datasets_to_split == "all" or name in self.datasets_to_split
            rank, world_size = (self.info.world_rank, self.info.world_size) if split else (0, 1)
            shard = source.shard(rank, world_size, run_name=self.run_name)
            start = self.resumed_epochs().get("shards", {}).get(name)
            if isinstance(start, int) and start >= 0:
                shard.set_epoch(start)
            self._shards[name] = shard
        return self._shards[name]

    # -- data epochs across a restart ---------------------------------------------------
    def resumed_epochs(self) -> Dict[str, Any]:
        """The data epochs recorded with the checkpoint this run resumes from ({} when
        it starts afresh, or the checkpoint predates them)."""
        if self._resume_epochs is None:
            self._resume_epochs = {}
            if self.resume_checkpoint:

                meta = read_json(os.path.join(self.resume_checkpoint, METADATA_FILE))
                epochs = meta.get("data_epochs") if isinstance(meta, dict) else None
                if isinstance(epochs, dict):
                    self._resume_epochs = epochs
        return self._resume_epochs

    def register_epoch_counter(self, loader: Any) -> int:
        """A prepared DataLoader joins the recorded epochs; returns the epoch its first
        pass reads: where the same loader (the same in creation order) of the run that
        wrote the resumed checkpoint left off, else 0. Loaders are matched by the order
        they are prepared in: a loop that prepares its loaders once, before the epochs,
        resumes exactly; one that prepares a new loader each epoch starts it at the
        recorded epoch of the loader prepared at that position."""

        index = len(self._epoch_counters)
        self._epoch_counters.append(weakref.ref(loader))  # a loader gone is not kept alive
        recorded = self.resumed_epochs().get("loaders") or []
        start = recorded[index] if index < len(recorded) else 0
        return start if isinstance(start, int) and start >= 0 else 0

    def data_epochs(self) -> Optional[Dict[str, Any]]:
        """Where each prepared loader and dataset shard would resume now (None: none)."""
        if not self._epoch_counters and not self._shards:
            return None
        loaders = [ref() for ref in self._epoch_counters]
        return {"loaders": [c.resume_epoch() if c is not None else None for c in loaders],
                "shards": {n: s.resume_epoch() for n, s in self._shards.items()}}

    # -- checkpoints ----------------------------------------------------------------
    def get_checkpoint(self) -> Optional[Checkpoint]:
        return Checkpoint(self.resume_checkpoint) if self.resume_checkpoint else None

    def staging_dir(self) -> str:
        return new_staging_dir(self.run, self.info.world_rank)

    # -- preemption (set by the signal handler / timer) -------------------------------
    def request_stop(self) -> None:
        self._stop_requested.set()

    def preemption_info(self) -> Optional[PreemptionInfo]:
        """Once the warning is agreed (the same report on every rank): the allocation's
        nodes and ranks, and the supervisor's deadline from the attempt's stop file."""
        if not self.stop_agreed:
            return None
        if self._preemption is None:
            stop = read_json(os.path.join(self.run.attempt_dir(self.attempt), STOP_FILE),
                             default={}) or {}
            deadline = stop.get("deadline") if isinstance(stop, dict) else None
            i = self.info
            self._preemption = PreemptionInfo(
                deadline_ms=int(deadline * 1000) if isinstance(deadline, (int, float)) else None,
                preempted_node_to_ranks=allocation_ranks(i.hosts, i.world_size,
                                                         i.local_world_size))
        return self._preemption

    def should_checkpoint(self) -> bool:
        """The agreed decision: the same on every rank after the same report. False when
        the next checkpoint would not be committed before the deadline (deadline.py),
        unless a stop was agreed: its checkpoint takes precedence (handed in too late, it
        is not started and the training ends at once)."""
        return checkpoint_asked(self.stop_agreed, self._late_next, self._due_at == self.iteration
                                or self._frequency.due_by_count(self.iteration))

    def checkpoint_wanted(self) -> bool:
        """For report callbacks that checkpoint at every event (Lightning's epoch end):
        always, unless ``CheckpointConfig(checkpoint_frequency=...)`` is set; then only
        when :meth:`should_checkpoint` says so (the same on every rank)."""
        if getattr(self.checkpoint_config, "checkpoint_frequency", None) is None:
            return True
        return self.should_checkpoint()

    def close_stopped(self) -> None:
        """End after :class:`StopTraining`: no last agreement (every rank stopped at the
        same one); wait for background digests and deletions, close the results."""
        self._background.drain()
        if self._writer is not None:
            self._writer.close()
        if self._rank_results is not None:
            self._rank_results.close()

    def _commit_what_is_staged(self) -> None:
        """A last agreement (every rank waits for its commit in flight first) and the
        publication of what was staged since the previous one."""
        if self._inflight is not None and self._inflight.done():
            self._harvest()
        self._agree_before_staging(self.iteration, False, final=True)
        self._harvest()
        self._publish_agreed(self.iteration)

    def close(self) -> None:
        """End of the training function (every rank): a last agreement commits what was
        staged since the previous one (every rank waits for its commit in flight first);
        then wait for background digests and deletions."""
        self._commit_what_is_staged()
        self._background.drain()
        if self._local is not None:  # the training is over: no restart reads it
            self._local.remove()
        if self._writer is not None:
            self._writer.close()
        if self._rank_results is not None:
            self._rank_results.close()
        if self._mark is not None:  # everything is published: the mark's file stays
            self._mark.close()
            self._mark = None


def _open_mark(run: RunDir, attempt: int, rank: int, world_size: int, start_iteration: int
               ) -> Optional[ReportMark]:
    """This rank's mark in its attempt's directory; None where it cannot be made (the
    supervisor then publishes nothing after a crash, as before the marks)."""
    try:
        adir = run.attempt_dir(attempt)
        run.makedirs(adir)
        return ReportMark(adir, rank, world_size=world_size, start_iteration=start_iteration,
                          mode=run.file_mode)
    except (OSError, ValueError) as e:
        _log.warning("rank %d: no report mark in %s (%s): a checkpoint handed in right "
                     "before a crash may not be committed", rank, run.attempt_dir(attempt), e)
        return None


def _seal_local(tier: LocalTier, iteration: int, attempt: int, pending: Any) -> None:
    """In the background commit, before the drain: a torch state checkpoint's files
    written and taken into the local tier (``pending``), then the local copy sealed."""
    if pending:
        complete, take = pending
        complete()
        take()
    tier.seal(iteration, attempt)


def _delete_handed_in(checkpoint: Checkpoint) -> None:
    """The directory of a checkpoint whose files are handed in; never a committed one
    (``get_checkpoint()``, ``Result.checkpoint`` handed back in)."""
    if not os.path.exists(os.path.join(checkpoint.path, METADATA_FILE)):
        shutil.rmtree(checkpoint.path, ignore_errors=True)


def _tune_hook(run: RunDir, trial: Optional[Dict[str, str]]):
    """The report hook of a sweep's trial that has a scheduler or stopping criteria."""
    control = trial_control(run.path, trial)
    hook = getattr(control, "report_hook", None)
    return hook(run.path, trial["trial_id"]) if hook is not None else None


def _outside_hpctrain() -> int:
    """The ``stacklevel`` of the nearest caller outside the hpctrain package (the
    training function's ``report()`` line), for warnings that point at user code."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame, level = sys._getframe(2), 2  # stacklevel 1: the function calling warn()
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


class TrainContext:
    """What a training function can ask about its place in the job (Ray's TrainContext)."""

    def __init__(self, session: Session):
        self._s = session

    def get_world_rank(self) -> int:
        return self._s.info.world_rank

    def get_local_rank(self) -> int:
        return self._s.info.local_rank

    def get_node_rank(self) -> int:
        return self._s.info.node_rank

    def get_world_size(self) -> int:
        return self._s.info.world_size

    def get_local_world_size(self) -> int:
        return self._s.info.local_world_size

    def get_run_dir(self) -> str:
        return self._s.run.path

    def get_experiment_name(self) -> str:
        """``RunConfig.name`` (the run directory's name); in a sweep's trial, the
        sweep's name (the Tuner's ``RunConfig.name``), as in Ray."""
        return self._s.trial["experiment_name"]

    def get_trial_name(self) -> str:
        """In a sweep: the trial's directory name, ``trial_00007``. Otherwise Ray's form
        for a plain ``fit()``, ``TorchTrainer_<id>``, stable for the run directory."""
        return self._s.trial["trial_name"]

    def get_trial_id(self) -> str:
        """In a sweep: the trial's id in ``sweep.json``, ``trial_00007``. Otherwise Ray's
        form, ``<5 hex digits>_00000``, derived from the run directory (the same after
        restarts, requeues and ``restore``)."""
        return self._s.trial["trial_id"]

    def get_trial_dir(self) -> str:
        """The run directory (a sweep's trial: ``<sweep>/trial_00007``), on the shared
        filesystem: files written here stay with the run (Ray's trial directory)."""
        return self._s.run.path

    def get_metadata(self) -> Dict[str, Any]:
        """The trainer's ``metadata=`` (Ray's ``TrainContext.get_metadata``)."""
        return dict(self._s.metadata)

    def get_job_id(self) -> str:
        return self._s.info.job_id

    def get_restart_count(self) -> int:
        return self._s.info.restart_count

    def get_attempt(self) -> int:
        return self._s.attempt

    def get_hosts(self) -> List[str]:
        return list(self._s.info.hosts)

    def get_master_addr(self) -> str:
        return self._s.info.master_addr

    def get_iteration(self) -> int:
        """Reports made so far in this run (continues after a resume)."""
        return self._s.iteration

    def should_checkpoint(self) -> bool:
        """True once the scheduler warned of the time limit or a preemption: report a
        checkpoint now; the run stops cleanly after that report and resumes later. Also
        true when ``CheckpointConfig(checkpoint_frequency=...)`` says a checkpoint is due:
        after every N-th report, or (``"auto"``) once the Young–Daly interval has passed
        since the last checkpoint.

        The answer is agreed across ranks: it turns true on every rank after the same
        ``report()`` (the warning travels with the reports, so a loop learns of it at its
        next report), and a loop may branch on it, collectives included."""
        return self._s.should_checkpoint()

    def get_checkpoint_staging_dir(self) -> str:
        """A fresh directory on the run's filesystem. A checkpoint reported from it is
        moved (one rename per file) instead of copied."""
        return self._s.staging_dir()

    def __repr__(self) -> str:
        i = self._s.info
        return (f"TrainContext(world_rank={i.world_rank}, local_rank={i.local_rank}, "
                f"node_rank={i.node_rank}, world_size={i.world_size}, run={self._s.run.path!r})")


def trial_names(run_name: str, run_path: str, trial: Optional[Dict[str, str]] = None
                ) -> Dict[str, str]:
    """``experiment_name``, ``trial_id`` and ``trial_name`` of a run: a sweep's trial
    brings its own; a plain run gets Ray's forms, the id derived from the run directory.

    >>> t = trial_names("exp", "/runs/exp", {"trainer": "TorchTrainer"})
    >>> t["experiment_name"], t["trial_id"], t["trial_name"]
    ('exp', '6dbbb_00000', 'TorchTrainer_6dbbb_00000')
    """

    trial = dict(trial or {})
    trainer = trial.pop("trainer", None) or "Trainer"
    if "trial_id" not in trial:
        digest = hashlib.sha1(os.path.abspath(run_path).encode()).hexdigest()[:5]
        trial["trial_id"] = f"{digest}_00000"
        trial.setdefault("trial_name", f"{trainer}_{trial['trial_id']}")
    trial.setdefault("trial_name", trial["trial_id"])
    trial.setdefault("experiment_name", run_name)
    return trial
