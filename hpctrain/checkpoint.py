"""``Checkpoint``: a directory of files, as in Ray Train 2.

A checkpoint handed to :func:`hpctrain.report` is copied (or, when it lies in the
run's staging area, moved) into the run directory and committed atomically there.
A checkpoint returned by :func:`hpctrain.get_checkpoint` or ``Result.checkpoint``
points at a committed directory under ``<run>/checkpoints/``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import os
import shutil
import tempfile
from typing import Any, Callable, Dict, Iterator, Optional

import cloudpickle

from hpctrain.common.formats import COMMIT_FORMAT, FORMAT_KEY, read_commit_record
from hpctrain.common.fsutil import atomic_write_bytes
from hpctrain.common.registry import (FILESYSTEM_SCHEME, is_local_path, storage_for,
                                              uri_scheme)

DICT_FILE = "dict_checkpoint.pkl"
METADATA_FILE = ".hpctrain_checkpoint.json"
# The commit record's format (its FORMAT_KEY, imported above): COMMIT_FORMAT is what this
# hpctrain writes and the highest it reads; a record without one is format 1
# (hpctrain.common.formats).
#: The user's metadata (``set_metadata``/``get_metadata``), Ray's file name. Not part of
#: the checkpoint's content record: it may change after the commit, as in Ray.
USER_METADATA_FILE = ".metadata.json"
# Files hpctrain writes inside a committed checkpoint; not part of the user's content.
INTERNAL_PREFIX = ".hpctrain_"


class Checkpoint:
    """A reference to a directory holding checkpoint files."""

    #: the directory is hpctrain's own (``from_dict``, a framework adapter's save):
    #: ``report()`` removes it once its content is handed in
    _temporary: bool = False
    #: writes the checkpoint's files, where they are not written yet (a torch state
    #: checkpoint copied to host memory: ``hpctrain.torch.checkpoints``); ``report()``
    #: calls it before staging, or in the background commit
    _complete: Optional[Callable[[], Any]] = None

    def __init__(self, path: str | os.PathLike, filesystem: Any = None):
        """``path``: a local directory, or a URI of a storage kind (``s3://bucket/key``);
        ``filesystem``: a ``pyarrow.fs`` filesystem that ``path`` is a path inside (Ray's
        form; ``path`` becomes ``pyarrowfs://bucket/key``)."""
        self.path = os.fspath(path)
        #: the filesystem object it was given (None: from the path's URI)
        self._fs = None
        if filesystem is not None and uri_scheme(self.path) == FILESYSTEM_SCHEME:
            self._fs = filesystem  # (hpctrain's own form: a record of such a run)
        elif filesystem is not None and not _is_local_fs(filesystem):
            if uri_scheme(self.path) is not None:
                raise ValueError(f"Checkpoint: with a filesystem, the path is a path inside "
                                 f"it (bucket/key), got the URI {self.path!r}")
            self.path, self._fs = f"{FILESYSTEM_SCHEME}://{self.path.lstrip('/')}", filesystem

    @property
    def filesystem(self) -> Any:
        """The ``pyarrow.fs`` filesystem that holds the checkpoint (Ray's attribute):
        ``LocalFileSystem`` for a local directory, ``S3FileSystem`` for ``s3://``…"""
        import pyarrow.fs as pafs

        storage = self._storage()
        if getattr(storage, "local", True):
            return pafs.LocalFileSystem()
        return storage.filesystem(self.path)

    def _storage(self) -> Any:
        storage = storage_for(self.path, "Checkpoint.path")
        if self._fs is not None:
            storage.filesystem_object = self._fs
        return storage

    @property
    def _remote(self) -> bool:
        return not is_local_path(self.path) and not self._storage().local

    # -- construction ------------------------------------------------------------
    @classmethod
    def from_directory(cls, path: str | os.PathLike) -> "Checkpoint":
        path = os.fspath(path)
        if not is_local_path(path):  # a storage kind's URI (s3://…)
            if not storage_for(path, "Checkpoint.from_directory").isdir(path):
                raise FileNotFoundError(f"Checkpoint.from_directory: nothing at {path!r}")
            return cls(path)
        if not os.path.isdir(path):
            raise FileNotFoundError(f"Checkpoint.from_directory: {path!r} is not a directory")
        return cls(path)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Checkpoint":
        """A small checkpoint from a dict (pickled with cloudpickle into a temp dir)."""
        if not isinstance(data, dict):
            raise TypeError(f"Checkpoint.from_dict expects a dict, got {type(data).__name__}")
        tmp = tempfile.mkdtemp(prefix="hpctrain-dict-ckpt-")
        with open(os.path.join(tmp, DICT_FILE), "wb") as f:
            cloudpickle.dump(data, f)
        ckpt = cls(tmp)
        ckpt._temporary = True  # report() removes it once its content is committed
        return ckpt

    # -- reading -----------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        """The dict saved by :meth:`from_dict` (or by the seed-era ``save_checkpoint``)."""
        if self._remote:
            storage = self._storage()
            try:
                return cloudpickle.loads(storage.read_small(storage.join(self.path, DICT_FILE)))
            except FileNotFoundError:
                raise ValueError(f"checkpoint {self.path} holds no dict (no {DICT_FILE}); "
                                 "use as_directory() to read its files") from None
        file = os.path.join(self.path, DICT_FILE)
        if not os.path.exists(file):
            raise ValueError(
                f"checkpoint {self.path} holds no dict (no {DICT_FILE}); "
                "use as_directory() to read its files"
            )
        with open(file, "rb") as f:
            return cloudpickle.load(f)

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """Yield a local directory with the checkpoint's files: the checkpoint itself on
        a shared filesystem (nothing to download; do not modify it), a temporary download
        of it for an object store (removed afterwards)."""
        if not self._remote:
            yield self.path
            return
        tmp = tempfile.mkdtemp(prefix="hpctrain-ckpt-")
        try:
            yield self._storage().copy_out(self.path, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def to_directory(self, path: Optional[str | os.PathLike] = None) -> str:
        """Copy the checkpoint's files (without hpctrain's metadata) to ``path``."""
        dest = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="hpctrain-ckpt-")
        os.makedirs(dest, exist_ok=True)
        if self._remote:  # downloaded, then hpctrain's own files left out
            self._storage().copy_out(self.path, dest)
            for entry in os.listdir(dest):
                if entry.startswith(INTERNAL_PREFIX):
                    os.unlink(os.path.join(dest, entry))
            return dest
        for entry in os.listdir(self.path):
            if entry.startswith(INTERNAL_PREFIX):
                continue
            src = os.path.join(self.path, entry)
            dst = os.path.join(dest, entry)
            if os.path.isdir(src):
                shutil.copytree(src, dst, dirs_exist_ok=True)
            else:
                shutil.copy2(src, dst)
        return dest

    def get_metadata(self) -> Dict[str, Any]:
        """The metadata stored with the checkpoint (Ray 2's contract): what
        :meth:`set_metadata`/:meth:`update_metadata` wrote, merged at the commit over the
        trainer's ``metadata=`` (keys set on the checkpoint win). ``{}`` when none."""
        storage = self._storage()
        try:
            return json.loads(storage.read_small(storage.join(self.path, USER_METADATA_FILE)))
        except FileNotFoundError:
            return {}

    def set_metadata(self, metadata: Dict[str, Any]) -> None:
        """Replace the checkpoint's metadata (a JSON-serializable dict). On a committed
        checkpoint too: the metadata is not part of its content digest."""
        if not isinstance(metadata, dict):
            raise TypeError(f"Checkpoint.set_metadata expects a dict, got "
                            f"{type(metadata).__name__}")

        try:
            data = json.dumps(metadata)
        except (TypeError, ValueError) as e:
            raise TypeError(f"Checkpoint.set_metadata: the metadata must be "
                            f"JSON-serializable: {e}") from None
        if self._remote:
            storage = self._storage()
            storage.write_atomic(storage.join(self.path, USER_METADATA_FILE), data.encode())
            return
        atomic_write_bytes(os.path.join(self.path, USER_METADATA_FILE), data.encode(),
                           sync=False)

    def update_metadata(self, metadata: Dict[str, Any]) -> None:
        """Merge ``metadata`` into the checkpoint's metadata (its keys replace old ones)."""
        merged = self.get_metadata()
        merged.update(metadata)
        self.set_metadata(merged)

    def commit_record(self) -> Dict[str, Any]:
        """hpctrain's record of a committed checkpoint: index, iteration, metrics, time,
        ranks, file sizes and checksum. ``{}`` for a directory that is not committed (no
        record, or one that cannot be read); a record written by a newer hpctrain raises
        a ConfigError that says so."""
        storage = self._storage()
        try:
            record, _why = read_commit_record(storage.join(self.path, METADATA_FILE),
                                              storage.read_small)
        except OSError:  # an I/O error reading it
            return {}
        return record or {}

    @property
    def metrics(self) -> Dict[str, Any]:
        return self.commit_record().get("metrics", {})

    def __repr__(self) -> str:
        return f"Checkpoint(path={self.path!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and os.path.abspath(self.path) == os.path.abspath(
            other.path
        )

    def __hash__(self) -> int:
        return hash(os.path.abspath(self.path))

    def __fspath__(self) -> str:
        return self.path


class ReportedCheckpointStatus(enum.Enum):
    """Where a committed checkpoint is in its validation (Ray 2.x's names):
    COMMITTED (no validation asked, or it failed or was abandoned), PENDING_VALIDATION
    (asked, no result yet: retention keeps it), VALIDATED (its metrics hold the
    validation's)."""

    COMMITTED = "COMMITTED"
    PENDING_VALIDATION = "PENDING_VALIDATION"
    VALIDATED = "VALIDATED"


def _is_local_fs(filesystem: Any) -> bool:
    return getattr(filesystem, "type_name", None) == "local"


@dataclasses.dataclass
class ReportedCheckpoint:
    """A committed checkpoint and the metrics reported with it (Ray 2.x's
    ``ray.train.ReportedCheckpoint``), as :func:`hpctrain.get_all_reported_checkpoints`
    returns them; the validated metrics merged in, and its ``status``."""

    checkpoint: Checkpoint
    metrics: Dict[str, Any]
    status: ReportedCheckpointStatus = ReportedCheckpointStatus.COMMITTED
