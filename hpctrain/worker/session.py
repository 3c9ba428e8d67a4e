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

import json
import os
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import cloudpickle

from hpctrain.common import progress
from hpctrain.common.checkpoint_interval import FrequencyPolicy
# re-exported: the worker and the tests reach the session's state through this module too
from hpctrain.common.context import (  # noqa: F401
    Coordinator, SingleProcessCoordinator, current_session, get_session, request_stop,
    set_session, stop_pending)
from hpctrain.common.deadline import (ENV_ENDS_AT, checkpoint_deadline, env_seconds,
                                             lateness, skipped_message)
from hpctrain.common.fsutil import atomic_write_json, json_default, read_json
from hpctrain.common.log import get_logger
from hpctrain.rundir.commit import new_staging_dir
from hpctrain.rundir.handed_in import NOTHING_IN_FLIGHT, report_record
from hpctrain.rundir.layout import (DECISION_FILE, STOP_FILE, ResultWriter, RunDir,
                                              autofilled)
from hpctrain.worker.agreement import (Decision, Rounds, Vote, checkpoint_asked,
                                                 gap_for)
from hpctrain.worker.commits import CommitMode, Commits, delete_handed_in
from hpctrain.worker.data_epochs import DataEpochs
from hpctrain.worker.trial import trial_control, trial_names
from hpctrain.checkpoint import Checkpoint, ReportedCheckpoint
from hpctrain.cluster_env import WorkerInfo
from hpctrain.config import CheckpointConfig
from hpctrain.config.validation import task_config_of
from hpctrain.errors import ConfigError
from hpctrain.preemption import PreemptionInfo, allocation_ranks

