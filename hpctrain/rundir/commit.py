"""Atomic checkpoint commits, including distributed checkpoints (one shard per rank).

Protocol for a checkpoint handed in at report (iteration) i (every rank that hands in
files runs ``stage_shard``; rank 0 runs ``publish`` after an agreement collective proved
that every rank finished staging):

1. rank 0 first lists the names it hands in (``.hpctrain_claims.rank-0.json``); each rank
   then copies — or, from the staging area on the same filesystem, renames — its files
   into ``checkpoints/.tmp_checkpoint_i<i>/``, writes its manifest
   ``.hpctrain_shard.rank-R.json`` (file sizes) last, and (``sync_to_disk``) fsyncs
   them all at once, then the directories (rank 0's ``tmp`` with the commit record). A name rank 0 listed is not
   written again by another rank (DDP replicas that all save ``model.pt``: one write);
   a name another rank already wrote goes aside, to ``.hpctrain_rank-R/``;
2. rank 0 merges the manifests into ``.hpctrain_checkpoint.json`` — each name once, from
   the lowest rank that wrote it (an aside copy replaces the other by one rename) — and
   renames the directory to ``checkpoints/checkpoint_<k>`` (k: the next index): the
   single step that makes it visible;
3. rank 0 applies top-K retention, which never removes the newest checkpoint;
4. in the background each rank hashes its files into ``.hpctrain_digest.rank-R.json``.

A crash before step 2 leaves only a ``.tmp_`` directory, which readers ignore and the
supervisor removes before the next attempt: the previous checkpoint stays the latest.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from hpctrain.common.formats import read_commit_record
from hpctrain.common.registry import is_local_path
from hpctrain.checkpoint import (COMMIT_FORMAT, FORMAT_KEY, INTERNAL_PREFIX, METADATA_FILE,
                                 USER_METADATA_FILE, Checkpoint)
from hpctrain.config import CheckpointConfig
from hpctrain.errors import CheckpointError
from hpctrain.storage.base import Storage
from hpctrain.common.fsutil import (DIGEST_ALGO, FULL_DISK_HINT, atomic_write_json, copy_file,
                                      disk_full, file_digest, fsync_path, json_bytes,
                                      json_default, read_json, walk_files)
from hpctrain.rundir.layout import (SHARD_MANIFEST, TMP_PREFIX, RunDir, checkpoint_dir_name,
                      checkpoints_to_delete)


CLAIMS_FILE = f"{INTERNAL_PREFIX}claims.rank-0.json"
#: rank 0's report record in its shard manifest (``handed_in.py`` publishes with it)
REPORT_KEY = "report"
ASIDE_DIR = INTERNAL_PREFIX + "rank-{rank}"


def _source_dir(checkpoint: Checkpoint, rank: int) -> str:
    """The local directory a checkpoint handed in holds its files in (refused: one in
    storage already, or one that does not exist)."""
    if not is_local_path(checkpoint.path):
        raise CheckpointError(
            f"rank {rank}: report(checkpoint=...) takes a local directory, got "
            f"{checkpoint.path!r}, which is in storage already\nHINT: download it first: "
            "Checkpoint.from_directory(checkpoint.to_directory())")
    src = os.path.abspath(checkpoint.path)
    if not os.path.isdir(src):
        raise CheckpointError(f"rank {rank}: checkpoint directory {src} does not exist")
    return src


def user_files(src: str) -> List[str]:
    """The files of checkpoint directory ``src``, sorted, without hpctrain's own: the
    commit record and the digests of a committed checkpoint handed back in (e.g.
    get_checkpoint()), whose ranks may still be writing a digest there (a
    ``….tmp-PID-TID`` that is renamed away while it is listed)."""
    return [rel for rel in walk_files(src)
            if not os.path.basename(rel).startswith(INTERNAL_PREFIX)]


def _names_to_stage(src: str) -> List[str]:
    """The files of ``src`` a shard takes: :func:`user_files`, less the user's
    metadata, which travels in the manifest and is merged at the commit."""
    return [rel for rel in user_files(src) if rel != USER_METADATA_FILE]


def _finish_sync(flushes: List[Any], written: List[str], tmp: str, rank: int) -> None:
    """Wait for the shard's fsyncs (files and manifest), then fsync the directories they
    are in."""
    for f in flushes:
        f.result()
    dirs = {os.path.dirname(p) for p in written} | {tmp}
    if rank == 0:
        # rank 0 publishes: publish() fsyncs this directory after writing the commit
        # record, before the rename that makes the checkpoint visible
        dirs.discard(tmp)
    for d in dirs:
        fsync_path(d)


def _remove_all(paths: List[str]) -> None:
    """Remove these files, those that exist."""
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


def stage_shard(run: RunDir, iteration: int, rank: int, checkpoint: Checkpoint, *,
                sync: bool, announce: bool = False, wait_for_rank0: bool = False,
                report: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Put this rank's checkpoint files into the temporary directory of the checkpoint
    handed in at report ``iteration``; return the manifest written for them.

    Several ranks may hand in the same name (DDP replicas that all save ``model.pt``):
    the checkpoint keeps one copy, the lowest rank's. Rank 0 (``announce``) lists its
    names before copying; another rank writes no name on that list (``wait_for_rank0``:
    rank 0 is known to hand in a checkpoint at this report, so wait for the list). A name
    already there from another rank is written aside, for ``publish`` to sort out.
    ``report``: rank 0's report record, kept in its manifest (``handed_in.py``)."""
    src = _source_dir(checkpoint, rank)
    tmp = run.staging_tmp(iteration)
    move = is_staged(run, src)
    files: Dict[str, Dict[str, Any]] = {}
    duplicates: List[str] = []  # names rank 0 writes: not written here
    written: List[str] = []     # paths this rank created, for the full-disk clean-up
    partial = ""                # the one being created
    flushes = []  # fsyncs run beside the copies, several at once: the disk merges them
    manifest = {"rank": rank, "moved": move, "algo": DIGEST_ALGO, "files": files,
                "duplicates": duplicates, "metadata": _user_metadata(src, rank),
                **({REPORT_KEY: report} if report is not None else {})}
    manifest_path = os.path.join(tmp, SHARD_MANIFEST.format(rank=rank))
    aside = os.path.join(tmp, ASIDE_DIR.format(rank=rank))
    try:
        # everything up to the manifest, which is written last, can meet a full disk:
        # the directory, each copy, the fsyncs, the manifest itself
        run.makedirs(tmp)
        names = _names_to_stage(src)
        if rank == 0 and announce:
            atomic_write_json(os.path.join(tmp, CLAIMS_FILE), names, sync=False,
                              mode=run.file_mode)
        rank0_names = set() if rank == 0 else _rank0_claims(tmp, wait=wait_for_rank0)
        for rel in names:
            if rel in rank0_names:
                duplicates.append(rel)
                continue
            s, d = os.path.join(src, rel), os.path.join(tmp, rel)
            partial = d  # until _place returns: a full disk may leave part of it
            entry: Dict[str, Any] = {}
            try:
                _place(s, d, move, run)
            except FileExistsError:
                partial = ""  # another rank's file: never ours to remove
                if rank != 0 and rel in _rank0_claims(tmp, wait=False):
                    duplicates.append(rel)  # rank 0 listed it since we looked
                    continue
                d = os.path.join(aside, rel)  # another rank's: the lowest rank's is kept
                partial = d
                _place(s, d, move, run)
                entry["aside"] = True
            partial = ""
            written.append(d)
            files[rel] = {"size": os.path.getsize(d), **entry}
            if move:
                os.unlink(s)
            if sync:
                flushes.append(_flusher().submit(fsync_path, d))
        if move:
            shutil.rmtree(src, ignore_errors=True)
        # the manifest is read only after every rank returned from here (the agreement's
        # proof), and a staging directory left by a crash is removed, never published: so
        # its fsync joins the files' batch, and one directory fsync follows them all
        atomic_write_json(manifest_path, manifest, sync=False, mode=run.file_mode)
        if sync:
            flushes.append(_flusher().submit(fsync_path, manifest_path))
            _finish_sync(flushes, written, tmp, rank)
    except OSError as e:
        with contextlib.suppress(OSError):  # a shard that failed is never taken as staged
            os.unlink(manifest_path)
        if disk_full(e) and not move:
            # this rank's copies are useless now: free their room (for the error record,
            # state.json and the next attempt); these paths are this rank's own
            _remove_all(written + [partial] if partial else written)
        raise _write_failed(rank, iteration, tmp, e) from e
    finally:
        for f in flushes:
            f.cancel()
    return manifest


