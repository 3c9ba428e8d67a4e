"""HDF5 files on the parallel filesystem, read by h5py: each rank reads only its rows.

A shard opens the file lazily (once per process, so it survives a ``fork`` into a
DataLoader worker), with HDF5 file locking off (many Lustre/GPFS mounts refuse
``flock``; the file is only read) and a chunk cache large enough for a chunk shared by
two blocks. Blocks are the dataset's chunks (whole-chunk reads; :func:`block_rows`:
uncompressed chunks larger than the window are read in parts); a window is read with
one low-level read per block and column into one buffer, reused for the next window.
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..common.install import pip_install
from ..errors import ConfigError
from . import plan
from .shard import DatasetShard
from .source import (DEFAULT_WINDOW_MB, changed_options, check_options, resolve_path,
                     split_table)

#: Rows of one block of an unchunked (contiguous) dataset: about this many bytes.
CONTIGUOUS_BLOCK_BYTES = 1 << 20
_OPTIONS = ("path", "keys", "shuffle", "seed", "remainder", "window_mb")


def _h5py():
    try:
        import h5py
    except ImportError as e:
        raise ImportError(f"reading HDF5 datasets needs h5py.\nHINT: {pip_install('h5py')}") from e
    return h5py


def open_file(path: str, cache_bytes: int = 1 << 20):
    """``h5py.File(path, "r")`` without HDF5's file locking (where h5py can say so)."""
    h5py = _h5py()
    try:
        return h5py.File(path, "r", locking=False, rdcc_nbytes=cache_bytes)
    except TypeError:  # h5py < 3.5: no locking argument
        os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")
        return h5py.File(path, "r", rdcc_nbytes=cache_bytes)


class HDF5Dataset:
    """Columns (HDF5 datasets with the same number of rows) of one file, to be sharded
    over the ranks: ``HDF5Dataset("/lustre/data/train.h5", ["images", "labels"])``, or
    the text form ``"/lustre/data/train.h5:images,labels"`` (``datasets=`` and
    ``[datasets]`` in a job file take either).

    ``shuffle`` (default True): a new order each epoch, the same on every rank.
    ``seed``: default derived from the run name (every rank, every restart alike).
    ``remainder``: ``"drop"`` (default with shuffle) or ``"uneven"`` (default without):
    see :mod:`hpctrain.data.plan`. ``window_mb``: how much of its share a rank reads and
    mixes at once.
    """

    def __init__(self, path: str, keys: Optional[Sequence[str]] = None, *,
                 shuffle: bool = True, seed: Optional[int] = None,
                 remainder: Optional[str] = None, window_mb: int = DEFAULT_WINDOW_MB):
        where = "HDF5Dataset"
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise ConfigError(f"{where}: path: expected a file path, got {path!r}")
        if isinstance(keys, str):
            keys = [k for k in keys.split(",")]
        keys = list(keys or [])
        if not all(isinstance(k, str) and k.strip() for k in keys):
            raise ConfigError(f"{where}: keys: expected names of HDF5 datasets, got {keys!r}")
        check_options(where, shuffle, seed, remainder, window_mb)
        self.path = os.path.abspath(os.fspath(path))
        self.keys = [k.strip() for k in keys]
        self.shuffle = shuffle
        self.seed = seed
        self.remainder = remainder
        self.window_mb = window_mb

    @classmethod
    def parse(cls, text: str, base_dir: Optional[str] = None) -> "HDF5Dataset":
        """``"path.h5:key1,key2"`` (keys optional: every dataset at the file's root).

        >>> d = HDF5Dataset.parse("/data/train.h5:images,labels")
        >>> d.path, d.keys
        ('/data/train.h5', ['images', 'labels'])
        """
        path, keys = text, ""
        head, sep, tail = text.rpartition(":")
        if sep and head and not tail.endswith((".h5", ".hdf5", ".hdf", ".he5")):
            path, keys = head, tail
        return cls(resolve_path(path, base_dir),
                   [k for k in keys.split(",") if k.strip()] if keys else None)

    @classmethod
    def from_table(cls, table: Dict[str, Any], base_dir: Optional[str] = None) -> "HDF5Dataset":
        path, options = split_table(table, _OPTIONS, "the HDF5 file's path")
        return cls(resolve_path(path, base_dir), **options)

    def to_toml(self) -> Any:
        """The text form when every option is the default, else a table."""
        text = self.path + (":" + ",".join(self.keys) if self.keys else "")
        changed = changed_options(self)
        if not changed:
            return text
        return {"path": self.path, **({"keys": list(self.keys)} if self.keys else {}), **changed}

    # -- the file -------------------------------------------------------------------
    def columns(self, f) -> List[str]:
        h5py = _h5py()
        return list(self.keys) or sorted(k for k, v in f.items() if isinstance(v, h5py.Dataset))

    def check(self, name: str) -> None:
        """Open the file and check the columns (exist, same number of rows) before
        anything starts; a ConfigError naming ``datasets.<name>`` otherwise."""
        key = f"datasets.{name}"
        if not os.path.isfile(self.path):
            raise ConfigError(f"{key}: file not found: {self.path}",
                              hint="the path must be readable where the run starts (a "
                                   "shared filesystem for batch jobs)")
        h5py = _h5py()
        try:
            f = open_file(self.path)
        except OSError as e:
            raise ConfigError(f"{key}: {self.path} is not a readable HDF5 file ({e})") from None
        with f:
            found = sorted(k for k, v in f.items() if isinstance(v, h5py.Dataset))
            cols = self.columns(f)
            if not cols:
                raise ConfigError(f"{key}: {self.path} has no dataset at its root",
                                  hint="name the columns: \"file.h5:group/images,labels\"")
            rows = {}
            for col in cols:
                obj = f.get(col)
                if not isinstance(obj, h5py.Dataset):
                    raise ConfigError(f"{key}: {self.path} has no dataset {col!r}",
                                      hint="its datasets: " + (", ".join(found) or "none at "
                                                               "the root"))
                if obj.ndim == 0:
                    raise ConfigError(f"{key}: {col!r} in {self.path} is a scalar; expected "
                                      "rows (at least one dimension)")
                rows[col] = obj.shape[0]
            if len(set(rows.values())) > 1:
                raise ConfigError(f"{key}: the columns of {self.path} differ in length: "
                                  + ", ".join(f"{c} has {n} rows" for c, n in rows.items()))

    def shard(self, rank: int, world_size: int, run_name: str = "") -> "HDF5Shard":
        seed = self.seed if self.seed is not None else plan.seed_from_name(run_name)
        return HDF5Shard(self, rank=rank, world_size=world_size, seed=seed)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, HDF5Dataset) and self.to_toml() == other.to_toml()

    def __repr__(self) -> str:
        return f"HDF5Dataset({self.to_toml()!r})"


