"""The node-local checkpoint tier: ``CheckpointConfig(local_dir=...)``.

A checkpoint report puts the rank's files into its local tier first (one rename each from
a directory on the same filesystem, else a copy), and ``report()`` returns; a background
thread (:class:`.async_commit.BackgroundCommit`) writes the local copy's manifest —
sizes and content digests, written last — and drains the copy to the run directory with
the ordinary commit protocol. The shared tier stays the only source of truth: a
checkpoint is committed when rank 0 has published it there, and only committed
checkpoints are ever restored.

At a restart each rank looks for its local copy of the checkpoint the supervisor chose
(matched by report iteration) and uses it when it was written in this job, on this node,
sealed by its manifest, and every file still has the manifest's size and digest and the
committed record's size (and the committed digest where it is known yet). It then gets a
restore directory inside its local tier: the local files hard-linked, the commit's
metadata copied, and any file of a sharded checkpoint that another rank wrote linked to
the shared copy (read only if opened). Otherwise it gets the shared copy, verified first.
Each rank records what it did in ``attempts/<n>/restore.rank-<R>.json``.

Layout: ``<local_dir>/hpctrain-<uid>/<run name>-<hash of the run path>/rank-<R>/``,
``ckpt-<iteration>/`` per checkpoint and ``restore-<attempt>/``; every directory is
private (0700), and one another user made is refused. A local copy is removed once a
newer checkpoint is committed, and the rank's whole local tier when its training ends.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import stat
import time
from typing import Any, Dict, List, Optional, Tuple

from hpctrain.checkpoint import INTERNAL_PREFIX, METADATA_FILE, USER_METADATA_FILE
from hpctrain.errors import CheckpointError, UnsafePathError
from hpctrain.common.fsutil import (DIGEST_ALGO, atomic_write_json, file_digest,
                                            read_json, walk_files)
from hpctrain.common.log import get_logger
from hpctrain.common.trust import check_dir
from hpctrain.rundir.commit import verify_checkpoint
from hpctrain.rundir.layout import RunDir

_log = get_logger("local_tier")
LOCAL_MANIFEST = f"{INTERNAL_PREFIX}local.json"
RESTORE_RECORD = "restore.rank-{rank}.json"
CKPT_PREFIX = "ckpt-"
VIEW_PREFIX = "restore-"
_DIGEST_RECORD = INTERNAL_PREFIX + "digest.rank-{rank}.json"


def expand(setting: str) -> Optional[str]:
    """``local_dir`` with ``$VARS`` and ``~`` expanded here, on the node; None when a
    variable is not set."""
    path = os.path.expanduser(os.path.expandvars(setting))
    return None if "$" in path else os.path.abspath(path)


def _private_dir(path: str) -> None:
    """``path`` as a directory only this user can enter (0700): made, or checked."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid():
            raise UnsafePathError(f"refusing the local checkpoint tier {path}: it is not a "
                                  "directory of yours", path=path)
        check_dir(path, "local checkpoint tier")
    os.chmod(path, 0o700)