def _user_metadata(src: str, rank: int) -> Dict[str, Any]:
    """The ``.metadata.json`` of a checkpoint directory handed in (``set_metadata``)."""
    path = os.path.join(src, USER_METADATA_FILE)
    if not os.path.exists(path):
        return {}
    data = read_json(path)
    if not isinstance(data, dict):
        raise CheckpointError(f"rank {rank}: {path} is not a JSON object\nHINT: write it "
                              "with Checkpoint.set_metadata({...})")
    return data


def merged_metadata(trainer: Optional[Dict[str, Any]], shards: List[Dict[str, Any]]
                    ) -> Dict[str, Any]:
    """A commit's metadata: the trainer's ``metadata=`` under what the ranks set on
    their checkpoints (Ray: keys set on the checkpoint win); a lower rank wins a key.

    >>> merged_metadata({"a": 1, "b": 1}, [{"rank": 0, "metadata": {"b": 2}},
    ...                                    {"rank": 1, "metadata": {"b": 3, "c": 3}}])
    {'a': 1, 'b': 2, 'c': 3}
    """
    out = dict(trainer or {})
    for shard in sorted(shards, key=lambda m: -m["rank"]):
        out.update(shard.get("metadata") or {})
    return out


def _place(src: str, dst: str, move: bool, run: RunDir) -> None:
    """Create ``dst`` with ``src``'s content and the run's file ``mode`` (``0600``, or
    ``0640`` shared with the group: never the user's file's own); FileExistsError if it
    is there already. A move links (then the caller unlinks ``src``) instead of renaming:
    linking fails atomically if the name exists, where rename would replace it."""
    run.makedirs(os.path.dirname(dst))
    if move:
        os.link(src, dst)
        os.chmod(dst, run.file_mode)
    else:
        copy_file(src, dst, run.file_mode)