_log = get_logger("session")
DETAILED_ENV = "HPCTRAIN_RESULT_ENABLE_DETAILED_AUTOFILLED_METRICS"
#: broadcast_from_rank_zero: Ray's limit (a warning beyond it), and hpctrain's (an error)
WARN_BROADCAST_BYTES = 1000
MAX_BROADCAST_BYTES = 16 << 20


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
    """One rank's training session: ``report()`` runs the agreements (:class:`Rounds`)
    and hands checkpoints to the commit pipeline (:class:`Commits`); the datasets and
    data epochs are :class:`DataEpochs`'."""

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
        self.info, self.run, self.coordinator = info, run, coordinator
        self.checkpoint_config, self.run_name, self.attempt = checkpoint_config, run_name, attempt
        #: the trainer's ValidationConfig (None: report(validation=...) is refused)
        self.validation = validation
        self.mtbi_s = mtbi_s  # FailureConfig.mtbi: checkpoint_frequency="auto"'s prior
        self.iteration = start_iteration
        self.use_gpu, self.gpus_per_worker = use_gpu, gpus_per_worker
        self.metadata = dict(metadata or {})
        self.trial = trial_names(run_name, run.path, trial)
        self._frequency = FrequencyPolicy.for_session(self)
        self.commits = Commits(info=info, run=run, config=checkpoint_config, attempt=attempt,
                               start_iteration=start_iteration,
                               next_index=next_checkpoint_index, metadata=self.metadata,
                               frequency=self._frequency)
        self.resume_checkpoint = self.commits.restore(resume_checkpoint, start_iteration)
        self.datasets = datasets or {}
        self.data = DataEpochs(info=info, run_name=run_name, datasets=self.datasets,
                               datasets_to_split=datasets_to_split,
                               resume_checkpoint=self.resume_checkpoint)
        self.rounds = Rounds(coordinator, info.world_size, start_iteration)
        self._detailed = os.environ.get(DETAILED_ENV, "0") not in ("", "0", "false", "False")
        self._started, self._last = time.time(), time.perf_counter()
        self._writer = ResultWriter(run) if info.world_rank == 0 else None
        self._rank_results = None
        if per_rank_results:
            d = os.path.join(run.internal_dir, "worker-results")
            os.makedirs(d, exist_ok=True)
            self._rank_results = open(os.path.join(d, f"rank-{info.world_rank}.jsonl"), "a",
                                      buffering=1)
        self._stop_requested = threading.Event()
        if stop_pending():
            self._stop_requested.set()
        self._preemption: Optional[PreemptionInfo] = None
        #: a stop agreed at a report that carried a checkpoint (committed there): the stop
        #: waits one report for a checkpoint the told ranks hand in; (report, its name)
        self._deferred_stop: Optional[Tuple[int, Optional[str]]] = None
        self._due_at = -1  # the report after which checkpoint_frequency="auto" said so
        # a checkpoint that cannot be committed before the deadline is not started
        # (deadline.py): the allocation's end, and rank 0's stop deadline
        self._ends_at = env_seconds(os.environ, ENV_ENDS_AT)
        self._stop_deadline: Optional[float] = None
        self.last_metrics: Dict[str, Any] = {}
        # a sweep's trial: its scheduler and stopping criteria are consulted on rank 0
        self._tune_hook = _tune_hook(run, trial) if info.world_rank == 0 else None

    @property
    def stop_agreed(self) -> bool:
        return self.rounds.stop_agreed

    @property
    def committed(self) -> List[Tuple[int, str]]:
        return self.commits.committed

    # -- reporting ----------------------------------------------------------------
    def report(self, metrics: Dict[str, Any], checkpoint: Optional[Checkpoint] = None,
               checkpoint_upload_mode: Any = None,
               delete_local_checkpoint_after_upload: Optional[bool] = None,
               checkpoint_upload_fn: Any = None, validation: Any = False) -> None:
        request = _validation_request(self.validation, validation, checkpoint)
        _check_report(metrics, checkpoint, checkpoint_upload_fn,
                      delete_local_checkpoint_after_upload)
        progress.beat()
        started = time.time()
        progress.reported(started)
        blocked_from = time.perf_counter()
        iteration, rank = self.iteration + 1, self.info.world_rank
        mode = self.commits.mode(checkpoint_upload_mode) if checkpoint is not None else None
        self.commits.take_in(checkpoint is not None)
        agreed = self.rounds.due(iteration)
        if agreed and self.rounds.posting and self.rounds.post(
                iteration, lambda: self._local_values(iteration, False)):
            agreed = False  # posted: the rest is a report between agreements
        if checkpoint is not None and not agreed and self.rounds.last.late_next:
            checkpoint = self._skip_late(iteration, checkpoint)  # the last agreement said so
        # at an agreement report the ranks agree before staging (who hands in a
        # checkpoint now, rank 0 among them?) and prove it staged after
        d = self._agree(iteration, checkpoint is not None,
                        async_here=mode not in (None, CommitMode.SYNC)) if agreed else None
        if d is not None and checkpoint is not None and d.late_now:
            checkpoint = self._skip_late(iteration, checkpoint)
        if d is not None and d.stop_agreed:
            # the training stops after this report's checkpoint: everything synchronous
            mode = CommitMode.SYNC
            self.commits.harvest()
        epochs = self.data.now() if rank == 0 else None
        if checkpoint is not None and mode is not None:
            record = report_record(metrics, started, epochs, request, self.metadata) \
                if rank == 0 else None
            self.commits.hand_in(iteration, checkpoint, mode, record=record,
                                 wait_for_rank0=d is not None and d.rank0_now and rank != 0,
                                 delete_after=delete_local_checkpoint_after_upload,
                                 at_agreement=agreed)
        self.commits.reported(iteration, metrics, started, epochs, request)
        name = self._publish(iteration).get(iteration) if agreed else None
        self.commits.digest(name)
        self._write_row(iteration, metrics, started, checkpoint is not None, name)
        progress.blocked(time.perf_counter() - blocked_from)
        if checkpoint is not None and rank == 0:
            self._frequency.observe_cost(time.perf_counter() - blocked_from)
        if self._tune_hook is not None:
            decision = self._tune_hook.on_report(self.last_metrics)
            if decision:
                self._end_for_decision(decision)
        if d is not None:
            self._stop_if_agreed(d, iteration, name)

    def _write_row(self, iteration: int, metrics: Dict[str, Any], started: float,
                   checkpoint: bool, name: Optional[str]) -> None:
        """The report's row (rank 0's results, and this rank's own where asked)."""
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
                {"rank": self.info.world_rank, "attempt": self.attempt, "metrics": row,
                 "checkpoint": checkpoint, "checkpoint_dir_name": name},
                default=json_default) + "\n")
        self.iteration, self.last_metrics, self._last = iteration, row, now

    def _stop_if_agreed(self, d: Decision, iteration: int, name: Optional[str]) -> None:
        """After an agreement: raise :class:`StopTraining` where the agreed stop ends the
        training at this report (every rank is here at the same report)."""
        if d.stop_agreed and (d.agreed_checkpoint or d.stop_now):
            # the checkpoint handed in since the stop was agreed is committed (or the
            # stop's would not be before the deadline): end now, resume later from the
            # last committed checkpoint
            raise StopTraining(iteration, name)
        if d.defer_now:
            self._deferred_stop = (iteration, name)
        elif d.stop_agreed and self._deferred_stop is not None:
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
        if checkpoint._temporary:
            delete_handed_in(checkpoint)
        return None

    def _end_for_decision(self, decision: Dict[str, Any]) -> None:
        """Rank 0, a sweep's scheduler decided (hpctrain.tune._control): commit what a lone
        rank staged (a stop keeps it), hand the decision to the supervisor, and end this
        process; the supervisor stops the other ranks and ends the trial or restarts it."""
        if decision.get("action") == "stop" and self.info.world_size == 1:
            self._commit_what_is_staged()
        self._close(finished=False)
        adir = self.run.attempt_dir(self.attempt)
        os.makedirs(adir, exist_ok=True)
        atomic_write_json(os.path.join(adir, DECISION_FILE), dict(decision, time=time.time()))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    # -- the agreements (agreement.py) -----------------------------------------------
    def _local_values(self, iteration: int, ckpt_here: bool, *, final: bool = False,
                      async_here: bool = False) -> Vote:
        """This rank's vote for an agreement at ``iteration``; rank 0 adds the gap to the
        next agreement (from the pace of the reports since the previous one), whether a
        checkpoint is due, and whether one would end after the deadline."""
        gap, due_here, late = 0, False, (False, False, False)
        if self.info.world_rank == 0 and not final:
            pace = self.rounds.pace(iteration)
            gap, due_here, late = gap_for(pace), self._frequency.due_by_time(), self._lateness(pace)
        in_flight = self.commits.in_flight
        if in_flight == NOTHING_IN_FLIGHT and ckpt_here and async_here:
            in_flight = iteration
        return Vote(
            staged_since=self.commits.staged_since, stop=self._stop_requested.is_set(),
            gap=gap, ckpt_now=ckpt_here, rank0_now=ckpt_here and self.info.world_rank == 0,
            in_flight=in_flight, async_now=ckpt_here and async_here,
            sync_now=ckpt_here and not async_here, due=due_here, late_now=late[0],
            late_next=late[1], late_after=late[2])

    def _agree(self, iteration: int, ckpt_here: bool, *, final: bool = False,
               async_here: bool = False) -> Decision:
        """One synchronous agreement (every rank at the same report): whether any rank
        staged a checkpoint since the last agreement or hands one in at this very report
        (rank 0 among them?), whether any asked to stop, when the next agreement is,
        what is in flight, whether a checkpoint is due or late (agreement.decide)."""
        d = self.rounds.agree(iteration, lambda: self._local_values(
            iteration, ckpt_here, final=final, async_here=async_here), final=final)
        if d.checkpointed:
            self._frequency.checkpointed()
        if d.due_here:
            self._due_at = iteration  # should_checkpoint() says so after this report
        self.commits.staged_since = False
        return d

    def _publish(self, iteration: int) -> Dict[int, str]:
        """Rank 0 publishes what the last agreement allows (:meth:`Commits.publish`)."""
        published = self.commits.publish(iteration, self.rounds.last,
                                         due=self.rounds.publish_due,
                                         coordinator=self.coordinator)
        self.rounds.published()
        return published

    def _lateness(self, pace: float) -> Tuple[bool, bool, bool]:
        """Rank 0: would a checkpoint handed in at this report, at the next one (a report
        later), or at the next one after this report's own commit, end after the
        deadline? (deadline.py)"""
        cost = self._frequency.commit_cost_s()
        if cost is None:
            return False, False, False
        if self._stop_requested.is_set() and self._stop_deadline is None:
            self._stop_deadline = self._stop_file_deadline()
        return lateness(time.time(), pace, cost,
                        checkpoint_deadline(self._ends_at, self._stop_deadline))

    def _stop_file_deadline(self) -> Optional[float]:
        """The supervisor's stop deadline, from the attempt's stop file (None: none)."""
        stop = read_json(os.path.join(self.run.attempt_dir(self.attempt), STOP_FILE),
                         default={}) or {}
        deadline = stop.get("deadline") if isinstance(stop, dict) else None
        return float(deadline) if isinstance(deadline, (int, float)) else None

    # -- collectives (hpctrain.train.collective) ---------------------------------------
    def barrier(self) -> None:
        """Return once every rank has called it (over the session's coordinator)."""
        if self.info.world_size > 1:
            self.rounds.wait_posted()  # done before the next collective, kept
            self.coordinator.barrier()

    def broadcast_from_rank_zero(self, data: Any) -> Any:
        """Rank 0's ``data`` on every rank (pickled with cloudpickle; a barrier too)."""
        if self.info.world_size <= 1:
            return data
        payload = _pickled_for_broadcast(data) if self.info.world_rank == 0 else None
        self.rounds.wait_posted()
        return cloudpickle.loads(self.coordinator.broadcast_bytes(payload))

    # -- checkpoints ----------------------------------------------------------------
    def reported_checkpoints(self) -> List[ReportedCheckpoint]:
        """``hpctrain.get_all_reported_checkpoints()``: :meth:`Commits.reported_checkpoints`."""
        return self.commits.reported_checkpoints()

    def wait_for_commit(self) -> None:
        """Wait for this rank's checkpoint commit in flight (its shard staged and
        fsynced); raise its error. Publishing follows at the next agreement."""
        self.commits.harvest()

    def get_checkpoint(self) -> Optional[Checkpoint]:
        return Checkpoint(self.resume_checkpoint) if self.resume_checkpoint else None

    def staging_dir(self) -> str:
        return new_staging_dir(self.run, self.info.world_rank)

    # -- datasets (data_epochs.py) ---------------------------------------------------
    def get_dataset_shard(self, name: str) -> Any:
        return self.data.shard(name)

    def register_epoch_counter(self, loader: Any) -> int:
        return self.data.register(loader)

    # -- preemption (set by the signal handler / timer) -------------------------------
    def request_stop(self) -> None:
        self._stop_requested.set()

    def preemption_info(self) -> Optional[PreemptionInfo]:
        """Once the warning is agreed (the same report on every rank): the allocation's
        nodes and ranks, and the supervisor's deadline from the attempt's stop file."""
        if not self.stop_agreed:
            return None
        if self._preemption is None:
            deadline, i = self._stop_file_deadline(), self.info
            self._preemption = PreemptionInfo(
                deadline_ms=int(deadline * 1000) if deadline is not None else None,
                preempted_node_to_ranks=allocation_ranks(i.hosts, i.world_size,
                                                         i.local_world_size))
        return self._preemption

    def should_checkpoint(self) -> bool:
        """The agreed decision: the same on every rank after the same report. False when
        the next checkpoint would not be committed before the deadline (deadline.py),
        unless a stop was agreed: its checkpoint takes precedence (handed in too late, it
        is not started and the training ends at once)."""
        return checkpoint_asked(self.stop_agreed, self.rounds.last.late_next,
                                self._due_at == self.iteration
                                or self._frequency.due_by_count(self.iteration))

    def checkpoint_wanted(self) -> bool:
        """For report callbacks that checkpoint at every event (Lightning's epoch end):
        always, unless ``CheckpointConfig(checkpoint_frequency=...)`` is set; then only
        when :meth:`should_checkpoint` says so (the same on every rank)."""
        if getattr(self.checkpoint_config, "checkpoint_frequency", None) is None:
            return True
        return self.should_checkpoint()

    # -- the end ---------------------------------------------------------------------
    def close_stopped(self) -> None:
        """End after :class:`StopTraining`: no last agreement (every rank stopped at the
        same one); wait for background digests and deletions, close the results."""
        self._close(finished=False)

    def _commit_what_is_staged(self) -> None:
        """A last agreement (every rank waits for its commit in flight first) and the
        publication of what was staged since the previous one."""
        self.commits.take_in(False)
        self._agree(self.iteration, False, final=True)
        self.commits.harvest()
        self._publish(self.iteration)

    def close(self) -> None:
        """End of the training function (every rank): a last agreement commits what was
        staged since the previous one (every rank waits for its commit in flight first);
        then wait for background digests and deletions."""
        self._commit_what_is_staged()
        self._close(finished=True)

    def _close(self, *, finished: bool) -> None:
        self.commits.close(finished=finished)
        if self._writer is not None:
            self._writer.close()
        if self._rank_results is not None:
            self._rank_results.close()


