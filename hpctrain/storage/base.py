"""The storage interface: what the run directory and its checkpoints need from the place
they are kept (``run.storage_path``).

One :class:`Storage` subclass per kind, one module each (:mod:`.posix`: a filesystem
every node mounts; :mod:`.object`: object stores and the other ``pyarrow.fs``
filesystems), chosen from the storage path by
:func:`storage_for`: a plain path or ``file://`` → ``posix``; ``scheme://…`` → the kind
registered for ``scheme`` (:func:`~hpctrain.common.registry.register_storage`); an
unknown scheme → a ConfigError naming the key, as before.

Two tiers, and which is which:

* **The control directory** (:meth:`Storage.control_dir`): ``state.json`` and its lock,
  ``run.lock``, ``spec.toml``, ``job.sh``, the payload, the attempts' records, the logs,
  ``result.json``, and the staging area where the ranks gather a checkpoint's files
  (``checkpoints/.tmp_checkpoint_i…``). These need POSIX (file locks, ``O_APPEND``,
  ``O_EXCL``, hard links, the owner checks of :mod:`hpctrain.common.trust`), so they are
  always on a POSIX path, written with :mod:`os` and :mod:`hpctrain.common.fsutil`.
* **The data** (:meth:`Storage.join` of the run's location): the committed checkpoints.
  Everything that touches them goes through a :class:`Storage`: publishing a staged
  checkpoint (:meth:`~Storage.publish`), listing (:meth:`~Storage.listdir`), reading a
  small metadata file (:meth:`~Storage.read_small`), retention
  (:meth:`~Storage.retire`, :meth:`~Storage.delete`), setting a damaged one aside, and
  copying a checkpoint in and out.

For ``posix`` the two tiers are one directory, ``<storage_path>/<name>``, and publishing
is one ``rename`` of the staging directory. A kind without rename (an object store)
publishes by copying the staged files under the final prefix and writing the commit
record *last*: the record is what makes a checkpoint exist (``list_checkpoints`` skips a
directory without one), so a crash mid-publish leaves nothing that a restore would pick,
and the supervisor sets the remains aside before the next attempt.

A run whose kind is not ``posix`` records it in its control directory
(``.hpctrain/storage.json``: the kind, its ``"module:Class"`` and the data location), so
that every process of the run — the workers, the batch step on another node — uses the
same kind without being told.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional

from hpctrain.common.fsutil import walk_files


class Storage:
    """Where a run's data lives. Paths are strings of the kind's own form (POSIX paths
    for ``posix``, ``scheme://bucket/prefix`` URIs for an object store); a path with no
    scheme handed to a method is a local POSIX path (a staging directory, a user's
    checkpoint directory)."""

    #: the URI scheme this kind is registered under (``file`` for posix)
    scheme: str = ""
    #: True when the data paths are POSIX paths on this machine (a checkpoint can be
    #: opened where it lies, with no copy out: posix, or a kind mounted locally)
    local: bool = True

    # -- its own state (a filesystem object), kept in the run's control directory ------
    def save(self, internal_dir: str) -> None:
        """Keep what this kind needs beyond the location (a filesystem object) in the
        run's ``.hpctrain/`` (posix: nothing), for the run's other processes."""

    def restore(self, internal_dir: str) -> None:
        """Read back what :meth:`save` kept (nothing kept: nothing to do)."""

    # -- where ----------------------------------------------------------------------
    def run_location(self, storage_path: str, name: str) -> str:
        """The location of run ``name`` under ``storage_path`` (a URI of this kind, which
        :class:`~hpctrain.rundir.layout.RunDir` takes)."""
        return f"{storage_path.rstrip('/')}/{name}"

    def data_path(self, location: str) -> str:
        """The form the data paths of the run at ``location`` take: ``location`` itself,
        or, for a kind whose data are local files (:attr:`local`), their local path."""
        return location

    def control_dir(self, location: str) -> str:
        """The POSIX directory holding the control files of the run at ``location``
        (see the module docstring)."""
        raise NotImplementedError

    def join(self, base: str, *parts: str) -> str:
        """``base/part/…`` in this kind's path form."""
        return "/".join([base.rstrip("/"), *parts])

    # -- reading --------------------------------------------------------------------
    def listdir(self, path: str) -> List[str]:
        """The names directly under ``path`` (a prefix for an object store); ``[]`` when
        there is nothing there."""
        raise NotImplementedError

    def isdir(self, path: str) -> bool:
        """True when ``path`` is a directory (for an object store: a prefix with objects
        under it)."""
        raise NotImplementedError

    def read_small(self, path: str) -> bytes:
        """The bytes of a small file (a commit record, a checkpoint's metadata);
        FileNotFoundError when it is missing; any other error as it is (an I/O error may
        be transient: nothing is taken for damaged for it)."""
        raise NotImplementedError

    def file_sizes(self, path: str) -> Dict[str, int]:
        """``{relative path: size}`` of every file under ``path``."""
        out = {}
        for rel in walk_files(path):
            out[rel] = os.path.getsize(os.path.join(path, rel))
        return out

    # -- writing --------------------------------------------------------------------
    def makedirs(self, path: str, mode: int) -> None:
        """Create ``path`` and its parents with ``mode`` (object stores: nothing to do)."""

    def write_atomic(self, path: str, data: bytes, *, sync: bool = True,
                     mode: Optional[int] = None) -> None:
        """Write ``data`` so that a reader sees the old content or the new, never half."""
        raise NotImplementedError

    def publish(self, staged: str, final: str, record_name: str, record: bytes, *,
                sync: bool, mode: int) -> None:
        """Make the checkpoint staged in the local directory ``staged`` visible as
        ``final``, with its commit record ``record_name`` (``record``) written last: before
        this returns, readers see no checkpoint at ``final``, or an incomplete one without
        a commit record, which they skip. ``staged`` is gone afterwards. ``staged`` is on
        the POSIX side: a kind that copies renames it aside there first (one rename), so
        that a rank's late background write (its digest record) lands in the copy being
        published, never in a ``.tmp_checkpoint_i…`` that a later agreement would
        publish again."""
        raise NotImplementedError

    def retire(self, path: str) -> Optional[str]:
        """Make the checkpoint at ``path`` stop being one, at once (retention: it is no
        longer listed); return what :meth:`delete` removes later, off the training thread,
        or None when it is already gone."""
        raise NotImplementedError

    def retired(self, path: str) -> bool:
        """True when ``path`` is a checkpoint :meth:`retire` took out of the listing
        but a crash kept from :meth:`delete` (a kind whose retire is not one rename)."""
        return False

    def set_aside(self, path: str, new_name: str) -> str:
        """Move the (damaged) checkpoint ``path`` to ``new_name`` beside it, kept; return
        the new path."""
        raise NotImplementedError

    def delete(self, path: str) -> None:
        """Remove ``path`` and everything under it (missing: nothing to do)."""
        raise NotImplementedError

    # -- copies ---------------------------------------------------------------------
    def copy_in(self, local_dir: str, path: str, mode: int) -> None:
        """Copy the local directory ``local_dir`` to ``path`` (files with ``mode``)."""
        raise NotImplementedError

    def copy_out(self, path: str, local_dir: str) -> str:
        """Copy the directory ``path`` into the local directory ``local_dir``; return it."""
        raise NotImplementedError


__all__ = ["Storage"]
