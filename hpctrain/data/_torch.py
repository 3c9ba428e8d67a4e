"""A shard as a torch ``IterableDataset`` and ``DataLoader`` (imported by
:meth:`DatasetShard.to_torch` and :meth:`~DatasetShard.to_torch_dataloader` only: it
needs torch). Module-level classes, so that a loader process started by ``spawn`` or
``forkserver`` can unpickle them.

The epoch travels to the loader processes in shared memory, set in the training process
before each epoch: a process forked (or spawned) for the loader holds a copy of the
shard, whose own epoch count would never advance in the training process.
"""
from __future__ import annotations

import multiprocessing
import os
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from .shard import batches

#: Loader processes whose epochs are checked (more are served unchecked).
CHECKED_WORKERS = 256

NO_EPOCH = ("{what}: a DataLoader with num_workers > 0 cannot tell its processes the "
            "epoch (each would count epochs on its own copy of the shard and replay the "
            "same one). Use shard.to_torch_dataloader(batch_size, num_workers=N), or "
            "call ds.set_epoch(epoch) before each epoch.")


def _cpu_tensors(out: Any) -> Any:
    if isinstance(out, dict):
        return {k: _cpu_tensors(v) for k, v in out.items()}
    return torch.from_numpy(out) if isinstance(out, np.ndarray) else out


class ShardIterableDataset(IterableDataset):
    """This rank's batches (see :meth:`DatasetShard.to_torch`)."""

    def __init__(self, shard: Any, batch_size: int, drop_last: bool):
        self.shard = shard
        self.batch_size = batch_size
        self.drop_last = drop_last
        # The epoch of the next pass (-1: none set) and a count of set_epoch calls, as
        # plain attributes (a loader process gets them as they were when it started)
        # and in memory shared with the loader processes (a persistent one reads them
        # there for its later passes); and the set_epoch call each loader process
        # number served last, so that no pass silently replays an epoch.
        self._epoch, self._generation = -1, 0
        self._shared = multiprocessing.RawArray("q", [-1, 0])
        self._served = multiprocessing.RawArray("q", [-1] * CHECKED_WORKERS)
        self._pid = os.getpid()

    def set_epoch(self, epoch: int) -> None:
        """The next pass reads ``epoch``: in this process, and in a DataLoader's
        processes (which cannot count epochs themselves)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"set_epoch: expected an integer >= 0, got {epoch!r}")
        self._epoch, self._generation = epoch, self._generation + 1
        self._shared[0], self._shared[1] = epoch, self._generation

    def _worker_epoch(self, worker: int) -> int:
        if self._pid != os.getpid():  # this process's first pass: the epoch it started with
            self._pid = os.getpid()
            epoch, generation = self._epoch, self._generation
        else:                         # a persistent loader process: the epoch set since
            epoch, generation = self._shared[0], self._shared[1]
        if epoch < 0:
            raise RuntimeError(NO_EPOCH.format(what="shard.to_torch()"))
        if worker < CHECKED_WORKERS:
            if self._served[worker] == generation:
                raise RuntimeError(NO_EPOCH.format(
                    what=f"shard.to_torch(): epoch {epoch} was read already"))
            self._served[worker] = generation
        return epoch

    def __iter__(self):
        info = get_worker_info()
        if info is None:  # in this process: the shard counts the epochs
            if self._epoch >= 0:
                self.shard.set_epoch(self._epoch)
                self._epoch = self._shared[0] = -1
            epoch = self.shard._take_epoch(None)
            yield from self.shard._pass(epoch, (
                _cpu_tensors(self.shard._out(batch)) for batch in
                batches(self.shard._windows(epoch), self.batch_size, self.drop_last)))
            return
        else:
            epoch = self._worker_epoch(info.id)
            windows = self.shard._worker_windows(epoch, info.id, info.num_workers,
                                                 self.batch_size, self.drop_last)
        for batch in batches(windows, self.batch_size, self.drop_last):
            yield _cpu_tensors(self.shard._out(batch))


class ShardDataLoader(DataLoader):
    """Each ``iter()`` is the shard's next epoch, chosen here (in the training process)
    and handed to the loader's processes."""

    def __iter__(self):
        self.dataset.set_epoch(self.dataset.shard._take_epoch(None))
        return super().__iter__()
