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
from typing import Any, Dict, Iterator, Optional

import cloudpickle

from hpctrain._internal.base.formats import COMMIT_FORMAT, FORMAT_KEY, read_commit_record
from hpctrain._internal.base.fsutil import atomic_write_bytes
from hpctrain._internal.base.registry import storage_for

DICT_FILE = "dict_checkpoint.pkl"
METADATA_FILE = ".hpctrain_checkpoint.json"
# The commit record's format (its FORMAT_KEY, imported above): COMMIT_FORMAT is what this
# hpctrain writes and the highest it reads; a record without one is format 1
# (hpctrain._internal.base.formats).
#: The user's metadata (``set_metadata``/``get_metadata``), Ray's file name. Not part of
#: the checkpoint's content record: it may change after the commit, as in Ray.
USER_METADATA_FILE = ".metadata.json"
# Files hpctrain writes inside a committed checkpoint; not part of the user's content.
INTERNAL_PREFIX = ".hpctrain_"


class Checkpoint:
    """A reference to a directory holding checkpoint files."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._temporary = False

    # -- construction ------------------------------------------------------------
    @classmethod
    def from_directory(cls, path: str | os.PathLike) -> "Checkpoint":
        path = os.fspath(path)
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
        """Yield a local directory with the checkpoint's files (the checkpoint itself:
        on a shared filesystem nothing needs downloading). Do not modify it."""
        yield self.path

    def to_directory(self, path: Optional[str | os.PathLike] = None) -> str:
        """Copy the checkpoint's files (without hpctrain's metadata) to ``path``."""
        dest = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="hpctrain-ckpt-")
        os.makedirs(dest, exist_ok=True)
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
        storage = storage_for(self.path, "Checkpoint.path")
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
        storage = storage_for(self.path, "Checkpoint.path")
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


@dataclasses.dataclass
class ReportedCheckpoint:
    """A committed checkpoint and the metrics reported with it (Ray 2.x's
    ``ray.train.ReportedCheckpoint``), as :func:`hpctrain.get_all_reported_checkpoints`
    returns them; the validated metrics merged in, and its ``status``."""

    checkpoint: Checkpoint
    metrics: Dict[str, Any]
    status: ReportedCheckpointStatus = ReportedCheckpointStatus.COMMITTED
