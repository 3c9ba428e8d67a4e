"""Sharding of data that is not HDF5: a list of file names, a NumPy array, any sequence.

The same plan as for HDF5 (:mod:`.plan`) with blocks of one row: the shuffle is a true
global permutation each epoch.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..errors import ConfigError
from . import plan
from .shard import DatasetShard
from hpctrain.common.context import current_session


class SequenceDataset:
    """A sequence (list, tuple, NumPy array) to be sharded over the ranks; options as
    for :class:`~hpctrain.data.HDF5Dataset`, except that ``shuffle`` defaults to False,
    as for :func:`shard_list`: every item exactly once per epoch, in contiguous parts
    that differ by at most one item (a list of files is never silently cut short).
    ``shuffle=True``: a new order each epoch and equal parts (``remainder="drop"``: the
    ``len(items) % world_size`` last items of each epoch's order sit it out). A plain
    list given in ``datasets=`` means ``SequenceDataset(items)``.

    >>> [SequenceDataset(list("abcde")).shard(r, 2).indices().tolist() for r in range(2)]
    [[0, 1, 2], [3, 4]]
    """

    def __init__(self, items: Sequence[Any], *, shuffle: bool = False,
                 seed: Optional[int] = None, remainder: Optional[str] = None):
        if isinstance(items, (str, bytes)) or not hasattr(items, "__len__") or \
                not hasattr(items, "__getitem__"):
            raise ConfigError("SequenceDataset: expected a list, tuple or NumPy array, got "
                              f"{type(items).__name__}")
        if not isinstance(shuffle, bool):
            raise ConfigError(f"SequenceDataset: shuffle: expected true or false, got {shuffle!r}")
        if remainder is not None and remainder not in plan.REMAINDERS:
            raise ConfigError(f"SequenceDataset: remainder: expected \"drop\" or \"uneven\", "
                              f"got {remainder!r}")
        self.items = items
        self.shuffle = shuffle
        self.seed = seed
        self.remainder = remainder

    def check(self, name: str) -> None:
        """Nothing to open."""

    def to_toml(self) -> None:
        return None  # travels in the pickled payload only

    def shard(self, rank: int, world_size: int, run_name: str = "") -> "SequenceShard":
        seed = self.seed if self.seed is not None else plan.seed_from_name(run_name)
        return SequenceShard(self.items, rank=rank, world_size=world_size, seed=seed,
                             shuffle=self.shuffle, remainder=self.remainder)


class SequenceShard(DatasetShard):
    """This rank's part of a sequence: batches are NumPy arrays (for an array) or lists."""

    columns = (None,)

    def __init__(self, items: Sequence[Any], *, rank: int, world_size: int, seed: int,
                 shuffle: bool, remainder: Optional[str]):
        super().__init__(rank=rank, world_size=world_size, num_rows=len(items),
                         shuffle=shuffle, seed=seed, remainder=remainder)
        self.items = items

    def _in_order_pieces(self, segments: List[plan.Segment]) -> List[List[plan.Segment]]:
        """In memory: the contiguous runs of the share, each read as one slice."""
        runs: List[List[int]] = []
        for a, b in segments:
            if runs and runs[-1][1] == a:
                runs[-1][1] = b
            else:
                runs.append([a, b])
        return [[(a, b)] for a, b in runs]

    def _read(self, segments: List[plan.Segment]) -> Dict[Any, Any]:
        if len(segments) == 1:
            a, b = segments[0]
            return {None: self.items[a:b]}
        rows = plan.segment_rows(segments)
        if isinstance(self.items, np.ndarray):
            return {None: self.items[rows]}
        return {None: [self.items[i] for i in rows.tolist()]}

    def _out(self, batch: Dict[Any, Any]) -> Any:
        return batch[None]

    def column_specs(self):
        if not isinstance(self.items, np.ndarray):
            raise TypeError("to_tf() needs a NumPy array; this shard holds a "
                            f"{type(self.items).__name__}")
        return {None: (self.items.dtype, self.items.shape[1:])}


def shard_list(items: Sequence[Any], *, rank: Optional[int] = None,
               world_size: Optional[int] = None, epoch: int = 0, shuffle: bool = False,
               seed: int = 0, remainder: Optional[str] = None) -> Any:
    """This rank's items of ``items`` (a list, tuple or NumPy array): a list, or an array
    for an array. ``rank``/``world_size`` default to the calling training function's
    (0 and 1 outside one). Without ``shuffle``, contiguous parts, every item exactly
    once (``remainder="uneven"``); with it, the epoch's permutation from ``seed`` (the
    same on every rank) and equal parts (``"drop"``). Nothing is ever duplicated.

    >>> [shard_list(["a", "b", "c", "d", "e"], rank=r, world_size=2) for r in range(2)]
    [['a', 'b', 'c'], ['d', 'e']]
    >>> import numpy as np
    >>> shard_list(np.arange(6), rank=1, world_size=3)
    array([2, 3])
    """
    if rank is None or world_size is None:

        s = current_session()
        rank = s.info.world_rank if s is not None and rank is None else (rank or 0)
        world_size = s.info.world_size if s is not None and world_size is None \
            else (world_size or 1)
    idx = plan.shard_indices(len(items), rank, world_size, epoch=epoch, seed=seed,
                             shuffle=shuffle, remainder=remainder)
    if isinstance(items, np.ndarray):
        return items[idx]
    return [items[i] for i in idx]
