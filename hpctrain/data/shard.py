"""What ``hpctrain.get_dataset_shard(name)`` returns: this rank's part of a dataset.

A shard reads lazily, one window of its plan (:mod:`.plan`) at a time, and yields
batches. Each pass (``iter_batches``, one iteration of a torch ``DataLoader`` or a
``tf.data.Dataset`` made from it) is one epoch: the shard counts them, starting at 0,
so every rank shuffles the same way as long as every rank makes the same passes. After
resuming from a checkpoint, call ``shard.set_epoch(epoch)`` (as with torch's
``DistributedSampler``), or pass ``epoch=`` to a pass.
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import ConfigError
from . import plan
from .prefetch import check_prefetch, prefetch

#: ``batch_format`` values of Ray's ``iter_batches`` that a shard makes (NumPy batches).
BATCH_FORMATS = ("default", "numpy")


def _check_ray_options(batch_format: Optional[str],
                       local_shuffle_buffer_size: Optional[int]) -> None:
    """Ray Data arguments a shard takes only in the form it supports."""
    if batch_format not in BATCH_FORMATS:
        raise ConfigError(f"batch_format: expected \"default\" or \"numpy\" (NumPy "
                          f"batches), got {batch_format!r}",
                          hint="make a pandas DataFrame or Arrow table from the NumPy "
                               "batch in the loop if you need one")
    if local_shuffle_buffer_size is not None:
        raise ConfigError("local_shuffle_buffer_size: a shard has no local shuffle buffer; "
                          "it shuffles its rows itself, anew each epoch",
                          hint="shuffling is the dataset's: HDF5Dataset(..., shuffle=True) "
                               "(the default) mixes window_mb of rows at a time; leave "
                               "local_shuffle_buffer_size out")


def _first_next(make: Any) -> Iterator[Any]:
    """``make()``'s items, with ``make`` called at the first ``next``: the pass (and
    its epoch) starts when the loop does."""
    yield from make()


def _concat(pieces: List[Dict[str, Any]]) -> Dict[str, Any]:
    out = {}
    for key in pieces[0]:
        parts = [p[key] for p in pieces]
        out[key] = (np.concatenate(parts) if isinstance(parts[0], np.ndarray)
                    else [x for part in parts for x in part])
    return out


Window = Tuple[Dict[Any, Any], Optional[np.ndarray]]  # ({column: rows}, permutation)


def _take(rows: Any, idx: Any) -> Any:
    if isinstance(rows, np.ndarray):
        return rows[idx]
    if isinstance(idx, slice):
        return rows[idx]
    return [rows[i] for i in idx]


def _row(rows: Any, j: int) -> Any:
    """Row ``j`` of a column, copied out of the window's buffer (NumPy: a row of a 2-D
    array is a view).

    >>> buf = np.zeros((2, 3)); row = _row(buf, 0); buf[0] = 7; row.tolist()
    [0.0, 0.0, 0.0]
    """
    row = rows[j]
    return row.copy() if isinstance(row, np.ndarray) else row


def _slice(window: Window, a: int, b: int) -> Dict[str, Any]:
    """Rows ``a:b`` of a window in its order: a view when unpermuted, else gathered."""
    data, perm = window
    idx = slice(a, b) if perm is None else perm[a:b]
    return {k: _take(v, idx) for k, v in data.items()}


def batches(windows: Iterator[Window], batch_size: int,
            drop_last: bool) -> Iterator[Dict[str, Any]]:
    """Cut a stream of windows (``({column: rows}, permutation or None)``) into batches
    of ``batch_size`` rows; a batch may span windows. The last, shorter batch is kept
    unless ``drop_last``. A permuted window's rows are gathered batch by batch, so a
    window's buffer may be reused once the next window is asked for.

    >>> ws = iter([({"x": np.arange(3)}, None), ({"x": np.arange(3, 7)}, np.array([3, 2, 1, 0]))])
    >>> [b["x"].tolist() for b in batches(ws, 3, False)]
    [[0, 1, 2], [6, 5, 4], [3]]
    """
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size: expected an integer >= 1, got {batch_size!r}")
    pending: List[Dict[str, Any]] = []
    have = 0
    for window in windows:
        rows = len(next(iter(window[0].values())))
        pos = 0
        if pending:
            take = min(batch_size - have, rows)
            pending.append(_slice(window, 0, take))
            have += take
            pos = take
            if have == batch_size:
                yield _concat(pending)
                pending, have = [], 0
        if pos == 0 and rows == batch_size and window[1] is None:
            yield window[0]  # a whole unpermuted window is a batch as it is
            continue
        while rows - pos >= batch_size:
            yield _slice(window, pos, pos + batch_size)
            pos += batch_size
        if pos < rows:
            pending, have = [_slice(window, pos, rows)], rows - pos
    if pending and not drop_last:
        yield _concat(pending)


class DatasetShard:
    """This rank's part of a dataset (see the module docstring).

    ``len(shard)``: rows this rank sees per epoch. ``shard.num_rows``: rows of the whole
    dataset. ``shard.indices(epoch)``: the global row indices this rank sees in that
    epoch, in order (nothing is read).
    """

    #: Column names; a shard of a plain sequence has one unnamed column.
    columns: Sequence[str] = ()
    block_rows = 1
    window_blocks = 0   # 0: the whole share is one window

    def __init__(self, *, rank: int, world_size: int, num_rows: int, shuffle: bool,
                 seed: int, remainder: Optional[str]):
        self.rank = rank
        self.world_size = world_size
        self.num_rows = num_rows
        self.shuffle = shuffle
        self.seed = seed
        self.remainder = remainder or plan.default_remainder(shuffle)
        self._epoch = 0
        self._current: Optional[int] = None  # the epoch of the pass being iterated

    # -- the plan ---------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch the next pass reads (the count of passes so far, or ``set_epoch``)."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """The next pass reads ``epoch`` (then ``epoch + 1``…). Call it on every rank
        alike, e.g. with the epoch a checkpoint resumes from."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"set_epoch: expected an integer >= 0, got {epoch!r}")
        self._epoch = epoch

    def _take_epoch(self, epoch: Optional[int]) -> int:
        if epoch is None:
            epoch = self._epoch
        self._epoch = epoch + 1
        return epoch

    def _pass(self, epoch: int, items: Iterator[Any]) -> Iterator[Any]:
        """``items``, with ``epoch`` known as the pass in progress while they are read."""
        self._current = epoch
        try:
            yield from items
        finally:
            if self._current == epoch:
                self._current = None

    def resume_epoch(self) -> int:
        """The epoch a resumed run's first pass reads (recorded with each checkpoint):
        the pass being iterated, else the next one."""
        return self._current if self._current is not None else self._epoch

    def __len__(self) -> int:
        lo, hi = plan.rank_range(self.num_rows, self.rank, self.world_size, self.remainder)
        return hi - lo

    def segments(self, epoch: Optional[int] = None) -> List[plan.Segment]:
        """The row ranges this rank reads in ``epoch`` (default: the next pass's)."""
        return plan.rank_segments(
            self.num_rows, self.block_rows, self.rank, self.world_size,
            epoch=self._epoch if epoch is None else epoch, seed=self.seed,
            shuffle=self.shuffle, remainder=self.remainder)

    def indices(self, epoch: Optional[int] = None) -> np.ndarray:
        """The global row indices this rank sees in ``epoch``, in order."""
        return plan.shard_indices(
            self.num_rows, self.rank, self.world_size,
            epoch=self._epoch if epoch is None else epoch, seed=self.seed,
            shuffle=self.shuffle, remainder=self.remainder, block_rows=self.block_rows,
            window_blocks=self.window_blocks)

    # -- reading ----------------------------------------------------------------------
    def _read(self, segments: List[plan.Segment]) -> Dict[str, Any]:
        """The rows of ``segments``, in order, as ``{column: rows}``."""
        raise NotImplementedError

    def _in_order_pieces(self, segments: List[plan.Segment]) -> List[List[plan.Segment]]:
        """What one read covers in file order: a block (HDF5: one chunk-sized slice)."""
        return [[seg] for seg in segments]

    def _read_into(self, segments: List[plan.Segment]) -> Dict[str, Any]:
        """Like :meth:`_read`, into a buffer the shard may reuse for the next window (the
        rows are gathered out of it batch by batch)."""
        return self._read(segments)

    def _units(self, epoch: int) -> List[Tuple[List[plan.Segment], Optional[int]]]:
        """An epoch's reads in order: ``(segments, window number)`` (shuffled: the
        window's rows are mixed with that window's permutation) or ``(segments, None)``
        (in file order: read piece by piece, batches are views)."""
        segs = self.segments(epoch)
        if not self.shuffle:
            return [(piece, None) for piece in self._in_order_pieces(segs)]
        groups = plan.windows(segs, self.window_blocks or len(segs) or 1)
        return [(group, w) for w, group in enumerate(groups)]

    def _read_unit(self, epoch: int, segments: List[plan.Segment],
                   window: Optional[int]) -> Window:
        if window is None:
            return self._read(segments), None
        rows = sum(b - a for a, b in segments)
        perm = plan.window_permutation(rows, epoch=epoch, seed=self.seed, rank=self.rank,
                                       window=window, shuffle=True)
        return self._read_into(segments), perm

    def _windows(self, epoch: int) -> Iterator[Window]:
        for segments, window in self._units(epoch):
            yield self._read_unit(epoch, segments, window)

    def _worker_windows(self, epoch: int, part: int, parts: int, batch_size: int,
                        drop_last: bool) -> Iterator[Window]:
        """What loader process ``part`` of ``parts`` reads (:func:`plan.deal`): its
        windows, cut to whole batches, then at most one batch of the processes' tails.
        Together the processes make exactly the batches of :meth:`iter_batches` (as
        many, of the same rows; the order within the epoch is theirs)."""
        units = self._units(epoch)
        own, tails = plan.deal([segs for segs, _ in units], parts, batch_size)
        for i, segments in own[part]:
            yield self._read_unit(epoch, segments, units[i][1])
        for j in range(part, len(tails), parts):
            rows = sum(b - a for a, b in tails[j])
            if drop_last and rows < batch_size:
                continue
            # a window number no window of the epoch has
            yield self._read_unit(epoch, tails[j], len(units) + j if self.shuffle else None)

    def _out(self, batch: Dict[str, Any]) -> Any:
        return batch

    def iter_batches(self, batch_size: int = 256, *, epoch: Optional[int] = None,
                     drop_last: bool = False, prefetch_batches: int = 1,
                     batch_format: Optional[str] = "default",
                     local_shuffle_buffer_size: Optional[int] = None,
                     local_shuffle_seed: Optional[int] = None) -> Iterator[Any]:
        """One epoch of this rank's rows in batches of ``batch_size`` (``{column: numpy
        array}`` for HDF5; a slice of the sequence otherwise). ``epoch``: default the
        next one (see :attr:`epoch`). ``prefetch_batches``: batches read ahead on a
        background thread (:mod:`.prefetch`; 0: none), the same batches in the same
        order. Stopping early (``break``) stops the thread; an iterator kept in a
        variable stops it at ``close()`` or when it is dropped."""
        _check_ray_options(batch_format, local_shuffle_buffer_size)
        check_prefetch(prefetch_batches)
        epoch = self._take_epoch(epoch)
        out = batches(self._windows(epoch), batch_size, drop_last)
        if type(self)._out is not DatasetShard._out:
            out = (self._out(b) for b in out)
        return self._pass(epoch, prefetch(out, prefetch_batches))

    def iter_rows(self, *, epoch: Optional[int] = None) -> Iterator[Any]:
        """One epoch of this rank's rows, one at a time; each row is its own copy (the
        shard reuses its window buffer: rows kept by the caller must not change)."""
        epoch = self._take_epoch(epoch)
        return self._pass(epoch, self._rows(epoch))

    def _rows(self, epoch: int) -> Iterator[Any]:
        for data, perm in self._windows(epoch):
            n = len(next(iter(data.values())))
            for i in range(n):
                j = i if perm is None else perm[i]
                yield self._out({k: _row(v, j) for k, v in data.items()})

    def __iter__(self) -> Iterator[Any]:
        return self.iter_rows()

    # -- framework adapters -----------------------------------------------------------
    def iter_torch_batches(self, batch_size: int = 256, *, epoch: Optional[int] = None,
                           drop_last: bool = False, device: Any = "auto",
                           dtypes: Any = None, collate_fn: Any = None,
                           prefetch_batches: int = 1,
                           local_shuffle_buffer_size: Optional[int] = None,
                           local_shuffle_seed: Optional[int] = None) -> Iterator[Any]:
        """Like :meth:`iter_batches`, with torch tensors (Ray's ``iter_torch_batches``).
        ``dtypes``: a ``torch.dtype`` for every column, or ``{column: dtype}`` (columns
        left out keep theirs). ``device``: ``"auto"`` (this rank's device,
        ``hpctrain.torch.get_device()``, in a training function; the CPU outside one),
        ``"cpu"``, ``"cuda:0"``… ``collate_fn``: makes the batch from the NumPy one
        instead (not with ``dtypes``/``device``; tensors it returns go to this rank's
        device). Conversion and the move to the device happen on the prefetch thread."""
        from .adapters import torch_converter

        _check_ray_options("default", local_shuffle_buffer_size)
        check_prefetch(prefetch_batches)
        convert = torch_converter(self.columns, dtypes, device, collate_fn)
        return _first_next(lambda: prefetch(
            map(convert, self.iter_batches(batch_size, epoch=epoch, drop_last=drop_last,
                                           prefetch_batches=0)), prefetch_batches))

    def iter_tf_batches(self, batch_size: int = 256, *, epoch: Optional[int] = None,
                        drop_last: bool = False, dtypes: Any = None,
                        prefetch_batches: int = 1,
                        local_shuffle_buffer_size: Optional[int] = None,
                        local_shuffle_seed: Optional[int] = None) -> Iterator[Any]:
        """Like :meth:`iter_batches`, with TensorFlow tensors (Ray's ``iter_tf_batches``):
        ``{column: tf.Tensor}`` (a plain sequence: one tensor). ``dtypes``: a
        ``tf.DType`` for every column or ``{column: dtype}``. For ``model.fit`` use
        :meth:`to_tf` (a ``tf.data.Dataset``)."""
        from .adapters import tf_converter

        _check_ray_options("default", local_shuffle_buffer_size)
        check_prefetch(prefetch_batches)
        convert = tf_converter(self.columns, dtypes)
        return _first_next(lambda: prefetch(
            map(convert, self.iter_batches(batch_size, epoch=epoch, drop_last=drop_last,
                                           prefetch_batches=0)), prefetch_batches))

    def to_torch(self, batch_size: int = 256, *, drop_last: bool = False):
        """A ``torch.utils.data.IterableDataset`` of this rank's batches (of CPU
        tensors); each iteration in this process is the next epoch. For loader processes
        use :meth:`to_torch_dataloader`: a plain ``DataLoader(ds, num_workers=N)`` cannot
        tell its processes the epoch (each would count on its own copy and replay the
        same one), so it needs ``ds.set_epoch(epoch)`` before every epoch, or it raises."""
        from .adapters import torch_dataset

        return torch_dataset(self, batch_size, drop_last)

    def to_torch_dataloader(self, batch_size: int = 256, *, drop_last: bool = False,
                            **loader_kwargs: Any):
        """A ``torch.utils.data.DataLoader`` over :meth:`to_torch`: each ``for batch in
        loader`` is the next epoch (``persistent_workers=True`` too; ``shard.set_epoch``
        before it works as for :meth:`iter_batches`). ``num_workers > 0`` deals the
        windows to the loader's processes: they read about ``1/num_workers`` each and
        make exactly the batches of :meth:`iter_batches` — as many (so every rank makes
        the same number of steps), of the same rows, in their own order (the same on
        every run). ``drop_last``: leave out the epoch's last, short batch (one per
        rank and epoch, never one per loader process)."""
        from .adapters import torch_dataloader

        return torch_dataloader(self, batch_size, drop_last, loader_kwargs)

    def to_tf(self, batch_size: int = 256, *, drop_last: bool = False):
        """A ``tf.data.Dataset`` of this rank's batches; each iteration over it is the
        next epoch. Prefetch it: ``shard.to_tf(64).prefetch(2)``."""
        from .adapters import tf_dataset

        return tf_dataset(self, batch_size, drop_last)

    def materialize(self) -> "DatasetShard":
        """This shard (Ray's ``materialize()``; a shard is read when asked for)."""
        return self

    def to_pandas(self, *, epoch: Optional[int] = None):
        """This rank's rows of one epoch as a ``pandas.DataFrame``: one column per 1-D
        dataset key (``key_0``, ``key_1``… for the columns of a 2-D one), the fields of a
        structured array or a DataFrame given in ``datasets=``, columns 0, 1… of a plain
        2-D array."""
        from .adapters import pandas_frame

        rows = max(1, len(self))
        return pandas_frame(list(self.iter_batches(rows, epoch=epoch, prefetch_batches=0)))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(rank={self.rank}, world_size={self.world_size}, "
                f"rows={len(self)} of {self.num_rows}, shuffle={self.shuffle}, "
                f"remainder={self.remainder!r})")
