"""One rank's commit pipeline: what ``report()`` hands in, what is staged, what commits
in the background, and what rank 0 publishes at the agreements (``session.py`` decides
when; :mod:`.agreement` what every rank agreed).

A checkpoint handed in is committed in one of three ways (:class:`CommitMode`), chosen
once per hand-in: staged before ``report()`` returns, snapshotted and staged in the
background, or written to the node-local tier and drained from there in the background.
A staged shard is published by rank 0 at an agreement that proves every rank staged it:
one rename into ``checkpoints/checkpoint_NNNNNN``.
"""
from __future__ import annotations

import enum
import functools
import os
import shutil
import socket
import sys
import time
import warnings
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from hpctrain.common.checkpoint_interval import FrequencyPolicy
from hpctrain.common.context import Coordinator
from hpctrain.common.fsutil import Background
from hpctrain.common.log import get_logger
from hpctrain.common.progress import beat
from hpctrain.rundir.async_commit import BackgroundCommit, snapshot
from hpctrain.rundir.commit import digest_shard, publish, stage_shard, staged_iterations
from hpctrain.rundir.handed_in import NOTHING_IN_FLIGHT, ReportMark
from hpctrain.rundir.layout import RunDir
from hpctrain.rundir.local_tier import LocalTier, restore as restore_local
from hpctrain.worker.agreement import Decision
from hpctrain.checkpoint import (Checkpoint, METADATA_FILE, ReportedCheckpoint,
                                 ReportedCheckpointStatus)
from hpctrain.cluster_env import WorkerInfo
from hpctrain.config import CheckpointConfig, CheckpointUploadMode, upload_mode

_log = get_logger("session")
#: get_all_reported_checkpoints() on a rank > 0 waits at most this long for rank 0 to
#: publish the checkpoints agreed at its last report (rank 0 fails the run otherwise)
PUBLISH_WAIT_S = 600.0


class CommitMode(enum.Enum):
    """How one checkpoint handed in is committed (chosen once, in :meth:`Commits.mode`)."""
    #: staged (and fsynced) before report() returns
    SYNC = "sync"
    #: its files taken away at once (a rename each), staged in the background
    ASYNC = "async"
    #: written to the node-local tier, drained to the run directory in the background
    LOCAL_TIER = "local tier"


class Report(NamedTuple):
    """What rank 0 publishes a report's checkpoint with."""
    metrics: Dict[str, Any]
    started: float
    data_epochs: Optional[Dict[str, Any]]


class _Shard(NamedTuple):
    """This rank's files staged at one report: hashed once the report is published."""
    iteration: int
    files: List[str]
    aside: List[str]


def _shard_of(iteration: int, manifest: Dict[str, Any]) -> _Shard:
    return _Shard(iteration, list(manifest["files"]),
                  [rel for rel, info in manifest["files"].items() if info.get("aside")])