class LocalTier:
    """One rank's node-local tier (see the module docstring)."""

    def __init__(self, base: str, *, rank: int, node: str, job_id: str):
        self.base, self.rank, self.node, self.job_id = base, rank, node, job_id

    @classmethod
    def open(cls, setting: Optional[str], run: RunDir, *, rank: int, node: str,
             job_id: str) -> Optional["LocalTier"]:
        """The tier under ``setting`` (``CheckpointConfig.local_dir``), or None (with a
        warning) where it cannot be used on this node: checkpoints then go to the run
        directory only, as without a local tier."""
        if not setting:
            return None
        root = expand(setting)
        why = ("an environment variable in it is not set here" if root is None
               else "it is not a directory here" if not os.path.isdir(root)
               else "it is not writable here" if not os.access(root, os.W_OK | os.X_OK)
               else None)
        if why is None:
            key = hashlib.sha256(os.path.realpath(run.path).encode()).hexdigest()[:12]
            base = root
            try:
                for part in (f"hpctrain-{os.getuid()}", f"{run.name}-{key}", f"rank-{rank}"):
                    base = os.path.join(base, part)
                    _private_dir(base)
            except (OSError, UnsafePathError) as e:
                why = str(e)
            else:
                return cls(base, rank=rank, node=node, job_id=job_id)
        _log.warning("checkpoint.local_dir=%r on node %s: %s; rank %d writes its "
                     "checkpoints to the run directory only", setting, node, why, rank)
        return None

    def path(self, iteration: int) -> str:
        return os.path.join(self.base, f"{CKPT_PREFIX}{iteration:06d}")

    # -- the commit (training thread, then the background commit) ---------------------
    def fresh(self, iteration: int) -> str:
        """An empty private directory for the checkpoint of report ``iteration`` (a
        leftover of an attempt that did not commit it is removed)."""
        d = self.path(iteration)
        if os.path.lexists(d):
            shutil.rmtree(d)
        os.mkdir(d, 0o700)
        return d

    def seal(self, iteration: int, attempt: int) -> None:
        """Write the local copy's manifest — sizes and digests of its files — last: a
        copy without it is never restored from."""
        d = self.path(iteration)
        files = {}
        for rel in walk_files(d):
            p = os.path.join(d, rel)
            os.chmod(p, 0o600)
            files[rel] = {"size": os.path.getsize(p), "digest": file_digest(p)}
        atomic_write_json(os.path.join(d, LOCAL_MANIFEST), {
            "iteration": iteration, "rank": self.rank, "node": self.node,
            "job_id": self.job_id, "attempt": attempt, "algo": DIGEST_ALGO,
            "files": files, "time": time.time()}, sync=False, mode=0o600)

    def prune(self, run: RunDir, attempt: int) -> None:
        """Remove the local copies older than the newest committed checkpoint (that one
        and newer ones stay) and the restore directories of earlier attempts."""
        latest = run.list_checkpoints()
        if not latest:
            return
        newest = latest[-1].iteration
        for entry in os.listdir(self.base):
            p = os.path.join(self.base, entry)
            if entry.startswith(CKPT_PREFIX) and _number(entry, CKPT_PREFIX) < newest:
                shutil.rmtree(p, ignore_errors=True)
            elif entry.startswith(VIEW_PREFIX) and _number(entry, VIEW_PREFIX) < attempt:
                shutil.rmtree(p, ignore_errors=True)

    def remove(self) -> None:
        """The training ended: this rank's local tier goes (its run's directory too,
        once no rank's is left in it)."""
        shutil.rmtree(self.base, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(self.base))

    # -- the restore ----------------------------------------------------------------
    def check(self, shared: str, iteration: int) -> Tuple[Dict[str, Any], List[str]]:
        """Why the local copy of the committed checkpoint ``shared`` (report
        ``iteration``) cannot be used (empty list: it can), and the commit record."""
        d = self.path(iteration)
        meta = read_json(os.path.join(shared, METADATA_FILE)) or {}
        manifest = read_json(os.path.join(d, LOCAL_MANIFEST))
        if not os.path.isdir(d):
            return meta, [f"no local copy of report {iteration} on node {self.node}"]
        if not isinstance(manifest, dict):
            return meta, [f"the local copy {d} has no manifest (not completely written)"]
        if manifest.get("node") != self.node:
            return meta, [f"the local copy was written on node {manifest.get('node')}, "
                          f"this rank runs on {self.node}"]
        if str(manifest.get("job_id")) != str(self.job_id):
            return meta, [f"the local copy was written in job {manifest.get('job_id')}, "
                          f"this is job {self.job_id}"]
        if manifest.get("algo") != DIGEST_ALGO:
            return meta, [f"the local copy's digests are {manifest.get('algo')}, "
                          f"not {DIGEST_ALGO}"]
        committed = meta.get("files") or {}
        have = manifest.get("files") or {}
        mine = [rel for rel in committed if rel in have]
        if not mine:
            return meta, ["the local copy holds none of the committed files"]
        shared_digests = self._committed_digests(shared, committed)
        problems = []
        for rel in mine:
            p = os.path.join(d, rel)
            size = committed[rel].get("size")
            if not os.path.isfile(p):
                problems.append(f"{rel}: missing from the local copy")
            elif os.path.getsize(p) != have[rel]["size"] or have[rel]["size"] != size:
                problems.append(f"{rel}: local size {os.path.getsize(p)}, committed {size}")
            else:
                digest = file_digest(p)
                if digest != have[rel]["digest"]:
                    problems.append(f"{rel}: the local copy's content digest does not match "
                                    "its manifest")
                elif rel in shared_digests and shared_digests[rel] != digest:
                    problems.append(f"{rel}: the local copy differs from the committed one")
        return meta, problems

    @staticmethod
    def _committed_digests(shared: str, committed: Dict[str, Any]) -> Dict[str, str]:
        """The content digests the run directory records for the committed files (those
        of the rank whose copy was kept), where they are written yet."""
        out: Dict[str, str] = {}
        for rank in {info.get("rank") for info in committed.values()}:
            record = read_json(os.path.join(shared, _DIGEST_RECORD.format(rank=rank)))
            digests = record.get("files") if isinstance(record, dict) else None
            if isinstance(digests, dict) and record.get("algo", DIGEST_ALGO) == DIGEST_ALGO:
                out.update({rel: d for rel, d in digests.items()
                            if committed.get(rel, {}).get("rank") == rank})
        return out

    def view(self, shared: str, iteration: int, attempt: int,
             meta: Dict[str, Any]) -> Tuple[str, List[str], int]:
        """The restore directory: local files hard-linked, the commit's metadata files
        copied, another rank's files (a sharded checkpoint) linked to the shared copy.
        Returns it, the names left on the shared copy and the bytes restored locally."""
        d = self.path(iteration)
        out = os.path.join(self.base, f"{VIEW_PREFIX}{attempt:03d}")
        if os.path.lexists(out):
            shutil.rmtree(out)
        os.mkdir(out, 0o700)
        elsewhere, local_bytes = [], 0
        for rel, info in (meta.get("files") or {}).items():
            dst = os.path.join(out, rel)
            os.makedirs(os.path.dirname(dst), mode=0o700, exist_ok=True)
            src = os.path.join(d, rel)
            if os.path.isfile(src):
                os.link(src, dst)
                local_bytes += int(info.get("size") or 0)
            else:
                os.symlink(os.path.join(shared, rel), dst)
                elsewhere.append(rel)
        for name in (METADATA_FILE, USER_METADATA_FILE):
            with contextlib.suppress(FileNotFoundError):
                shutil.copyfile(os.path.join(shared, name), os.path.join(out, name))
        return out, elsewhere, local_bytes