def _rank0_claims(tmp: str, *, wait: bool) -> set:
    """The names rank 0 hands in at this checkpoint (empty if it has not listed them).
    With ``wait``, rank 0 is known to be listing them: wait for the list (rank 0 writes
    it before it copies anything; if rank 0 dies first, the supervisor ends this rank)."""
    path = os.path.join(tmp, CLAIMS_FILE)
    pause = 0.0005
    while True:
        names = read_json(path)
        if names is not None or not wait:
            return set(names or ())
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _write_failed(rank: int, iteration: int, tmp: str, e: OSError) -> CheckpointError:
    """The error for a checkpoint that could not be written (a full disk gets a HINT)."""
    hint = FULL_DISK_HINT if disk_full(e) else ""
    return CheckpointError(
        f"rank {rank}: writing the checkpoint of report {iteration} to {tmp} failed: "
        f"{e.strerror or e}. This checkpoint is discarded; the last committed one is "
        f"untouched.{hint}")


_FLUSHER = None


def _flusher():
    global _FLUSHER
    if _FLUSHER is None:

        _FLUSHER = ThreadPoolExecutor(max_workers=8, thread_name_prefix="hpctrain-fsync")
    return _FLUSHER


def is_staged(run: RunDir, src: str) -> bool:
    """True for directories from ``get_context().get_checkpoint_staging_dir()``: these
    are on the storage filesystem and owned by hpctrain, so they are moved, not copied."""
    root = run.staging_root + os.sep
    return src.startswith(root)