def _check_report(metrics: Any, checkpoint: Any, upload_fn: Any, delete_local: Any) -> None:
    """``report()``'s arguments, refused as Ray refuses them (or where hpctrain differs)."""
    if upload_fn is not None:
        raise ConfigError(
            "report(checkpoint_upload_fn=...): not supported by hpctrain; a checkpoint "
            "is committed into the run directory (checkpoints/checkpoint_NNNNNN), "
            "atomically, by every rank together",
            hint="pass the directory as checkpoint=; to copy a committed checkpoint "
                 "elsewhere as well, do it from Result.checkpoint or a UserCallback's "
                 "after_report")
    if delete_local not in (None, True, False):
        raise ConfigError("report(delete_local_checkpoint_after_upload=...): expected "
                          f"True, False or None, got {delete_local!r}")
    if not isinstance(metrics, dict):
        raise TypeError(f"hpctrain.report: metrics must be a dict, got {type(metrics).__name__}")
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        raise TypeError("hpctrain.report: checkpoint must be a hpctrain.Checkpoint "
                        "(e.g. Checkpoint.from_directory(path)), got "
                        f"{type(checkpoint).__name__}")


def _validation_request(config: Any, validation: Any, checkpoint: Optional[Checkpoint]
                        ) -> Optional[Dict[str, Any]]:
    """``report(validation=...)``: the request rank 0 publishes with the report's
    checkpoint (None: none asked); refused where it cannot be honoured (Ray's checks)."""
    task = None if validation is False else task_config_of(validation)
    if task is None:
        return None
    if config is None:
        raise ConfigError("report(validation=...): the trainer has no validation "
                          "function", hint="pass validation_config=ValidationConfig("
                          "fn=...) to the trainer")
    if checkpoint is None:
        raise ConfigError("report(validation=...): a validation runs on the "
                          "checkpoint of its report, and this report has none",
                          hint="report(metrics, checkpoint=..., validation=True)")
    kwargs = config.kwargs_for(task)
    try:
        json.dumps(kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"report(validation=...): fn_kwargs must be JSON: {e}") from e
    return {"fn_kwargs": kwargs, "timeout_s": task.timeout_s if task.timeout_s is not None
            else config.task_config.timeout_s}


def _pickled_for_broadcast(data: Any) -> bytes:
    """Rank 0's ``data`` pickled for ``broadcast_from_rank_zero`` (Ray's size warning;
    hpctrain's limit)."""
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
    return payload


def _tune_hook(run: RunDir, trial: Optional[Dict[str, str]]):
    """The report hook of a sweep's trial that has a scheduler or stopping criteria."""
    control = trial_control(run.path, trial)
    hook = getattr(control, "report_hook", None)
    return hook(run.path, trial["trial_id"]) if hook is not None else None