def _number(entry: str, prefix: str) -> int:
    try:
        return int(entry[len(prefix):])
    except ValueError:
        return -1


def restore(tier: Optional[LocalTier], shared: Optional[str], iteration: int, *,
            run: RunDir, attempt: int, rank: int) -> Optional[str]:
    """The directory this rank's ``get_checkpoint()`` returns for the committed
    checkpoint ``shared`` (report ``iteration``): its local tier's restore directory
    when the local copy passes every check, else the shared copy itself, verified
    (a damaged one raises CheckpointError, which the supervisor's next attempt acts
    on). Records the choice in the attempt's directory."""
    if not shared:
        return None
    record: Dict[str, Any] = {"rank": rank, "checkpoint": os.path.basename(shared),
                              "iteration": iteration, "node": tier.node if tier else
                              socket.gethostname()}
    path, problems = shared, ["no local tier"]
    if tier is not None:
        meta, problems = tier.check(shared, iteration)
        if not problems:
            path, elsewhere, local_bytes = tier.view(shared, iteration, attempt, meta)
            record.update(source="local", local_path=tier.path(iteration),
                          local_bytes=local_bytes, files_on_shared_copy=elsewhere,
                          shared_bytes_read=0)
    if path == shared:
        record.update(source="shared", local_problems=problems[:10])
        if tier is not None:  # the supervisor verified only sizes: check the content here
            damaged = verify_checkpoint(shared)
            if damaged:
                record["shared_problems"] = damaged[:10]
                _write_record(run, attempt, rank, record)
                raise CheckpointError(
                    f"rank {rank}: no usable local copy ({problems[0]}) and the committed "
                    f"checkpoint {shared} is damaged: {'; '.join(damaged[:3])}. The next "
                    "attempt resumes from an earlier checkpoint")
        record["shared_bytes_read"] = sum(
            int(i.get("size") or 0) for i in (read_json(os.path.join(shared, METADATA_FILE))
                                              or {}).get("files", {}).values())
        if tier is not None:
            _log.warning("rank %d restores %s from the run directory: %s", rank,
                         os.path.basename(shared), problems[0])
    _write_record(run, attempt, rank, record)
    return path


def _write_record(run: RunDir, attempt: int, rank: int, record: Dict[str, Any]) -> None:
    adir = run.attempt_dir(attempt)
    run.makedirs(adir)
    atomic_write_json(os.path.join(adir, RESTORE_RECORD.format(rank=rank)), record,
                      sync=False, mode=run.file_mode)


def restore_records(run: RunDir, attempt: int) -> List[Dict[str, Any]]:
    """The ranks' restore records of ``attempt`` (see :func:`restore`)."""
    adir = run.attempt_dir(attempt)
    if not os.path.isdir(adir):
        return []
    records = [read_json(os.path.join(adir, entry)) for entry in sorted(os.listdir(adir))
               if entry.startswith("restore.rank-") and entry.endswith(".json")]
    return [r for r in records if isinstance(r, dict)]


def damaged_checkpoints(run: RunDir, attempt: int) -> List[str]:
    """The committed checkpoints that a rank of ``attempt`` found damaged on its way to
    restore from them (the supervisor verifies those completely)."""
    return [str(r.get("checkpoint")) for r in restore_records(run, attempt)
            if r.get("shared_problems")]


def restore_summary(run: RunDir, attempt: int) -> Optional[Dict[str, Any]]:
    """For the attempt's record in ``state.json``: which ranks restored from their local
    copy, which from the shared one, and the bytes read from the shared copy."""
    records = restore_records(run, attempt)
    if not records:
        return None
    return {"local": sorted(int(r.get("rank", -1)) for r in records
                            if r.get("source") == "local"),
            "shared": sorted(int(r.get("rank", -1)) for r in records
                             if r.get("source") != "local"),
            "shared_bytes_read": sum(int(r.get("shared_bytes_read") or 0) for r in records)}


__all__ = ["LocalTier", "restore", "expand", "damaged_checkpoints", "restore_records",
           "restore_summary", "LOCAL_MANIFEST",
           "RESTORE_RECORD"]