def staged_iterations(run: RunDir, up_to: int) -> List[int]:
    """Reports (iterations ≤ ``up_to``) whose checkpoint is staged but not published."""
    out = []
    for entry in os.listdir(os.path.dirname(run.staging_tmp(0))):  # the POSIX side
        if entry.startswith(TMP_PREFIX):
            try:
                it = int(entry[len(TMP_PREFIX):])
            except ValueError:
                continue
            if it <= up_to:
                out.append(it)
    return sorted(out)


def publish(run: RunDir, iteration: int, index: int, *, metrics: Dict[str, Any],
            world_size: int, config: CheckpointConfig, started: Optional[float],
            metadata: Optional[Dict[str, Any]] = None,
            data_epochs: Optional[Dict[str, Any]] = None,
            on_duplicates: Optional[Callable[[Dict[str, List[int]]], None]] = None,
            validation: Optional[Dict[str, Any]] = None
            ) -> Tuple[Optional[str], List[str]]:
    """Rank 0: commit the checkpoint staged at report ``iteration`` as
    ``checkpoint_<index>`` (or past the highest index a checkpoint name holds, when that
    is higher) by one rename; apply retention.

    Returns the committed directory's name (None if no rank staged a shard) and the
    directories retention dropped, already renamed aside (``.deleting_…``: never read as
    checkpoints, removed by the supervisor if nobody else does) for the caller to delete
    off the training thread, so their size does not weigh on ``report()``. ``metadata``:
    the trainer's, written (under what the ranks set) as the checkpoint's
    ``.metadata.json`` before the rename.
    ``data_epochs``: the epoch each prepared DataLoader and dataset shard resumes at.
    ``on_duplicates`` gets {name: ranks} when several ranks handed in the same names.
    ``validation``: the validation asked at this report ({"fn_kwargs", "timeout_s"}),
    recorded in the commit record: the checkpoint is PENDING_VALIDATION from its commit
    on, so retention keeps it until the validation is done or abandoned."""
    tmp = run.staging_tmp(iteration)
    if not os.path.isdir(tmp):
        return None, []
    # never a name in use: a directory left without a commit record, or moved aside as
    # damaged, keeps its index (RunDir.next_checkpoint_index)
    index = max(index, run.next_checkpoint_index())
    shards = _staged_shards(tmp)
    files, handed_in = _merge_shards(tmp, shards)
    meta = _commit_record(index, iteration, metrics, world_size, shards, files)
    if started is not None:  # None: not measured (the supervisor commits it after the ranks)
        meta["commit_seconds"] = time.time() - started
    user = merged_metadata(metadata, shards)
    if data_epochs:  # where prepared loaders and dataset shards resume (rank 0's)
        meta["data_epochs"] = data_epochs
    if validation is not None:
        meta["validation"] = validation
    duplicated = {rel: ranks for rel, ranks in handed_in.items() if len(ranks) > 1}
    if duplicated:
        meta["duplicate_files"] = duplicated
        if on_duplicates is not None:
            on_duplicates(duplicated)
    name = checkpoint_dir_name(index)
    storage = run.storage
    try:
        if user:
            # its directory entry is made durable with the commit record's (publish)
            path = os.path.join(tmp, USER_METADATA_FILE)
            atomic_write_json(path, user, sync=False, mode=run.file_mode)
            if config.sync_to_disk:
                fsync_path(path)
        # the commit record last, then the one step that makes the checkpoint visible
        # (posix: a rename; a kind without rename: the files, then the record)
        storage.publish(tmp, storage.join(run.checkpoints_dir, name), METADATA_FILE,
                        json_bytes(meta), sync=config.sync_to_disk, mode=run.file_mode)
    except OSError as e:
        if disk_full(e):
            shutil.rmtree(tmp, ignore_errors=True)  # never published: free its room
        raise _write_failed(0, iteration, tmp, e) from e
    doomed = [storage.retire(rec.path) for rec in checkpoints_to_delete(
        run.list_checkpoints(), config.num_to_keep, config.checkpoint_score_attribute,
        config.checkpoint_score_order)]
    return name, [d for d in doomed if d]