def block_rows(chunks: Dict[str, Tuple[int, ...]], row_bytes: int, filtered: bool,
               window_bytes: int) -> int:
    """Rows of one block: the longest chunk (in rows) of the columns, so that a block is
    read in whole chunks; about 1 MiB for unchunked data. Where that is more than the
    window and nothing is compressed (a part of a plain chunk is read directly), an
    eighth of the window, so that a window still mixes rows of 8 places of the file.
    Compressed chunks are decompressed whole: a block is never less than a chunk.

    >>> block_rows({"x": (64, 256)}, 1024, False, 64 << 20)        # 64 KiB chunks
    64
    >>> block_rows({"x": (100_000, 3, 224, 224)}, 150_528, False, 64 << 20)  # 14 GiB
    55
    >>> block_rows({"x": (100_000, 3, 224, 224)}, 150_528, True, 64 << 20)   # compressed
    100000
    >>> block_rows({}, 1000, False, 64 << 20)                      # contiguous: ~1 MiB
    1048
    """
    row_bytes = max(1, row_bytes)
    rows = max(c[0] for c in chunks.values()) if chunks else \
        max(1, CONTIGUOUS_BLOCK_BYTES // row_bytes)
    if rows * row_bytes > window_bytes and not filtered:
        rows = min(rows, max(1, window_bytes // 8 // row_bytes))
    return rows


def _too_big(source: "HDF5Dataset", chunks: Dict[str, Tuple[int, ...]], row_bytes: int,
             rows: int, filtered: bool) -> str:
    mib = rows * row_bytes / (1 << 20)
    longest = max(chunks, key=lambda c: chunks[c][0]) if chunks else None
    if longest is not None and filtered:
        why = (f"column {longest!r} has chunks of shape {chunks[longest]} and the file "
               f"is compressed: HDF5 decompresses a chunk whole, so a rank reads and "
               f"holds {chunks[longest][0]} rows of every column ({row_bytes} bytes a "
               "row) at a time, plus two chunks in HDF5's chunk cache")
    else:
        why = f"one row of the columns is {row_bytes} bytes"
    return (f"hpctrain.data: {source.path}: {why}; a window is {mib:.0f} MiB, not "
            f"window_mb={source.window_mb}. Rechunk the file with fewer rows per chunk, "
            f"e.g. h5repack -l {longest or 'DATASET'}:CHUNK=<rows>x... in.h5 out.h5 "
            "(h5py's chunks=True picks chunks for writing, not for reading rows)")


class HDF5Shard(DatasetShard):
    """This rank's rows of an :class:`HDF5Dataset`; batches are ``{column: ndarray}``."""

    def __init__(self, source: HDF5Dataset, *, rank: int, world_size: int, seed: int):
        with open_file(source.path) as f:
            self.columns = source.columns(f)
            dsets = [f[c] for c in self.columns]
            num_rows = dsets[0].shape[0]
            self._specs: Dict[str, Tuple[np.dtype, Tuple[int, ...]]] = {
                c: (d.dtype, d.shape[1:]) for c, d in zip(self.columns, dsets)}
            row_bytes = sum(d.dtype.itemsize * int(np.prod(d.shape[1:])) for d in dsets)
            chunks = {c: tuple(d.chunks) for c, d in zip(self.columns, dsets) if d.chunks}
            chunk_bytes = max([d.dtype.itemsize * int(np.prod(d.chunks)) for d in dsets
                               if d.chunks] or [0])
            filtered = any(d.id.get_create_plist().get_nfilters() for d in dsets)
        super().__init__(rank=rank, world_size=world_size, num_rows=num_rows,
                         shuffle=source.shuffle, seed=seed, remainder=source.remainder)
        self.path = source.path
        window_bytes = source.window_mb << 20
        self.block_rows = block_rows(chunks, row_bytes, filtered, window_bytes)
        self.window_blocks = max(1, window_bytes // max(1, self.block_rows * row_bytes))
        if rank == 0 and self.block_rows * row_bytes > 2 * window_bytes:
            warnings.warn(_too_big(source, chunks, row_bytes, self.block_rows, filtered),
                          stacklevel=3)
        # No chunk cache for plain chunks: HDF5 then reads them straight into our
        # buffers (a cached chunk is copied twice) and each epoch reads each of its
        # chunks once anyway. Compressed chunks must be decompressed whole: a cache of
        # two of them serves a chunk that two blocks share.
        self._cache_bytes = 2 * chunk_bytes if filtered else 0
        self._file = None
        self._dsets: Dict[str, Any] = {}
        self._pid = None
        self._buffers: Dict[str, Any] = {}

    def column_specs(self) -> Dict[str, Tuple[np.dtype, Tuple[int, ...]]]:
        """``{column: (dtype, shape of one row)}``."""
        return dict(self._specs)

    def _open(self) -> Dict[str, Any]:
        """``{column: h5py.Dataset}`` of this process's handle (opened on first use)."""
        if self._file is None or self._pid != os.getpid():
            self._file = open_file(self.path, self._cache_bytes)
            self._dsets = {c: self._file[c] for c in self.columns}
            self._pid = os.getpid()
        return self._dsets

    def _read(self, segments: List[plan.Segment], buffers: Optional[Dict[str, Any]] = None
              ) -> Dict[str, Any]:
        dsets = self._open()
        if buffers is None and len(segments) == 1:  # h5py's fast path for one slice
            a, b = segments[0]
            return {col: d[a:b] for col, d in dsets.items()}
        from h5py import h5s

        rows = sum(b - a for a, b in segments)
        out = {}
        for col, dset in dsets.items():
            dtype, shape = self._specs[col]
            if buffers is not None:
                buf = buffers.get(col)
                if buf is None or len(buf) < rows:
                    buf = buffers[col] = np.empty((rows,) + tuple(shape), dtype=dtype)
                buf = buf[:rows]
            else:
                buf = np.empty((rows,) + tuple(shape), dtype=dtype)
            # HDF5's low-level read of each slice into its place: a plain memory space,
            # so HDF5 reads straight into the buffer (h5py's read_direct takes a slower
            # path through a selection of the whole buffer)
            fspace = dset.id.get_space()
            pos = 0
            for a, b in segments:
                fspace.select_hyperslab((a,) + (0,) * len(shape), (b - a,) + tuple(shape))
                dset.id.read(h5s.create_simple((b - a,) + tuple(shape)), fspace,
                             buf[pos:pos + b - a])
                pos += b - a
            out[col] = buf
        return out

    def _read_into(self, segments: List[plan.Segment]) -> Dict[str, Any]:
        # one window buffer per column, reused: no fresh memory to fault in per window
        return self._read(segments, self._buffers)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file, self._dsets = None, {}

    def __getstate__(self) -> Dict[str, Any]:  # a DataLoader worker opens its own handle
        state = dict(self.__dict__)
        state["_file"] = None
        state["_dsets"] = {}
        state["_buffers"] = {}
        return state
