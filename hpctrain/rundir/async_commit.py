"""Asynchronous checkpoint commits: ``report(..., checkpoint_upload_mode="async")``.

The name is Ray Train's (``ray.train.report(..., checkpoint_upload_mode=
CheckpointUploadMode.ASYNC)``); ``CheckpointConfig(checkpoint_upload_mode="async")`` makes
it the run's default. The commit keeps the synchronous protocol of :mod:`.commit`
(shards staged under ``checkpoints/.tmp_…``, fsynced, manifest last; rank 0 publishes by
one rename after proof that every shard is complete); what moves off the training thread
is the expensive part, the copy and the fsyncs.

In ``report()``, on the calling thread:

1. wait for this rank's commit in flight, if any (one per rank), and raise its error;
2. the agreement collective, as for a synchronous report (same order on every rank);
3. the **snapshot**: the files handed in are *moved* (one rename each) into a private
   directory — under the run's staging area when the checkpoint lies on the run's
   filesystem, else beside the checkpoint's directory on its own filesystem — so the
   user's directory is free to be reused or deleted as soon as ``report()`` returns, and
   nothing the user writes afterwards can reach the checkpoint. (Ray's ASYNC mode
   likewise deletes the local checkpoint once uploaded.) A directory that cannot be
   renamed from (another filesystem under the same parent, no write permission), and a
   committed checkpoint handed back in, are copied instead, without fsync; a symbolic
   link is copied (its target's content), never moved;
4. a background thread stages the snapshot exactly as a synchronous report would
   (:func:`.commit.stage_shard`: copy or link, fsync, manifest last), then removes it.

A checkpoint made by :mod:`hpctrain.torch.checkpoints` has no files yet: its snapshot is
the state dict copied to host memory (or DCP's own staging, for
``torch.distributed.checkpoint.async_save``), and the background thread writes the files
(or waits for DCP's future) before staging them.

No collective ever runs off the calling thread. Completion travels with the agreements
that the reports make anyway: each rank says whether a commit of its own is still in
flight; rank 0 publishes what is staged only at an agreement where no rank has one in
flight (every rank harvested its finished commit before entering it, so the completed
collective proves the shards complete). Until then agreements come at every report.

Waiting points: a later checkpoint report of the same rank (step 1); an agreed stop (the
scheduler's warning): every rank waits for its commit in flight, this report's checkpoint
is committed synchronously, one more collective proves every rank done, rank 0 publishes,
and the training stops; the end of the training function (the same, in ``close()``).

A background commit that fails (a full disk, an I/O error) is raised from the rank's next
report — or from the end of the training function — as that rank's error; the run fails
(or restarts under ``FailureConfig.max_failures``) and the half-staged ``.tmp_``
directory is never published: the rank that failed never enters the agreement that
would publish it, and the supervisor removes it before the next attempt. A process
killed during the background commit leaves the same ``.tmp_`` directory: the previous
checkpoint stays the latest.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from hpctrain.checkpoint import METADATA_FILE, Checkpoint
from hpctrain.config import CheckpointUploadMode, upload_mode
from hpctrain.rundir.commit import copy_file, is_staged, stage_shard, user_files
from hpctrain.common.fsutil import walk_files
from hpctrain.rundir.layout import RunDir

SNAPSHOT_PREFIX = ".hpctrain-snapshot-"


def snapshot(run: RunDir, rank: int, iteration: int, checkpoint: Checkpoint, *,
             keep: bool = False, into: Optional[str] = None) -> str:
    """Take the files of ``checkpoint`` away from the caller: return a private directory
    holding them (see the module docstring). Costs one rename per file, or a copy (no
    fsync) where no rename is possible; ``keep`` (``report(...,
    delete_local_checkpoint_after_upload=False)``): always a copy, the caller's files
    stay. ``into``: that (empty, existing) directory instead, e.g. the node-local tier's
    copy of this checkpoint (:mod:`.local_tier`)."""
    src = os.path.abspath(checkpoint.path)
    if is_staged(run, src) and into is None:
        return src  # get_checkpoint_staging_dir(): already hpctrain's (a fresh one each call)
    names = user_files(src)
    # a committed checkpoint handed back in (get_checkpoint(), Result.checkpoint) is never
    # taken apart: copied, as a synchronous report would
    committed = os.path.exists(os.path.join(src, METADATA_FILE))
    if into is not None:
        if not (committed or keep) and _same_device(src, into) and _moved(src, into, names):
            return into
        _copy_all(src, into, names)
        return into
    base = os.path.join(run.staging_root, f"rank-{rank}")
    os.makedirs(base, exist_ok=True)
    same_fs = _same_device(src, base)
    dst = None
    if committed or keep:
        pass
    elif same_fs:
        dst = tempfile.mkdtemp(prefix=f"async-{iteration}-", dir=base)
    else:
        with contextlib.suppress(OSError):
            dst = tempfile.mkdtemp(prefix=SNAPSHOT_PREFIX, dir=os.path.dirname(src))
    if dst is not None:
        if _moved(src, dst, names):
            return dst
        shutil.rmtree(dst, ignore_errors=True)
    dst = tempfile.mkdtemp(prefix=f"async-{iteration}-", dir=base)
    _copy_all(src, dst, names)
    return dst


def _moved(src: str, dst: str, names: List[str]) -> bool:
    """Move ``names`` from ``src`` to ``dst``, one rename each; False (everything put
    back) where a rename fails: a bind mount or the like under the same parent."""
    try:
        _move_all(src, dst, names)
        return True
    except OSError:
        for rel in walk_files(dst):
            if not os.path.lexists(os.path.join(src, rel)):
                _move_all(dst, src, [rel])
        return False


def _copy_all(src: str, dst: str, names: List[str]) -> None:
    for rel in names:
        d = os.path.join(dst, rel)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        copy_file(os.path.join(src, rel), d)


def _same_device(a: str, b: str) -> bool:
    try:
        return os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return False


def _move_all(src: str, dst: str, names: List[str]) -> None:
    for rel in names:
        d = os.path.join(dst, rel)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        s = os.path.join(src, rel)
        if os.path.islink(s):
            copy_file(s, d)  # the content it points at, as a synchronous report copies
        else:
            os.rename(s, d)


class BackgroundCommit:
    """One rank's commit in flight: :func:`.commit.stage_shard` of a snapshot in a
    thread (no collective in it); ``keep_snapshot``: the snapshot is the node-local
    tier's copy, left in place. ``done()`` never blocks; ``result()`` waits and returns
    the shard's manifest, or raises the commit's error."""

    def __init__(self, run: RunDir, iteration: int, rank: int, snapshot_dir: str, *,
                 sync: bool, announce: bool, wait_for_rank0: bool,
                 complete: Optional[Callable[[], Any]] = None,
                 keep_snapshot: bool = False, report: Optional[Dict[str, Any]] = None):
        self.run, self.iteration, self.rank = run, iteration, rank
        self.snapshot_dir = snapshot_dir
        self.started = time.perf_counter()
        self.finished: Optional[float] = None
        self._manifest: Optional[Dict[str, Any]] = None
        self._error: Optional[BaseException] = None
        self._complete = complete
        self._keep_snapshot = keep_snapshot  # the local tier's copy: kept for restarts
        self._report = report  # rank 0's report record, for its manifest
        self._thread = threading.Thread(
            target=self._run, args=(sync, announce, wait_for_rank0),
            name=f"hpctrain-commit-{iteration}", daemon=True)
        self._thread.start()

    def _run(self, sync: bool, announce: bool, wait_for_rank0: bool) -> None:
        try:
            if self._complete is not None:
                self._complete()  # write the files (torch state copied to host memory)
            self._manifest = stage_shard(self.run, self.iteration, self.rank,
                                         Checkpoint(self.snapshot_dir), sync=sync,
                                         announce=announce, wait_for_rank0=wait_for_rank0,
                                         report=self._report)
        except BaseException as e:  # noqa: BLE001 - handed to the training thread
            self._error = e
        finally:
            if not self._keep_snapshot:
                shutil.rmtree(self.snapshot_dir, ignore_errors=True)
            self.finished = time.perf_counter()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> Dict[str, Any]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._manifest is not None
        return self._manifest


__all__ = ["CheckpointUploadMode", "upload_mode", "snapshot", "BackgroundCommit"]