def _staged_shards(tmp: str) -> List[Dict[str, Any]]:
    """The shard manifests staged in ``tmp``, by rank (a rank whose manifest is missing
    or unreadable staged nothing)."""
    shards: List[Dict[str, Any]] = []
    for entry in sorted(os.listdir(tmp)):
        if entry.startswith(".hpctrain_shard.rank-"):
            m = read_json(os.path.join(tmp, entry))
            if m:
                shards.append(m)
    return sorted(shards, key=lambda m: m["rank"])


def _commit_record(index: int, iteration: int, metrics: Dict[str, Any], world_size: int,
                   shards: List[Dict[str, Any]], files: Dict[str, Any]) -> Dict[str, Any]:
    """The commit record's fields every checkpoint has (``.metadata.json``)."""
    manifest_sum = hashlib.sha256(
        json.dumps({k: v["size"] for k, v in sorted(files.items())}).encode()).hexdigest()
    return {
        FORMAT_KEY: COMMIT_FORMAT,
        "index": index,
        "iteration": iteration,
        "metrics": json.loads(json.dumps(metrics, default=json_default)),
        "time": time.time(),
        "ranks": [s["rank"] for s in shards],
        "world_size": world_size,
        "digest_algo": DIGEST_ALGO,
        "files": files,
        "manifest_sha256": manifest_sum,
    }


def _merge_shards(tmp: str, shards: List[Dict[str, Any]]
                  ) -> Tuple[Dict[str, Any], Dict[str, List[int]]]:
    """Each name once, the lowest rank's copy (``shards`` sorted by rank): a copy written
    aside replaces the one in place by one rename; the other copies aside are removed.
    Returns the files ({name: {"size", "rank"}}) and, for every name, the ranks that
    handed it in."""
    files: Dict[str, Any] = {}
    handed_in: Dict[str, List[int]] = {}
    for s in shards:
        rank = s["rank"]
        for rel in s.get("duplicates", []):
            handed_in.setdefault(rel, []).append(rank)
        for rel, info in s["files"].items():
            handed_in.setdefault(rel, []).append(rank)
            if rel in files:
                continue
            if info.get("aside"):
                os.replace(os.path.join(tmp, ASIDE_DIR.format(rank=rank), rel),
                           os.path.join(tmp, rel))
            files[rel] = {"size": info["size"], "rank": rank}
    for s in shards:
        shutil.rmtree(os.path.join(tmp, ASIDE_DIR.format(rank=s["rank"])), ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(tmp, CLAIMS_FILE))
    return files, {rel: sorted(r) for rel, r in handed_in.items()}


def digest_shard(run: RunDir, iteration: int, rank: int, files: List[str],
                 committed_name: Optional[str] = None,
                 aside: Sequence[str] = ()) -> None:
    """Hash this rank's files of the checkpoint handed in at report ``iteration`` into
    ``.hpctrain_digest.rank-R.json`` beside them (run off the training thread).

    The files are under the temporary name until rank 0 publishes them and under the
    committed one after (an open file survives the rename), so both are tried; files
    written ``aside`` (another rank had the name) are looked for there first. The
    content digest is what lets a restart detect a checkpoint damaged after its commit;
    computing it here keeps the commit itself at the cost of a copy, or of a rename.
    Only the digests of the rank whose copy was kept are read back."""
    tmp = run.staging_tmp(iteration)
    aside_dir = os.path.join(tmp, ASIDE_DIR.format(rank=rank))

    def candidates(rel: str = ""):
        if rel in aside:
            yield aside_dir
        if committed_name:
            yield run.storage.join(run.checkpoints_dir, committed_name)
        if rel not in aside:
            yield tmp  # another rank's copy sits there until publish
        found = [r for r in run.list_checkpoints() if r.iteration == iteration]
        if found:
            yield found[-1].path

    digests = {}
    for rel in files:
        for base in candidates(rel):
            try:
                digests[rel] = file_digest(os.path.join(base, rel))
                break
            except FileNotFoundError:
                continue
        else:
            return  # gone: deleted by retention, or the attempt was abandoned
    record = {"algo": DIGEST_ALGO, "files": digests}
    name = f"{INTERNAL_PREFIX}digest.rank-{rank}.json"
    for _ in range(100):  # a rename can race with the write; then look again
        bases = [b for b in candidates() if os.path.isdir(b)]
        if not bases:
            return  # neither staged nor committed any more: retention deleted it
        try:
            atomic_write_json(os.path.join(bases[0], name), record, sync=False,
                              mode=run.file_mode)
            return
        except FileNotFoundError:
            time.sleep(0.01)


