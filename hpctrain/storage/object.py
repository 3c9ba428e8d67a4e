"""Object stores and the other ``pyarrow.fs`` filesystems (``s3://``, ``gs://``,
``abfs://``…): Ray's choice of client, no hand-written one.

* **Where**: the data (committed checkpoints) under the URI, ``<storage_path>/<name>/
  checkpoints/checkpoint_<index>/``; the run's control files (state, locks, spec, logs,
  attempts, the staging of a checkpoint) in a POSIX directory that mirrors the URI under the
  control root, ``<control root>/<scheme>/<bucket>/<prefix>/<name>``: the control root is
  ``$HPCTRAIN_CONTROL_ROOT``, else ``.object-store/`` under the default storage path (the
  site's shared filesystem, ``$HPCTRAIN_STORAGE_PATH``…), which every node of the job sees.
  File locks, ``O_EXCL`` and appends, which S3 does not have, stay on POSIX; the ranks of
  every node stage their shards there, and rank 0 uploads the whole checkpoint.
* **Publishing without rename**: the staged files are uploaded under the final prefix (one
  ``pyarrow.fs.copy_files`` of the staging directory), then the commit record, last: an object
  PUT is atomic, and the record is what makes a checkpoint exist. A crash mid-upload leaves
  objects without a record, which nothing restores; the next attempt sets them aside.
* **Credentials and endpoint**: what pyarrow's :func:`pyarrow.fs.FileSystem.from_uri`
  reads: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (or ``~/.aws``), ``AWS_ENDPOINT_URL``
  or ``AWS_ENDPOINT_URL_S3`` (an S3-compatible store at a center), ``AWS_DEFAULT_REGION``,
  and the URI's own query (``s3://bucket/p?endpoint_override=…``).
* **A filesystem object** (``RunConfig(storage_filesystem=…)``, Ray's form): the run's
  location is ``pyarrowfs://<path inside it>``; the filesystem itself is pickled into the
  control directory (private, read back only from a file of one's own) for the run's other
  processes.
"""
from __future__ import annotations

import functools
import os
import shutil
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, List, Optional, Tuple
from urllib.parse import urlsplit

import cloudpickle
import pyarrow.fs as pafs

from hpctrain.common.fsutil import atomic_write_bytes, walk_files
from hpctrain.common.trust import load_trusted_pickle
from hpctrain.common.registry import FILESYSTEM_SCHEME, uri_scheme
from hpctrain.checkpoint import METADATA_FILE
from hpctrain.config import default_storage_path
from hpctrain.storage.base import Storage

#: the environment variable naming the POSIX root of the control directories
CONTROL_ROOT_ENV = "HPCTRAIN_CONTROL_ROOT"
#: tests: ``checkpoint_000002:1``: the process uploading that checkpoint kills itself
#: (SIGKILL) once that many of its objects are uploaded — a crash in the middle of an
#: upload, at a known point (that checkpoint is uploaded one object at a time, so that no
#: other upload finishes beside the one that fires it)
KILL_AFTER_ENV = "HPCTRAIN_TEST_KILL_AFTER_OBJECTS"
#: in ``.hpctrain/`` of a run given ``storage_filesystem``: the filesystem object, pickled
FILESYSTEM_FILE = "storage_filesystem.pkl"
#: in a checkpoint retention retired (its record deleted): delete it, it is no damage
RETIRED_MARKER = ".hpctrain_retired"
#: uploads at once (pyarrow.fs.copy_files' own default is its I/O thread pool's size, 8)
UPLOAD_THREADS = 8


def control_root() -> str:
    """The POSIX root under which runs on an object store keep their control files."""
    return os.environ.get(CONTROL_ROOT_ENV) or os.path.join(
        os.path.expanduser(os.path.expandvars(default_storage_path())), ".object-store")


