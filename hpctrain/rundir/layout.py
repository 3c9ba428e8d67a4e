"""The run directory on the shared filesystem (the layout below; docs/architecture.md places it among the layers).

```
<storage_path>/<name>/
  spec.toml  job.sh  state.json  result.json  progress.csv  error.txt
  checkpoints/checkpoint_000007/      committed: .hpctrain_checkpoint.json inside
  checkpoints/.tmp_checkpoint_i000000012/  being written (never read as a checkpoint)
  logs/<job id>/rank-<r>.out
  .hpctrain/                          payload, per-attempt worker errors and return values
```
The filesystem is the only source of truth: committed checkpoints are found by listing
``checkpoints/`` and reading each one's metadata, so nothing can disagree with it.

The committed checkpoints are the run's *data*, reached through its storage kind
(:attr:`RunDir.storage`, :mod:`hpctrain.storage`): listing, reading commit records,
setting aside and deleting go through it. Everything else here — ``state.json`` and its
lock, ``run.lock``, ``spec.toml``, the payload, the attempts, ``result.json``, the logs and
the staging area ``checkpoints/.tmp_checkpoint_i…`` — is a control file, always on the
POSIX path :attr:`RunDir.path` (for ``posix`` storage, the same directory).
"""
from __future__ import annotations

import contextlib
import csv
import errno
import functools
import json
import math
import os
import re
import socket
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional

from filelock import FileLock, Timeout

from hpctrain.checkpoint import METADATA_FILE, Checkpoint
from hpctrain.errors import CheckpointError, RunLockedError, RunNotFoundError
from hpctrain.common.log import get_logger
from hpctrain.common.metrics import flatten
from hpctrain.common.formats import (FORMAT_KEY, SPEC_FORMAT, STATE_FORMAT, Damaged,
                                        check_format, damaged_spec, damaged_state,
                                        read_commit_record, read_json_record, read_toml_record)
from hpctrain.common.trust import (MODES, fix_mode, make_private_dir, makedirs, modes_of,
                                      read_for_display, read_trusted)
from hpctrain.common.fsutil import (FULL_DISK_HINT, atomic_write_json, disk_full, json_default,
                     read_json, remove_tree)
from hpctrain.common.registry import STORAGES, is_local_path, load
from hpctrain.storage import storage_for
from hpctrain.storage.base import Storage

#: In an attempt's directory: what a sweep's scheduler decided for this trial (stop, or
#: restart from another trial's checkpoint), written by rank 0 for the supervisor.
DECISION_FILE = "tune_decision.json"
#: Written by the supervisor into the attempt directory when the warning came: the
#: reason, the time and the deadline (epoch seconds) by which the ranks are stopped.
STOP_FILE = "stop"

CHECKPOINT_RE = re.compile(r"^checkpoint_(\d{6,})$")
#: Every name that holds or held checkpoint <index>: committed or not, moved aside as
#: damaged (``.damaged_checkpoint_<index>_<time>``) or being deleted by retention. The
#: next index is one past the highest of them, so a commit never meets a name in use.
INDEX_RE = re.compile(r"^(?:\.damaged_|\.deleting_)?checkpoint_(\d{6,})(?:_.*)?$")
#: A checkpoint directory that is not committed (its commit record is missing or cannot
#: be read), or that failed verification, goes aside under this prefix: never read as a
#: checkpoint, never deleted by hpctrain.
DAMAGED_PREFIX = ".damaged_"
TMP_PREFIX = ".tmp_checkpoint_i"  # + the report (iteration) that handed it in
SHARD_MANIFEST = ".hpctrain_shard.rank-{rank}.json"
#: In ``.hpctrain/``: the storage kind of a run whose data is not on its POSIX path
#: (absent: ``posix``, the run directory itself)
STORAGE_RECORD = "storage.json"


def checkpoint_dir_name(index: int) -> str:
    return f"checkpoint_{index:06d}"