_DIGEST_RECORD = re.compile(re.escape(INTERNAL_PREFIX) + r"digest\.rank-(\d+)\.json")


def verify_checkpoint(path: str, storage: Optional[Storage] = None, *,
                      contents: bool = True) -> List[str]:
    """Problems found in a committed checkpoint (empty list: it is intact): missing
    files, wrong sizes, digests that do not match (``contents=False``: not read). On a
    storage kind whose data are not local files (an object store): the commit record and
    every file's size, from one listing (no download)."""
    if storage is not None and not storage.local:
        return _verify_remote(path, storage)
    try:
        meta, why = read_commit_record(os.path.join(path, METADATA_FILE))
    except OSError as e:
        return [f"{path}: its commit record could not be read: {e}"]
    if meta is None:
        return [f"{path}: not committed: {why}"]
    problems = []
    late: Dict[Optional[int], Dict[str, str]] = {}  # rank (None: any) -> {name: digest}
    for entry in sorted(os.listdir(path)):
        m = _DIGEST_RECORD.fullmatch(entry)
        if m is None:
            continue  # not a digest record (a ``….tmp-PID-TID`` is one being written)
        try:
            record = read_json(os.path.join(path, entry))
            digests = record.get("files") if isinstance(record, dict) else None
            if not isinstance(digests, dict):
                raise ValueError(f"{entry} is no digest record")
        except ValueError:
            # written without fsync (off the training thread): a node crash can leave it
            # empty; the sizes in the commit record are still checked
            continue
        late.setdefault(int(m.group(1)), {}).update(digests)
        late.setdefault(None, {}).update(digests)
    for rel, info in meta.get("files", {}).items():
        p = os.path.join(path, rel)
        if not os.path.isfile(p):
            problems.append(f"{rel}: missing")
            continue
        if os.path.getsize(p) != info.get("size"):
            problems.append(f"{rel}: size {os.path.getsize(p)} != {info.get('size')}")
            continue
        # the digest of the copy that was kept: its rank's (older checkpoints: any)
        digest = info.get("digest") or late.get(info.get("rank"), {}).get(rel)
        if contents and digest and file_digest(p) != digest:
            problems.append(f"{rel}: content digest mismatch")
    return problems


def _verify_remote(path: str, storage: Storage) -> List[str]:
    try:
        meta, why = read_commit_record(storage.join(path, METADATA_FILE), storage.read_small)
        sizes = storage.file_sizes(path)
    except OSError as e:
        return [f"{path}: its commit record could not be read: {e}"]
    if meta is None:
        return [f"{path}: not committed: {why}"]
    problems = []
    for rel, info in meta.get("files", {}).items():
        if rel not in sizes:
            problems.append(f"{rel}: missing")
        elif sizes[rel] != info.get("size"):
            problems.append(f"{rel}: size {sizes[rel]} != {info.get('size')}")
    return problems


def new_staging_dir(run: RunDir, rank: int) -> str:
    """A fresh directory on the storage filesystem for this rank to write a checkpoint
    into; reporting it moves the files (one rename each) instead of copying them."""
    base = os.path.join(run.staging_root, f"rank-{rank}")
    run.makedirs(base)

    return tempfile.mkdtemp(prefix="ckpt-", dir=base)


__all__ = ["stage_shard", "publish", "staged_iterations", "verify_checkpoint",
           "new_staging_dir", "digest_shard"]
