"""``posix``: a filesystem every node mounts (Lustre, GPFS, NFS, a local disk for a local
run). The run directory ``<storage_path>/<name>`` holds the control files and the data
alike; a checkpoint is published by one ``rename`` of its staging directory, made durable
by an fsync of ``checkpoints/`` (``sync``)."""
from __future__ import annotations

import os
import shutil
from typing import List, Optional

from hpctrain.common.fsutil import (atomic_write_bytes, copy_file, fsync_path, remove_tree,
                                       rename_aside, walk_files)
from hpctrain.common.formats import read_file_bytes
from hpctrain.common.trust import MODES, makedirs
from hpctrain.storage.base import Storage


class PosixStorage(Storage):
    scheme = "file"
    local = True

    def run_location(self, storage_path: str, name: str) -> str:
        return os.path.join(os.path.abspath(storage_path), name)

    def data_path(self, location: str) -> str:
        return os.path.abspath(location)

    def control_dir(self, location: str) -> str:
        return os.path.abspath(location)

    def join(self, base: str, *parts: str) -> str:
        return os.path.join(base, *parts)

    def listdir(self, path: str) -> List[str]:
        try:
            return os.listdir(path)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def read_small(self, path: str) -> bytes:
        return read_file_bytes(path)  # a regular file; no FIFO to wait on

    def makedirs(self, path: str, mode: int) -> None:
        makedirs(path, mode)

    def write_atomic(self, path: str, data: bytes, *, sync: bool = True,
                     mode: Optional[int] = None) -> None:
        atomic_write_bytes(path, data, sync=sync, mode=mode)

    def publish(self, staged: str, final: str, record_name: str, record: bytes, *,
                sync: bool, mode: int) -> None:
        # the record inside (fsynced with its directory), then the one rename that makes
        # the checkpoint visible, then the parent's fsync that makes the rename durable
        atomic_write_bytes(os.path.join(staged, record_name), record, sync=sync, mode=mode)
        os.rename(staged, final)
        if sync:
            fsync_path(os.path.dirname(final))

    def retire(self, path: str) -> Optional[str]:
        return rename_aside(path)

    def set_aside(self, path: str, new_name: str) -> str:
        aside = os.path.join(os.path.dirname(path.rstrip(os.sep)), new_name)
        os.rename(path, aside)
        return aside

    def delete(self, path: str) -> None:
        if os.path.basename(path).startswith(".deleting_"):
            shutil.rmtree(path, ignore_errors=True)
        else:
            remove_tree(path)

    def copy_in(self, local_dir: str, path: str, mode: int) -> None:
        # directories with the run's directory mode that goes with its file mode
        dir_mode = next((d for d, f, _ in MODES.values() if f == mode), 0o700)
        for rel in walk_files(local_dir):
            dst = os.path.join(path, rel)
            makedirs(os.path.dirname(dst), dir_mode)
            copy_file(os.path.join(local_dir, rel), dst, mode)

    def copy_out(self, path: str, local_dir: str) -> str:
        shutil.copytree(path, local_dir, dirs_exist_ok=True)
        return local_dir


__all__ = ["PosixStorage"]