class Commits:
    """The commit pipeline of one rank (one per session)."""

    def __init__(self, *, info: WorkerInfo, run: RunDir, config: CheckpointConfig,
                 attempt: int, start_iteration: int, next_index: int,
                 metadata: Dict[str, Any], frequency: FrequencyPolicy):
        self.info, self.run, self.config, self.attempt = info, run, config, attempt
        self.metadata = metadata
        self.frequency = frequency
        # CheckpointConfig(local_dir=...): the node-local tier (None: the run directory only)
        self.tier = LocalTier.open(
            getattr(config, "local_dir", None), run, rank=info.world_rank,
            node=info.hosts[info.node_rank] if 0 <= info.node_rank < len(info.hosts)
            else socket.gethostname(), job_id=os.environ.get("HPCTRAIN_JOB_ID", ""))
        self.background = Background()  # digests and deletions, off the training thread
        self.inflight: Optional[BackgroundCommit] = None  # this rank's, at most one
        #: a checkpoint was staged since the last agreement (the agreement resets it)
        self.staged_since = False
        self.next_index = next_index
        self.committed: List[Tuple[int, str]] = []  # (iteration, name) published here
        #: rank 0 publishes, at the latest agreement, what is staged up to this report
        self.published_through = -1
        #: how far this rank staged, for the supervisor after a crash (handed_in.py)
        self.mark = _open_mark(run, attempt, info.world_rank, info.world_size,
                               start_iteration)
        #: rank 0: the reports since the last agreement, and their validation requests
        self._reports: Dict[int, Report] = {}
        self._validation: Dict[int, Dict[str, Any]] = {}
        self._to_digest: Optional[_Shard] = None
        self._warned_duplicates = False  # once per run (attempt), on rank 0

    def restore(self, checkpoint: Optional[str], start_iteration: int) -> Optional[str]:
        """The checkpoint to resume from: the node-local tier's copy where it holds an
        intact one (``local_tier.restore``), else ``checkpoint``."""
        if self.tier is None or not checkpoint or start_iteration <= 0:
            return checkpoint
        return restore_local(self.tier, checkpoint, start_iteration, run=self.run,
                             attempt=self.attempt, rank=self.info.world_rank)

    def mode(self, upload: Any) -> CommitMode:
        """``report(checkpoint_upload_mode=...)``, else the CheckpointConfig's (the node-
        local tier, where set, always drains in the background)."""
        if upload is None and self.tier is not None:
            return CommitMode.LOCAL_TIER
        if upload is None:
            upload = getattr(self.config, "checkpoint_upload_mode", "sync")
        if upload_mode(upload) is not CheckpointUploadMode.ASYNC:
            return CommitMode.SYNC
        return CommitMode.LOCAL_TIER if self.tier is not None else CommitMode.ASYNC

    @property
    def in_flight(self) -> int:
        """The report whose commit runs in the background here (NOTHING_IN_FLIGHT)."""
        return self.inflight.iteration if self.inflight is not None else NOTHING_IN_FLIGHT

    def take_in(self, handing_in: bool) -> None:
        """One background commit in flight per rank: a later checkpoint waits for it; a
        finished one is taken in (its error raised) before any agreement."""
        if self.inflight is not None and (handing_in or self.inflight.done()):
            self.harvest()

    def harvest(self) -> None:
        """Wait for this rank's commit in flight; raise its error (the run's error: its
        ``.tmp_`` directory is never published), or count its shard as staged."""
        commit, self.inflight = self.inflight, None
        if commit is None:
            return
        manifest = commit.result()
        if self.info.world_rank == 0 and commit.finished is not None:
            # checkpoint_frequency="auto": the drain bounds the interval from below
            self.frequency.observe_drain(commit.finished - commit.started)
        self.staged_since = True
        self._submit_digest(_shard_of(commit.iteration, manifest), None)

    def hand_in(self, iteration: int, checkpoint: Checkpoint, mode: CommitMode, *,
                wait_for_rank0: bool, record: Optional[Dict[str, Any]],
                delete_after: Optional[bool], at_agreement: bool) -> None:
        """Commit this rank's files of report ``iteration``'s checkpoint by ``mode``.
        ``delete_after`` (``delete_local_checkpoint_after_upload``): None — SYNC keeps
        the files, ASYNC moves them away (the emptied directory stays, to be reused);
        True — the directory goes too; False — ASYNC copies them instead. ``record``:
        what rank 0 would publish it with, in its shard's manifest, for the supervisor to
        publish it should the attempt end before an agreement."""
        rank, complete = self.info.world_rank, checkpoint._complete
        commit = functools.partial(BackgroundCommit, self.run, iteration, rank,
                                   sync=self.config.sync_to_disk,
                                   announce=self.info.world_size > 1,
                                   wait_for_rank0=wait_for_rank0, report=record)
        if mode is CommitMode.LOCAL_TIER:
            assert self.tier is not None
            local = self.tier.fresh(iteration)
            take = functools.partial(snapshot, self.run, rank, iteration, checkpoint,
                                     keep=delete_after is False, into=local)
            if complete is None:
                take()
            self.inflight = commit(local, keep_snapshot=True, complete=functools.partial(
                _seal_local, self.tier, iteration, self.attempt, complete and (complete, take)))
            self.background.submit(self.tier.prune, self.run, self.attempt)
        elif mode is CommitMode.ASYNC:
            snap = snapshot(self.run, rank, iteration, checkpoint, keep=delete_after is False)
            self.inflight = commit(snap, complete=complete)
        else:
            if complete is not None:
                complete()  # the files of a torch state checkpoint, written now
            manifest = stage_shard(self.run, iteration, rank, checkpoint,
                                   sync=self.config.sync_to_disk,
                                   announce=self.info.world_size > 1,
                                   wait_for_rank0=wait_for_rank0, report=record)
            self._to_digest = _shard_of(iteration, manifest)
            # between agreements the next agreement learns of it; at one, the vote did
            self.staged_since = self.staged_since or not at_agreement
        if (complete is None or mode is not CommitMode.LOCAL_TIER) and (
                checkpoint._temporary or delete_after is True):
            delete_handed_in(checkpoint)

    def reported(self, iteration: int, metrics: Dict[str, Any], started: float,
                 data_epochs: Optional[Dict[str, Any]],
                 validation: Optional[Dict[str, Any]]) -> None:
        """Report ``iteration`` is done here: the mark says how far this rank staged;
        rank 0 keeps what it publishes that report's checkpoint with (a copy of the
        metrics: only there, off the other ranks' hot path)."""
        if self.mark is not None:  # this report's shard is staged (or in flight)
            self.mark.set(iteration, self.in_flight)
        if self.info.world_rank == 0:
            self._reports[iteration] = Report(dict(metrics), started, data_epochs)
            if validation is not None:
                self._validation[iteration] = validation

    def publish(self, iteration: int, decision: Decision, *, due: bool,
                coordinator: Coordinator) -> Dict[int, str]:
        """After an agreement and this report's staging: when a rank staged at this report
        (or waited for its background commit), one more collective proves every rank
        done; then rank 0 publishes (``due``) what is staged up to ``iteration`` — except
        what is still in flight somewhere (``decision.publish_below``: at a later
        agreement). Returns {iteration: published checkpoint name}."""
        if decision.need_proof and self.info.world_size > 1:
            coordinator.allreduce_max([0])  # every rank staged this report's files
        published: Dict[int, str] = {}
        through = min(iteration, decision.publish_below - 1)
        if due:
            self.published_through = through
        if self.info.world_rank != 0:
            return published
        for it in staged_iterations(self.run, up_to=through) if due else ():
            report = self._reports.get(it, Report({}, time.time(), None))
            name, dropped = publish(
                self.run, it, self.next_index, metrics=report.metrics,
                world_size=self.info.world_size, config=self.config, started=report.started,
                metadata=self.metadata, data_epochs=report.data_epochs,
                on_duplicates=self._warn_duplicates, validation=self._validation.pop(it, None))
            if name:
                self.next_index += 1
                published[it] = name
                self.committed.append((it, name))
            for path in dropped:
                self.background.submit(self.run.storage.delete, path)
        for it in [it for it in self._reports if it < decision.publish_below]:
            del self._reports[it]
        return published

    def digest(self, name: Optional[str]) -> None:
        """Hash this report's staged files (after the commit, so that hashing never
        competes with it), under ``name`` once published."""
        shard, self._to_digest = self._to_digest, None
        if shard is not None:
            self._submit_digest(shard, name)

    def _submit_digest(self, shard: _Shard, name: Optional[str]) -> None:
        """Hash this rank's files of ``shard`` off the training thread."""
        if shard.files:
            self.background.submit(digest_shard, self.run, shard.iteration,
                                   self.info.world_rank, shard.files, name, shard.aside)

    def reported_checkpoints(self) -> List[ReportedCheckpoint]:
        """The run's committed checkpoints still kept, oldest first, with their metrics,
        once rank 0 has published those of this rank's reports so far that were agreed
        on."""
        if self.info.world_rank != 0 and self.published_through >= 0:
            # this rank's report returned before rank 0 renamed those checkpoints into
            # place: wait until nothing up to that report is left staged
            deadline = time.monotonic() + PUBLISH_WAIT_S
            while (staged_iterations(self.run, up_to=self.published_through)
                   and time.monotonic() < deadline):
                beat()
                time.sleep(0.005)
        return [ReportedCheckpoint(rec.checkpoint(), dict(rec.metrics),
                                   ReportedCheckpointStatus(rec.status))
                for rec in self.run.list_checkpoints()]

    def close(self, *, finished: bool) -> None:
        """Wait for background digests and deletions; ``finished`` (the training is over,
        everything published): the node-local tier goes (no restart reads it), the mark
        is closed (its file stays)."""
        self.background.drain()
        if finished and self.tier is not None:
            self.tier.remove()
        if finished and self.mark is not None:
            self.mark.close()
            self.mark = None

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


def delete_handed_in(checkpoint: Checkpoint) -> None:
    """The directory of a checkpoint whose files are handed in; never a committed one
    (``get_checkpoint()``, ``Result.checkpoint`` handed back in)."""
    if not os.path.exists(os.path.join(checkpoint.path, METADATA_FILE)):
        shutil.rmtree(checkpoint.path, ignore_errors=True)


def _outside_hpctrain() -> int:
    """The ``stacklevel`` of the nearest caller outside the hpctrain package (the
    training function's ``report()`` line), for warnings that point at user code."""
    here = os.path.abspath(__file__)  # hpctrain/worker/commits.py
    package = os.path.dirname(os.path.dirname(here)) + os.sep
    frame, level = sys._getframe(2), 2  # stacklevel 1: the function calling warn()
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level
