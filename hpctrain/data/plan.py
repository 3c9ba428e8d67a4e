"""Which rows each rank reads in an epoch: pure functions of (rows, ranks, epoch, seed).

Every rank computes the same plan from the same inputs, so the ranks agree on it
without talking to each other. An epoch's plan is built in three steps:

1. The rows are cut into *blocks* of ``block_rows`` consecutive rows (for HDF5: the
   dataset's chunk, so that a block is read with whole-chunk reads). With ``shuffle``
   the block order is a permutation drawn from ``(seed, epoch)``.
2. The blocks, in that order, form the epoch's row sequence; rank ``r`` takes the
   ``r``-th contiguous share of it (:func:`rank_range`). A rank therefore reads about
   ``1/world_size`` of the file, in whole blocks, plus at most two partial blocks.
3. Within its share a rank mixes rows inside *windows* of ``window_blocks`` blocks (a
   permutation drawn from ``(seed, epoch, rank, window)``), so that it reads one window
   at a time and holds no more than that in memory.

**Rows that do not divide by the world size** (``remainder``):

* ``"drop"``: every rank gets ``rows // world_size`` rows; the last ``rows %
  world_size`` rows of the epoch's sequence are left out of that epoch. With
  ``shuffle`` those are different rows each epoch. Equal shards keep collective training
  steps in lockstep (every rank makes the same number of steps). The default with
  ``shuffle``.
* ``"uneven"``: every row exactly once; the first ``rows % world_size`` ranks get one
  row more. The default without ``shuffle`` (evaluation: no row dropped, none counted
  twice). Nothing is ever padded or duplicated.
"""
from __future__ import annotations

import hashlib
from typing import List, Optional, Tuple

import numpy as np

REMAINDERS = ("drop", "uneven")

Segment = Tuple[int, int]  # rows [start, stop) of the file, inside one block


def default_remainder(shuffle: bool) -> str:
    """``"drop"`` for a shuffled (training) dataset, ``"uneven"`` otherwise.

    >>> default_remainder(True), default_remainder(False)
    ('drop', 'uneven')
    """
    return "drop" if shuffle else "uneven"


def seed_from_name(name: str) -> int:
    """A seed every rank derives alike from a name (the run's): stable across processes
    and Python versions (unlike ``hash()``).

    >>> seed_from_name("exp") == seed_from_name("exp") != seed_from_name("exp2")
    True
    """
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little") >> 1