class RunDir:
    """Paths and state of one run directory.

    ``path``: the run's POSIX directory, or the location of a run whose storage kind is
    not posix (``scheme://…/<name>``: its control directory is the kind's
    :meth:`~hpctrain.storage.base.Storage.control_dir`, and :meth:`create` records the
    kind there for the run's other processes)."""

    def __init__(self, path: str | os.PathLike):
        path = os.fspath(path)
        self._given: Optional[Storage] = None
        if not is_local_path(path):
            self._given = storage_for(path)
            self.__dict__["_tier"] = (self._given, self._given.data_path(path))
            path = self._given.control_dir(path)
            self._given.restore(os.path.join(path, ".hpctrain"))
        self.path = os.path.abspath(path)

    @functools.cached_property
    def _tier(self) -> tuple:
        """(storage kind, data location): the kind recorded in ``.hpctrain/storage.json``,
        else posix at :attr:`path`."""
        record = self._p(".hpctrain", STORAGE_RECORD)
        if not os.path.lexists(record):  # posix (no owner check: a colleague's run too)
            return storage_for(self.path), self.path
        try:
            # it names code to import: read through the checked loader
            data = json.loads(read_trusted(record, what="the run's storage record"))
        except FileNotFoundError:
            return storage_for(self.path), self.path
        except ValueError as e:
            raise CheckpointError(f"{record}: not a storage record ({e}); expected "
                                  '{"scheme": ..., "target": ..., "location": ...}') from None
        scheme, target = data.get("scheme"), data.get("target")
        cls = STORAGES.load(scheme) if scheme in STORAGES else load(target)
        kind = cls()
        kind.restore(self._p(".hpctrain"))
        return kind, data["location"]

    @property
    def storage(self) -> Storage:
        """The storage kind holding the run's committed checkpoints."""
        return self._tier[0]

    @property
    def location(self) -> str:
        """The run's data location in its storage kind (:attr:`path` for posix)."""
        return self._tier[1]

    # -- paths -------------------------------------------------------------------
    def _p(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    spec_file = property(lambda self: self._p("spec.toml"))
    job_script = property(lambda self: self._p("job.sh"))
    state_file = property(lambda self: self._p("state.json"))
    result_file = property(lambda self: self._p("result.json"))
    progress_file = property(lambda self: self._p("progress.csv"))
    error_file = property(lambda self: self._p("error.txt"))
    #: the committed checkpoints (the storage kind's path form)
    checkpoints_dir = property(lambda self: self.storage.join(self.location, "checkpoints"))
    internal_dir = property(lambda self: self._p(".hpctrain"))
    payload_file = property(lambda self: self._p(".hpctrain", "payload.pkl"))
    driver_file = property(lambda self: self._p(".hpctrain", "driver.json"))
    staging_root = property(lambda self: self._p("checkpoints", ".staging"))

    def logs_dir(self, job_id: str) -> str:
        return self._p("logs", job_id)

    def attempt_dir(self, attempt: int) -> str:
        return self._p(".hpctrain", f"attempt-{attempt:03d}")

    def exists(self) -> bool:
        return os.path.exists(self.state_file)

    def create(self, share: Optional[str] = None) -> None:
        """Create the run directory and its subdirectories, or check the existing ones:
        ``0700`` (``share="group"``: ``0750``) whatever the umask; ``share=None`` keeps an
        existing directory's share (private when new). A directory owned by another user
        or writable by others is refused (:class:`~hpctrain.errors.UnsafePathError`)
        before anything in it is read or written."""
        if share is None:
            share = "group" if self.dir_mode == MODES["group"][0] else "private"
        _warn_if_others_can_rename(os.path.dirname(self.path))
        for d in (self.path, self.internal_dir, self._p("checkpoints"), self._p("logs")):
            make_private_dir(d, share=share, what="run directory" if d == self.path
                             else "run directory's subdirectory")
        self.__dict__.pop("_modes", None)
        if self._given is not None:  # not posix: say which kind, for every process
            kind = type(self._given)
            atomic_write_json(self._p(".hpctrain", STORAGE_RECORD),
                              {"scheme": kind.scheme, "location": self.location,
                               "target": f"{kind.__module__}:{kind.__qualname__}"},
                              mode=self.file_mode)
            self._given.save(self._p(".hpctrain"))
            self.storage.makedirs(self.checkpoints_dir, self.dir_mode)

    @functools.cached_property
    def _modes(self):
        # from the directory itself, once (the share does not change during a run)
        return modes_of(self.path)

    #: modes of what hpctrain creates in this run directory (``0700``/``0600``/``0700``,
    #: or ``0750``/``0640``/``0750`` when it is shared with the group)
    dir_mode = property(lambda self: self._modes[0])
    file_mode = property(lambda self: self._modes[1])
    script_mode = property(lambda self: self._modes[2])

    def makedirs(self, path: str) -> None:
        """A directory inside the run directory (an attempt's, a job's logs), with the
        run's directory mode whatever the umask."""
        makedirs(path, self.dir_mode)

    # -- exclusive ownership -----------------------------------------------------
    @contextlib.contextmanager
    def exclusive(self, wait_s: float = 0) -> Iterator[None]:
        """Held by the supervisor for the whole run: a second run of the same directory
        is refused instead of corrupting the first (after waiting up to ``wait_s``)."""
        path = self._p(".hpctrain", "run.lock")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # one lock object per path: re-entrant within this process (driver → supervisor)
        # (0600: nobody else can open it, so nobody else can hold it)
        lock = _RUN_LOCKS.setdefault(path, FileLock(path, mode=0o600))
        try:
            lock.acquire(timeout=wait_s)
        except Timeout:
            state = self.read_state()
            raise RunLockedError(
                f"run directory {self.path} is in use by another hpctrain process "
                f"(status {state.get('status', '?')}, job ids {state.get('job_ids', [])}).\n"
                "HINT: wait for it to finish, cancel it, or pick another run name."
            ) from None
        try:
            yield
        finally:
            lock.release()

    # -- state.json (under a file lock) -----------------------------------------
    def read_state(self) -> Dict[str, Any]:
        """``state.json`` ({} before the run's first start). A damaged one (truncated,
        not a JSON object) raises a ConfigError naming the file, with a HINT; one of a
        newer format, a ConfigError that says so."""
        path = self.state_file
        try:
            state = read_json_record(path)
            check_format(state, path, STATE_FORMAT, "the run's state record")
        except FileNotFoundError:
            return {}
        except Damaged as e:
            raise damaged_state(path, str(e)) from None
        return state

    # -- spec.toml -----------------------------------------------------------------
    def read_spec(self, *, to_show: bool = False) -> Optional[Dict[str, Any]]:
        """The resolved spec the run was started with (``spec.toml``); None when there
        is none. A damaged one raises a ConfigError naming the file, with a HINT; one of
        a newer format, a ConfigError that says so. Read through the checked loader
        (:func:`~hpctrain.common.trust.read_trusted`), or, ``to_show`` (what is only
        displayed: a colleague's shared run), with no owner check."""
        return read_run_spec(self.spec_file, to_show=to_show)

    @contextlib.contextmanager
    def update_state(self) -> Iterator[Dict[str, Any]]:
        """``with run.update_state() as s: s["status"] = ...`` — read, modify, write
        atomically, under ``state.json.lock`` so concurrent writers never lose updates."""
        with FileLock(self.state_file + ".lock", timeout=60, mode=0o600):
            state = self.read_state()
            yield state
            state[FORMAT_KEY] = STATE_FORMAT
            state["updated"] = time.time()
            atomic_write_json(self.state_file, state, mode=self.file_mode)

    # -- checkpoints -------------------------------------------------------------
    def list_checkpoints(self) -> List["CheckpointRecord"]:
        """Committed checkpoints, oldest first. A directory whose commit record is
        missing or cannot be read (truncated, not a JSON object) is not a committed
        checkpoint and is skipped (:meth:`damaged_checkpoints` lists them); a record of
        a newer format raises a ConfigError that says so."""
        out = []
        for index, path in self._checkpoint_dirs():
            try:
                meta, _why = self._commit_record(path)
            except OSError:  # an I/O error: not listed this time, not taken for damaged
                continue
            if meta is not None:
                rec = CheckpointRecord(index, path, meta,
                                       getattr(self.storage, "filesystem_object", None))
                if meta.get("validation") is not None:  # asked: its result, its launch
                    rec.validation = read_json(self.validation_file(rec.name)) or None
                    rec.launch = read_json(self.validation_file(rec.name, "launch")) or None
                out.append(rec)
        return out

    def _commit_record(self, path: str) -> tuple:
        """:func:`read_commit_record` of the checkpoint ``path``, through the storage."""
        storage = self.storage
        return read_commit_record(storage.join(path, METADATA_FILE), storage.read_small)

    def _checkpoint_dirs(self) -> List[tuple]:
        """``(index, path)`` of every ``checkpoint_<index>`` entry, by index."""
        found = []
        storage, where = self.storage, self.checkpoints_dir
        for entry in storage.listdir(where):
            m = CHECKPOINT_RE.match(entry)
            if m:
                found.append((int(m.group(1)), storage.join(where, entry)))
        return sorted(found)

    def damaged_checkpoints(self) -> List[tuple]:
        """``(path, why)`` of each ``checkpoint_<index>`` entry that is not committed:
        no commit record, or one that cannot be read."""
        out = []
        for _index, path in self._checkpoint_dirs():
            try:
                meta, why = self._commit_record(path)
            except OSError:  # perhaps transient: never moved aside for it
                continue
            if meta is None:
                out.append((path, why))
        return out

    def set_aside(self, path: str) -> str:
        """Rename the checkpoint directory ``path`` to ``.damaged_<name>_<time>`` beside
        it (one rename: never read as a checkpoint again, never deleted, its index never
        reused); return the new path."""
        name = path.rstrip("/").rsplit("/", 1)[-1]
        base = f"{DAMAGED_PREFIX}{name}_{time.strftime('%Y%m%d-%H%M%S')}"
        taken = set(self.storage.listdir(self.checkpoints_dir))
        aside, n = base, 1
        while aside in taken:
            n += 1
            aside = f"{base}-{n}"
        return self.storage.set_aside(path, aside)

    def set_aside_damaged(self) -> List[tuple]:
        """Move every checkpoint directory that is not committed aside
        (:meth:`set_aside`), with a warning naming it and why; return ``(path, aside,
        why)`` of each. Only the supervisor calls this, while no worker runs."""
        moved = []
        for path, why in self.damaged_checkpoints():
            try:
                aside = self.set_aside(path)
            except FileNotFoundError:
                continue  # gone meanwhile
            _logger.warning(
                f"WARNING: {os.path.basename(path)} is not a committed checkpoint: {why}. "
                f"Moved aside to {aside} (kept, not deleted); the run resumes from its "
                "last good checkpoint")
            moved.append((path, aside, why))
        return moved

    def latest_checkpoint(self) -> Optional["CheckpointRecord"]:
        cps = self.list_checkpoints()
        return cps[-1] if cps else None

    def next_checkpoint_index(self) -> int:
        """One past the highest index any checkpoint name holds: committed or not, moved
        aside as damaged, or being deleted (:data:`INDEX_RE`). A directory left without
        a commit record never makes a commit collide with it."""
        names = set(self.storage.listdir(self.checkpoints_dir)) | set(
            _listdir(self._p("checkpoints")))  # the data, and the staging beside it
        indices = [int(m.group(1)) for m in map(INDEX_RE.match, names) if m]
        return max(indices) + 1 if indices else 0

    def clean_incomplete(self) -> List[str]:
        """Remove half-written checkpoints and staging leftovers of a dead attempt, and
        move aside (never delete) checkpoint directories that are not committed
        (:meth:`set_aside_damaged`). Only the supervisor calls this, and only while no
        worker runs."""
        removed = []
        for entry in _listdir(self._p("checkpoints")):  # staging: on the POSIX side
            if entry.startswith((".tmp_checkpoint_", ".deleting_", ".staging")):
                remove_tree(self._p("checkpoints", entry))
                removed.append(entry)
        if self.checkpoints_dir != self._p("checkpoints"):  # retention's leftovers there
            storage = self.storage
            for entry in storage.listdir(self.checkpoints_dir):
                path = storage.join(self.checkpoints_dir, entry)
                if entry.startswith(".deleting_") or (CHECKPOINT_RE.match(entry) and
                                                      storage.retired(path)):
                    storage.delete(path)
                    removed.append(entry)
        self.set_aside_damaged()
        return removed

    def validation_file(self, name: str, kind: str = "result") -> str:
        """``.hpctrain/validation/<checkpoint name>.<kind>.json``: a validation's result
        (its metrics or its error, written once, atomically, by the validation), its
        launch (the process or job running it) and its script."""
        return self._p(".hpctrain", "validation", f"{name}.{kind}.json")

    def staging_tmp(self, iteration: int) -> str:
        """Where the shards of the checkpoint handed in at report ``iteration`` gather
        (always on the POSIX side: :meth:`~hpctrain.storage.base.Storage.publish` takes it
        from there)."""
        return self._p("checkpoints", f"{TMP_PREFIX}{iteration:09d}")


_RUN_LOCKS: Dict[str, FileLock] = {}
_logger = get_logger("rundir")


def read_run_spec(path: str, *, to_show: bool = False) -> Optional[Dict[str, Any]]:
    """A run directory's ``spec.toml`` at ``path`` (:meth:`RunDir.read_spec`)."""
    try:
        data = read_toml_record(path, read_for_display(path) if to_show
                                else read_trusted(path, what="the run's spec"))
        check_format(data, path, SPEC_FORMAT, "the run's spec")
    except FileNotFoundError:
        return None
    except Damaged as e:
        raise damaged_spec(path, str(e)) from None
    return data


RUN_DIR_HINT = ("give a run directory, <storage_path>/<name> (what Result.path and "
                "`hpctrain status` show)")


def existing_run(path: str | os.PathLike, caller: str, *,
                 restorable: bool = False) -> RunDir:
    """The run directory at ``path``; a :class:`RunNotFoundError` (a ValueError and a
    FileNotFoundError) naming ``caller`` when ``path`` is missing, not a directory, not
    a run directory, or (``restorable``) lacks the training function to continue it."""
    run = RunDir(path)
    what = f"{caller}: invalid restore path {run.path}" if restorable else \
        f"{caller}: {run.path}"
    if not os.path.exists(run.path):
        raise RunNotFoundError(f"{what}: it does not exist", hint=RUN_DIR_HINT)
    if not os.path.isdir(run.path):
        raise RunNotFoundError(f"{what}: it is not a directory", hint=RUN_DIR_HINT)
    if not run.exists():
        raise RunNotFoundError(f"{what}: it is not an hpctrain run directory (no state.json)",
                               hint=RUN_DIR_HINT)
    if restorable and not os.path.exists(run.payload_file):
        raise RunNotFoundError(
            f"{what}: the run directory has no training function to continue "
            f"({os.path.relpath(run.payload_file, run.path)} is missing)",
            hint="start a new run; Trainer.can_restore(path) tells whether a directory "
                 "can be restored")
    return run


_WARNED_STORAGE: set = set()


def _warn_if_others_can_rename(storage: str) -> None:
    """Once per storage path: say so when other users could rename run directories in it
    (writable by group or other, not sticky). hpctrain refuses whatever they would put in
    a run's place, but a submission reads ``job.sh`` by its path."""
    try:
        st = os.stat(storage)
    except OSError:
        return
    if storage in _WARNED_STORAGE or not st.st_mode & 0o022 or st.st_mode & 0o1000:
        return
    _WARNED_STORAGE.add(storage)
    get_logger("rundir").warning(
        f"WARNING: other users can rename run directories in {storage} (mode "
        f"{st.st_mode & 0o7777:04o}).\nHINT: hpctrain refuses whatever they put in a run's "
        f"place, but keep runs in a directory only you can write (chmod go-w {storage}), "
        "or one with the sticky bit (chmod +t), as /tmp and scratch file systems have")


@dataclass
class CheckpointRecord:
    index: int
    path: str
    metadata: Dict[str, Any]
    #: the run's filesystem object (a run given ``storage_filesystem``), else None
    filesystem: Any = None
    #: the validation's result ({"metrics": …} or {"error": …}), when one was asked
    validation: Optional[Dict[str, Any]] = None
    #: where that validation runs ({"kind": "local", "pid", "host"} or a job's id)
    launch: Optional[Dict[str, Any]] = None

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def metrics(self) -> Dict[str, Any]:
        """The reported metrics, with a validation's merged over them (Ray: validated
        metrics overwrite the initial ones of the same key)."""
        reported = self.metadata.get("metrics", {})
        validated = (self.validation or {}).get("metrics")
        return {**reported, **validated} if isinstance(validated, dict) else reported

    @property
    def status(self) -> str:
        """COMMITTED, PENDING_VALIDATION or VALIDATED (Ray's ReportedCheckpointStatus):
        COMMITTED too for a validation that failed or was abandoned (:meth:`abandoned`)."""
        if self.metadata.get("validation") is None:
            return "COMMITTED"
        if isinstance((self.validation or {}).get("metrics"), dict):
            return "VALIDATED"
        if self.validation is not None or self.abandoned():
            return "COMMITTED"
        return "PENDING_VALIDATION"

    def abandoned(self, now: Optional[float] = None) -> bool:
        """A validation without a result that never will have one: its ``timeout_s`` has
        passed since the commit, or its process (on this host) is gone."""
        request = self.metadata.get("validation") or {}
        timeout = request.get("timeout_s")
        if timeout is not None and (now or time.time()) > float(
                self.metadata.get("time", 0)) + float(timeout):
            return True
        launch = self.launch or {}
        if launch.get("kind") == "local" and launch.get("host") == socket.gethostname():
            try:
                os.kill(int(launch["pid"]), 0)
            except ProcessLookupError:
                # gone: abandoned, unless it wrote its result since it was listed
                result = launch.get("result")
                return not result or read_json(result) is None
            except (OSError, ValueError, KeyError):
                return False
        return False

    @property
    def validation_error(self) -> Optional[str]:
        """Why the validation failed (its traceback's last line first), or None."""
        return (self.validation or {}).get("error")

    @property
    def iteration(self) -> int:
        return int(self.metadata.get("iteration", 0))

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.path, self.filesystem)