@functools.lru_cache(maxsize=32)
def _filesystem_for(scheme: str, netloc: str, query: str) -> Any:
    # one client per store (from_uri reads the environment: credentials, endpoint)
    uri = f"{scheme}://{netloc}" + (f"?{query}" if query else "")
    return pafs.FileSystem.from_uri(uri)[0]


def split_uri(uri: str) -> Tuple[Any, str]:
    """``(pyarrow filesystem, path inside it)`` of ``uri`` (``s3://bucket/key`` →
    ``(S3FileSystem, "bucket/key")``)."""
    parts = urlsplit(uri)
    fs = _filesystem_for(parts.scheme.lower(), parts.netloc, parts.query)
    return fs, f"{parts.netloc}{parts.path}".rstrip("/")


class ObjectStorage(Storage):
    """A ``pyarrow.fs`` filesystem as a run's data tier (module docstring)."""

    scheme = "s3"
    local = False

    def __init__(self, filesystem: Any = None):
        #: the filesystem object of a ``pyarrowfs://`` run (None: from each URI)
        self.filesystem_object = filesystem

    # -- a filesystem object, for the run's other processes ---------------------------
    def save(self, internal_dir: str) -> None:
        if self.filesystem_object is not None:  # 0600 whatever the run's share: it may
            atomic_write_bytes(os.path.join(internal_dir, FILESYSTEM_FILE),  # hold keys
                               cloudpickle.dumps(self.filesystem_object), mode=0o600)

    def restore(self, internal_dir: str) -> None:
        if self.filesystem_object is None:
            try:
                self.filesystem_object = load_trusted_pickle(
                    os.path.join(internal_dir, FILESYSTEM_FILE),
                    what="the run's storage filesystem")
            except FileNotFoundError:
                pass

    # -- addressing -----------------------------------------------------------------
    def fs_and_path(self, uri: str) -> Tuple[Any, str]:
        """``(filesystem, path inside it)`` of one of this kind's paths."""
        if uri_scheme(uri) == FILESYSTEM_SCHEME:
            if self.filesystem_object is None:
                raise FileNotFoundError(f"{uri}: no filesystem object for this run")
            return self.filesystem_object, uri.split("://", 1)[1].rstrip("/")
        return split_uri(uri)

    def filesystem(self, uri: str) -> Any:
        return self.fs_and_path(uri)[0]

    def control_dir(self, location: str) -> str:
        scheme = uri_scheme(location) or "s3"
        rest = location.split("://", 1)[1].split("?", 1)[0].strip("/")
        parts = [p for p in rest.split("/") if p not in ("", ".", "..")]
        return os.path.join(control_root(), scheme, *parts)

    def join(self, base: str, *parts: str) -> str:
        return "/".join([base.rstrip("/"), *parts])

    # -- reading --------------------------------------------------------------------
    def listdir(self, path: str) -> List[str]:
        fs, p = self.fs_and_path(path)
        infos = fs.get_file_info(pafs.FileSelector(p, allow_not_found=True))
        return [info.base_name for info in infos]

    def isdir(self, path: str) -> bool:
        fs, p = self.fs_and_path(path)
        return fs.get_file_info(p).type == pafs.FileType.Directory

    def read_small(self, path: str) -> bytes:
        fs, p = self.fs_and_path(path)
        with fs.open_input_stream(p) as f:
            return f.read()

    def file_sizes(self, path: str) -> dict:
        """``{relative path: size}`` of every object under ``path`` (one listing)."""
        fs, p = self.fs_and_path(path)
        infos = fs.get_file_info(pafs.FileSelector(p, allow_not_found=True, recursive=True))
        return {i.path[len(p) + 1:]: i.size for i in infos if i.type == pafs.FileType.File}

    # -- writing --------------------------------------------------------------------
    def makedirs(self, path: str, mode: int) -> None:
        return None  # prefixes exist by the objects under them

    def write_atomic(self, path: str, data: bytes, *, sync: bool = True,
                     mode: Optional[int] = None) -> None:
        fs, p = self.fs_and_path(path)
        with fs.open_output_stream(p) as f:  # one PUT: seen whole or not at all
            f.write(data)

    def _upload(self, local_dir: str, path: str, skip: str = "") -> None:
        """Every file of ``local_dir`` under ``path``: one ``pyarrow.fs.copy_files`` of the
        directory; file by file (:data:`UPLOAD_THREADS` at once) when one is to be left
        out, or under the test hook :data:`KILL_AFTER_ENV`."""
        fs, base = self.fs_and_path(path)
        files = [rel for rel in walk_files(local_dir) if rel != skip]
        name, _, limit = os.environ.get(KILL_AFTER_ENV, "").rpartition(":")
        if name != base.rsplit("/", 1)[-1]:
            limit = None
        local = pafs.LocalFileSystem()
        if limit is None and len(files) == len(walk_files(local_dir)):
            # the whole directory in one call: pyarrow's own thread pool, as fast as it goes
            pafs.copy_files(local_dir, base, source_filesystem=local, destination_filesystem=fs)
            return
        done, lock = [0], threading.Lock()

        def one(rel: str) -> None:
            pafs.copy_files(os.path.join(local_dir, rel), f"{base}/{rel}",
                            source_filesystem=local, destination_filesystem=fs,
                            use_threads=False)
            if limit is not None:
                with lock:
                    done[0] += 1
                    if done[0] >= int(limit):
                        os.kill(os.getpid(), signal.SIGKILL)

        threads = 1 if limit is not None else min(UPLOAD_THREADS, max(1, len(files)))
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, files))

    def publish(self, staged: str, final: str, record_name: str, record: bytes, *,
                sync: bool, mode: int) -> None:
        taken = f"{staged}.publishing"  # out of the ranks' sight (Storage.publish)
        os.rename(staged, taken)
        self._upload(taken, final, skip=record_name)
        self.write_atomic(self.join(final, record_name), record)  # last: now it exists
        shutil.rmtree(taken, ignore_errors=True)

    def retire(self, path: str) -> Optional[str]:
        # the marker first (a crash after it: retention chose this one, the next attempt
        # deletes it), then the record: no longer a checkpoint, at once
        fs, p = self.fs_and_path(path)
        self.write_atomic(self.join(path, RETIRED_MARKER), b"")
        try:
            fs.delete_file(f"{p}/{METADATA_FILE}")
        except FileNotFoundError:
            return None
        return path

    def retired(self, path: str) -> bool:
        fs, p = self.fs_and_path(path)
        return fs.get_file_info(f"{p}/{RETIRED_MARKER}").type == pafs.FileType.File

    def set_aside(self, path: str, new_name: str) -> str:
        aside = self.join(path.rstrip("/").rsplit("/", 1)[0], new_name)
        fs, p = self.fs_and_path(path)
        _, a = self.fs_and_path(aside)
        pafs.copy_files(p, a, source_filesystem=fs, destination_filesystem=fs)
        fs.delete_dir(p)
        return aside

    def delete(self, path: str) -> None:
        fs, p = self.fs_and_path(path)
        try:
            fs.delete_dir(p)
        except FileNotFoundError:
            pass

    # -- copies ---------------------------------------------------------------------
    def copy_in(self, local_dir: str, path: str, mode: int) -> None:
        self._upload(local_dir, path)

    def copy_out(self, path: str, local_dir: str) -> str:
        fs, p = self.fs_and_path(path)
        os.makedirs(local_dir, exist_ok=True)
        pafs.copy_files(p, os.path.abspath(local_dir), source_filesystem=fs,
                        destination_filesystem=pafs.LocalFileSystem())
        return local_dir


__all__ = ["ObjectStorage", "split_uri", "control_root", "CONTROL_ROOT_ENV", "KILL_AFTER_ENV",
           "FILESYSTEM_SCHEME"]