def rank_range(total: int, rank: int, world_size: int, remainder: str) -> Tuple[int, int]:
    """Positions ``[lo, hi)`` of the epoch's row sequence that ``rank`` reads.

    >>> [rank_range(10, r, 4, "uneven") for r in range(4)]
    [(0, 3), (3, 6), (6, 8), (8, 10)]
    >>> [rank_range(10, r, 4, "drop") for r in range(4)]
    [(0, 2), (2, 4), (4, 6), (6, 8)]
    """
    if remainder not in REMAINDERS:
        raise ValueError(f"remainder: expected one of {', '.join(REMAINDERS)}, got {remainder!r}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
    base, extra = divmod(total, world_size)
    if remainder == "drop":
        return rank * base, (rank + 1) * base
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def block_order(num_blocks: int, *, epoch: int, seed: int, shuffle: bool) -> np.ndarray:
    """The epoch's block order: a permutation drawn from ``(seed, epoch)``, or in order.

    >>> block_order(5, epoch=0, seed=1, shuffle=False).tolist()
    [0, 1, 2, 3, 4]
    >>> sorted(block_order(5, epoch=3, seed=1, shuffle=True).tolist())
    [0, 1, 2, 3, 4]
    """
    if not shuffle:
        return np.arange(num_blocks)
    return np.random.default_rng([seed, epoch]).permutation(num_blocks)


def rank_segments(num_rows: int, block_rows: int, rank: int, world_size: int, *,
                  epoch: int = 0, seed: int = 0, shuffle: bool = False,
                  remainder: Optional[str] = None) -> List[Segment]:
    """The row ranges ``rank`` reads in ``epoch``, in reading order; each lies inside one
    block.

    >>> rank_segments(10, 4, 0, 2)          # blocks [0,4) [4,8) [8,10); 5 rows each
    [(0, 4), (4, 5)]
    >>> rank_segments(10, 4, 1, 2)
    [(5, 8), (8, 10)]
    """
    if block_rows < 1:
        raise ValueError(f"block_rows must be >= 1, got {block_rows}")
    remainder = remainder or default_remainder(shuffle)
    num_blocks = -(-num_rows // block_rows)
    order = block_order(num_blocks, epoch=epoch, seed=seed, shuffle=shuffle)
    starts = order * block_rows
    lengths = np.minimum(starts + block_rows, num_rows) - starts
    ends = np.cumsum(lengths)           # sequence position where each block ends
    lo, hi = rank_range(num_rows, rank, world_size, remainder)
    if hi <= lo:
        return []
    seq_starts = ends - lengths
    first = int(np.searchsorted(ends, lo, side="right"))
    last = int(np.searchsorted(seq_starts, hi, side="left"))   # blocks that start before hi
    i = np.arange(first, last)
    a = np.maximum(lo, seq_starts[i]) - seq_starts[i] + starts[i]
    b = np.minimum(hi, ends[i]) - seq_starts[i] + starts[i]
    return list(zip(a.tolist(), b.tolist()))


def segment_rows(segments: List[Segment]) -> np.ndarray:
    """The row indices of ``segments``, in order.

    >>> segment_rows([(4, 6), (0, 2), (9, 10)]).tolist()
    [4, 5, 0, 1, 9]
    """
    if not segments:
        return np.zeros(0, dtype=np.int64)
    bounds = np.asarray(segments, dtype=np.int64)
    lengths = bounds[:, 1] - bounds[:, 0]
    offsets = np.cumsum(lengths) - lengths         # where each segment starts in the output
    return np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(bounds[:, 0] - offsets,
                                                                     lengths)


def windows(segments: List[Segment], window_blocks: int) -> List[List[Segment]]:
    """Consecutive groups of ``window_blocks`` segments.

    >>> windows([(0, 2), (4, 6), (8, 9)], 2)
    [[(0, 2), (4, 6)], [(8, 9)]]
    """
    step = max(1, window_blocks)
    return [segments[i:i + step] for i in range(0, len(segments), step)]


def window_permutation(rows: int, *, epoch: int, seed: int, rank: int, window: int,
                       shuffle: bool) -> Optional[np.ndarray]:
    """The order of the rows of one window (None: as read)."""
    if not shuffle:
        return None
    return np.random.default_rng([seed, epoch, rank, window]).permutation(rows)


def shard_indices(num_rows: int, rank: int, world_size: int, *, epoch: int = 0,
                  seed: int = 0, shuffle: bool = False, remainder: Optional[str] = None,
                  block_rows: int = 1, window_blocks: int = 0) -> np.ndarray:
    """The global row indices ``rank`` sees in ``epoch``, in the order it sees them.
    ``window_blocks=0``: one window (the whole share) — right for data held in memory.

    >>> [shard_indices(10, r, 3).tolist() for r in range(3)]     # every row once
    [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    >>> [len(shard_indices(10, r, 3, shuffle=True)) for r in range(3)]  # equal: 1 row left out
    [3, 3, 3]
    """
    segs = rank_segments(num_rows, block_rows, rank, world_size, epoch=epoch, seed=seed,
                         shuffle=shuffle, remainder=remainder)
    parts = []
    for w, group in enumerate(windows(segs, window_blocks or len(segs) or 1)):
        rows = segment_rows(group)
        perm = window_permutation(len(rows), epoch=epoch, seed=seed, rank=rank, window=w,
                                  shuffle=shuffle)
        parts.append(rows if perm is None else rows[perm])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def cut(segments: List[Segment], size: int) -> List[List[Segment]]:
    """``segments`` cut into consecutive groups of ``size`` rows (the last may be short).

    >>> cut([(0, 5), (10, 12)], 3)
    [[(0, 3)], [(3, 5), (10, 11)], [(11, 12)]]
    """
    out: List[List[Segment]] = []
    group: List[Segment] = []
    have = 0
    for a, b in segments:
        while a < b:
            take = min(b - a, size - have)
            group.append((a, a + take))
            have += take
            a += take
            if have == size:
                out.append(group)
                group, have = [], 0
    if group:
        out.append(group)
    return out


def deal(units: List[List[Segment]], parts: int, batch_size: int
         ) -> Tuple[List[List[Tuple[int, List[Segment]]]], List[List[Segment]]]:
    """Deal an epoch's reads (``units``: lists of segments, read one at a time) to
    ``parts`` loader processes so that together they make as many batches as one reader
    would, each batch made by one process: process ``p`` gets units ``p, p + parts, …``
    less its last ``rows % batch_size`` rows in file order (which would make it a short
    batch of its own); those *tails* of all processes, in process order, are cut into
    the *tail batches*, the ``j``-th for process ``j % parts`` (at most one each).

    Returns ``(own, tails)``: ``own[p]`` is ``[(unit number, segments), …]``,
    ``tails[j]`` the segments of tail batch ``j``. Nothing is read.

    >>> own, tails = deal([[(0, 5)], [(5, 10)], [(10, 13)]], 2, 4)
    >>> own                  # process 0: 8 rows (2 batches); process 1: 4 of its 5 rows
    [[(0, [(0, 5)]), (2, [(10, 13)])], [(1, [(5, 9)])]]
    >>> tails                # ceil(13 / 4) = 4 batches in all: 2 + 1 + this one
    [[(9, 10)]]
    """
    own: List[List[Tuple[int, List[Segment]]]] = []
    tail_rows: List[Segment] = []
    for p in range(parts):
        mine = [(i, list(units[i])) for i in range(p, len(units), parts)]
        left = sum(b - a for _, segs in mine for a, b in segs) % batch_size
        tail: List[Segment] = []
        while left:
            _, segs = mine[-1]
            a, b = segs[-1]
            take = min(left, b - a)
            tail.insert(0, (b - take, b))
            left -= take
            if take == b - a:
                segs.pop()
            else:
                segs[-1] = (a, b - take)
            if not segs:
                mine.pop()
        own.append(mine)
        tail_rows += tail
    return own, cut(tail_rows, batch_size)