def _listdir(path: str) -> List[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


# -- retention ---------------------------------------------------------------------
def _score(record: CheckpointRecord, attribute: str, sign: float) -> tuple:
    """The rank of ``record`` by ``attribute`` (``a/b`` reaches a nested metric), higher
    is better: a number (``-inf`` included) over NaN (Ray: nan < -inf < valid) over a
    record without the attribute (or with a value that is no number)."""
    v = flatten(record.metrics).get(attribute)
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return (0, 0.0)
    if math.isnan(v):
        return (1, 0.0)
    return (2, sign * v)


def rank_checkpoints(records: List[CheckpointRecord], score_attribute: Optional[str],
                     score_order: str) -> List[CheckpointRecord]:
    """``records`` ordered worst to best, as Ray's checkpoint manager keeps them: by
    ``score_attribute`` (``score_order`` "max" or "min"), newer above older on a tie;
    by recency when ``score_attribute`` is None.

    >>> recs = [CheckpointRecord(i, f"c{i}", {"metrics": {"loss": l}})
    ...         for i, l in enumerate([3, float("nan"), 1, 3])]
    >>> [r.index for r in rank_checkpoints(recs, "loss", "min")]
    [1, 0, 3, 2]
    """
    if score_attribute is None:
        return sorted(records, key=lambda r: r.index)
    sign = 1.0 if score_order == "max" else -1.0
    return sorted(records, key=lambda r: (_score(r, score_attribute, sign), r.index))


def best_checkpoints(records: List[CheckpointRecord], num_to_keep: Optional[int],
                     score_attribute: Optional[str], score_order: str
                     ) -> List[CheckpointRecord]:
    """Ray's ``Result.best_checkpoints``: the ``num_to_keep`` best (all when None),
    worst to best. The latest checkpoint, which retention also keeps, is listed only
    when it is one of them."""
    ranked = rank_checkpoints(records, score_attribute, score_order)
    return ranked if num_to_keep is None else ranked[max(len(ranked) - num_to_keep, 0):]


def checkpoints_to_delete(records: List[CheckpointRecord], num_to_keep: Optional[int],
                          score_attribute: Optional[str], score_order: str) -> List[CheckpointRecord]:
    """Which committed checkpoints top-K retention removes.

    Keeps the ``num_to_keep`` best by ``score_attribute`` (most recent when None) and,
    always, the latest — the one a restart resumes from. A NaN score ranks below every
    number, a record without the score attribute below those (see :func:`_score`).

    >>> recs = [CheckpointRecord(i, f"c{i}", {"metrics": {"loss": l}}) for i, l in enumerate([3, 1, 2, 5])]
    >>> [r.index for r in checkpoints_to_delete(recs, 1, "loss", "min")]  # keep best (1) + latest (3)
    [0, 2]
    """
    if num_to_keep is None or len(records) <= num_to_keep:
        return []
    # a checkpoint whose validation is pending is never deleted before the validation is
    # done or abandoned, and takes no place among the best: its score is not known yet
    # (ranked by its reported one, it could push out a checkpoint that stays in the top)
    pending = {r.index for r in records if r.status == "PENDING_VALIDATION"}
    settled = [r for r in records if r.index not in pending]
    latest = max(records, key=lambda r: r.index)
    keep = {r.index for r in best_checkpoints(settled, num_to_keep, score_attribute,
                                              score_order)} | {latest.index} | pending
    return [r for r in settled if r.index not in keep]


# -- result.json / progress.csv ------------------------------------------------------
class ResultWriter:
    """Appends one JSON line per report to result.json and a row to progress.csv.
    Rank 0 only. Each line goes out in one ``write`` of a complete line, so a reader
    (``hpctrain status``, the progress display) never sees half a record; a write that
    meets a full disk is taken back off the file and raised as a :class:`CheckpointError`
    with a HINT. The CSV columns are those of the first report (Ray does the same);
    later keys are in result.json."""

    def __init__(self, run: RunDir):
        self._paths = (run.result_file, run.progress_file)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self._json = os.open(run.result_file, flags, run.file_mode)
        self._csv_fd = os.open(run.progress_file, flags, run.file_mode)
        for fd in (self._json, self._csv_fd):
            fix_mode(fd, run.file_mode)
        self._fields = _read_csv_header(run.progress_file)
        # the files' lengths, kept here (this process is their only writer while it
        # runs): a failed write is taken back to them without a stat per report
        self._sizes = tuple(os.fstat(fd).st_size for fd in (self._json, self._csv_fd))
        self._out = _Lines()  # what the CSV writer wrote for this report
        self._csv = csv.writer(self._out, lineterminator="\n")

    def write(self, row: Dict[str, Any]) -> None:
        # the usual row holds only plain scalars: no flattened copy, no cell to convert
        plain = _SCALARS.issuperset(map(type, row.values()))
        flat = row if plain else flatten(row)
        header = self._fields is None
        fields = list(flat) if header else self._fields
        out = self._out
        out.clear()
        if header:
            self._csv.writerow(fields)
        # (a missing column is None: the csv module writes it as an empty cell)
        if plain:
            self._csv.writerow(row.values() if list(row) == fields else map(row.get, fields))
        else:
            self._csv.writerow([_csv_cell(v) for v in map(flat.get, fields)])
        line, cells_line = (_encode(row) + "\n").encode(), "".join(out).encode()
        json_size, csv_size = self._sizes
        try:
            if (os.write(self._json, line) != len(line)
                    or os.write(self._csv_fd, cells_line) != len(cells_line)):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # the disk is full
        except OSError as e:
            for fd, size in ((self._json, json_size), (self._csv_fd, csv_size)):
                with contextlib.suppress(OSError):  # both files, or neither
                    os.ftruncate(fd, size)
            raise CheckpointError(
                f"recording report {row.get('_training_iteration')} in {self._paths[0]} "
                f"failed: {e.strerror or e}. Its metrics are not recorded; committed "
                f"checkpoints are untouched.{FULL_DISK_HINT if disk_full(e) else ''}") from e
        self._fields = fields
        self._sizes = (json_size + len(line), csv_size + len(cells_line))

    def close(self) -> None:
        for fd in (self._json, self._csv_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


#: json.dumps(row, default=json_default) without making an encoder per report
_ENCODE = json.JSONEncoder(default=json_default).encode


def _c_encoder() -> Any:
    """The C encoder json.dumps makes per call, made once (same separators, NaN and
    non-ASCII handling; no circular-reference bookkeeping: see :func:`_encode`), or None
    where this Python lacks it."""
    try:
        return json.encoder.c_make_encoder(  # type: ignore[misc]
            None, json_default, json.encoder.encode_basestring_ascii, None, ": ", ", ",
            False, False, True)
    except TypeError:  # no C speedups (None), or another signature
        return None


_C_ENCODE = _c_encoder()


def _encode(row: Dict[str, Any]) -> str:
    """``json.dumps(row, default=json_default)``; a row that contains itself is the
    same ValueError."""
    if _C_ENCODE is not None:
        try:
            return "".join(_C_ENCODE(row, 0))
        except RecursionError:
            pass  # a circular reference (or a row too deep): json.dumps says which
    return _ENCODE(row)
#: values written as they are in both files (a row of only these needs no conversion)
_SCALARS = frozenset({int, float, str, bool, type(None)})


class _Lines(list):
    """The csv writer's file: the lines it writes, kept for one ``os.write``."""

    write = list.append


def _csv_cell(v: Any) -> Any:
    """A progress.csv cell: lists and dicts as JSON."""
    return json.dumps(v, default=json_default) if isinstance(v, (list, dict)) else v


def _read_csv_header(path: str) -> Optional[List[str]]:
    try:
        with open(path, newline="") as f:
            first = f.readline()
    except FileNotFoundError:
        return None
    return next(csv.reader([first])) if first.strip() else None


def read_results(path: str) -> List[Dict[str, Any]]:
    """All complete lines of a result.json (a torn last line is ignored)."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                if not line.endswith("\n"):
                    break
                with contextlib.suppress(json.JSONDecodeError):
                    out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


class LineTail:
    """Follows a growing text file (a log, result.json): ``lines()`` returns the complete
    new lines since the last call (and, with ``final``, the unfinished last one too)."""

    def __init__(self, path: str):
        self.path = path
        self._offset = 0
        self._partial = ""

    def lines(self, final: bool = False) -> List[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
                self._offset = f.tell()
        except FileNotFoundError:
            data = b""
        lines = (self._partial + data.decode(errors="replace")).split("\n")
        self._partial = lines.pop()
        if final and self._partial:
            lines.append(self._partial)
            self._partial = ""
        return lines


class ResultTail(LineTail):
    """Follows result.json as it grows: ``poll()`` returns the new complete rows."""

    def poll(self) -> List[Dict[str, Any]]:
        out = []
        for line in self.lines():
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
        return out


def autofilled(iteration: int, this_iter_s: float, now: float, total_s: float,
               detailed: bool) -> Dict[str, Any]:
    """Ray's automatic columns of a report made at ``now`` (``time.time()``)."""
    row: Dict[str, Any] = {
        "_timestamp": int(now),
        "_time_this_iter_s": this_iter_s,
        "_training_iteration": iteration,
    }
    if detailed:
        host = socket.gethostname()
        row.update(
            _date=time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(now)),
            _hostname=host,
            _node_ip=_node_ip(host),
            _pid=os.getpid(),
            _time_total_s=total_s,
        )
    return row


_IP_CACHE: Dict[str, str] = {}


def _node_ip(host: str) -> str:
    if host not in _IP_CACHE:
        try:
            _IP_CACHE[host] = socket.gethostbyname(host)
        except OSError:
            _IP_CACHE[host] = "127.0.0.1"
    return _IP_CACHE[host]
