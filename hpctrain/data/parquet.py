"""Parquet files on the parallel filesystem, read by pyarrow: each rank reads only the
row groups that hold its rows.

The rows of the files (one file, a directory of ``*.parquet`` files in name order, or a
list) are numbered one after the other, and the plan (:mod:`.plan`) deals them to the
ranks as for HDF5. A block is a row group (or a part of a large one), so a shuffled epoch
mixes whole row groups across the file and rows within a window; a window is read with
one ``read_row_group`` per row group it touches. Columns come back as NumPy arrays:
numbers and strings as they are, fixed-size lists (and lists of equal length) as a second
dimension, so an image stored as a list of 784 floats is a ``(rows, 784)`` array.
"""
from __future__ import annotations

import glob
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..common.install import pip_install
from ..errors import ConfigError, MissingFrameworkError
from . import plan
from .shard import DatasetShard
from .source import (DEFAULT_WINDOW_MB, changed_options, check_options, resolve_path,
                     split_table)

_OPTIONS = ("path", "columns", "shuffle", "seed", "remainder", "window_mb")
SUFFIXES = (".parquet", ".pq")


def pyarrow_parquet():
    try:
        import pyarrow.parquet as pq
    except ImportError as e:

        raise MissingFrameworkError(
            f"hpctrain.data: Parquet files need pyarrow, which is not importable here ({e})."
            f"\nHINT: {pip_install('pyarrow')}") from None
    return pq


def is_parquet_path(path: str) -> bool:
    """A Parquet file by its name, or a directory (of Parquet files: an HDF5 dataset is
    always one file).

    >>> is_parquet_path("/data/train.parquet"), is_parquet_path("/data/train.h5")
    (True, False)
    """
    return path.endswith(SUFFIXES) or os.path.isdir(path)


def _files_in(directory: str) -> List[str]:
    return sorted(p for s in SUFFIXES for p in glob.glob(os.path.join(directory, "*" + s)))


class ParquetDataset:
    """Columns of Parquet files, to be sharded over the ranks:
    ``ParquetDataset("/lustre/data/train/", ["x", "label"])`` (a directory: its
    ``*.parquet`` files in name order), one file, or a list of files; the text form
    ``"/lustre/data/train.parquet:x,label"`` in ``datasets=`` and ``[datasets]``.
    ``columns`` default: every column. Options as for
    :class:`~hpctrain.data.HDF5Dataset` (``shuffle`` default True, ``seed``,
    ``remainder``, ``window_mb``).

    >>> ParquetDataset.parse("/data/train.parquet:x,label").columns
    ['x', 'label']
    """

    def __init__(self, path: Any, columns: Optional[Sequence[str]] = None, *,
                 shuffle: bool = True, seed: Optional[int] = None,
                 remainder: Optional[str] = None, window_mb: int = DEFAULT_WINDOW_MB):
        where = "ParquetDataset"
        paths = list(path) if isinstance(path, (list, tuple)) else [path]
        if not paths or not all(isinstance(p, (str, os.PathLike)) and os.fspath(p)
                                for p in paths):
            raise ConfigError(f"{where}: path: expected a file, a directory or a list of "
                              f"files, got {path!r}")
        if isinstance(columns, str):
            columns = columns.split(",")
        columns = list(columns or [])
        if not all(isinstance(c, str) and c.strip() for c in columns):
            raise ConfigError(f"{where}: columns: expected column names, got {columns!r}")
        check_options(where, shuffle, seed, remainder, window_mb)
        self.paths = [os.path.abspath(os.fspath(p)) for p in paths]
        self.columns = [c.strip() for c in columns]
        self.shuffle = shuffle
        self.seed = seed
        self.remainder = remainder
        self.window_mb = window_mb

    @classmethod
    def parse(cls, text: str, base_dir: Optional[str] = None) -> "ParquetDataset":
        """``"path:col1,col2"`` (columns optional), the path a file or a directory."""
        path, cols = text, ""
        head, sep, tail = text.rpartition(":")
        if sep and head and not tail.endswith(SUFFIXES) and "/" not in tail:
            path, cols = head, tail
        return cls(resolve_path(path, base_dir),
                   [c for c in cols.split(",") if c.strip()] if cols else None)

    @classmethod
    def from_table(cls, table: Dict[str, Any], base_dir: Optional[str] = None
                   ) -> "ParquetDataset":
        path, options = split_table(table, _OPTIONS,
                                    "a Parquet file, a directory or a list of files")
        path = ([resolve_path(p, base_dir) for p in path] if isinstance(path, list)
                else resolve_path(path, base_dir))
        return cls(path, **options)

    def to_toml(self) -> Any:
        """The text form when it says everything, else a table."""
        changed = changed_options(self)
        if len(self.paths) == 1 and not changed:
            return self.paths[0] + (":" + ",".join(self.columns) if self.columns else "")
        return {"path": self.paths[0] if len(self.paths) == 1 else list(self.paths),
                **({"columns": list(self.columns)} if self.columns else {}), **changed}

    def files(self) -> List[str]:
        """The Parquet files, in the order their rows are numbered."""
        out: List[str] = []
        for p in self.paths:
            out.extend(_files_in(p) if os.path.isdir(p) else [p])
        return out

    def check(self, name: str) -> None:
        """Open every file's footer and check the columns before anything starts; a
        ConfigError naming ``datasets.<name>`` otherwise."""
        key = f"datasets.{name}"
        for p in self.paths:
            if not os.path.exists(p):
                raise ConfigError(f"{key}: not found: {p}",
                                  hint="the path must be readable where the run starts (a "
                                       "shared filesystem for batch jobs)")
            if os.path.isdir(p) and not _files_in(p):
                raise ConfigError(f"{key}: no *.parquet file in the directory {p}")
        try:
            _Layout(self.files(), self.columns)
        except ValueError as e:
            raise ConfigError(f"{key}: {e}") from None

    def shard(self, rank: int, world_size: int, run_name: str = "") -> "ParquetShard":
        seed = self.seed if self.seed is not None else plan.seed_from_name(run_name)
        return ParquetShard(self, rank=rank, world_size=world_size, seed=seed)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ParquetDataset) and self.to_toml() == other.to_toml()

    def __repr__(self) -> str:
        return f"ParquetDataset({self.to_toml()!r})"


class _Layout:
    """The files' row groups numbered one after the other (footers only)."""

    def __init__(self, files: List[str], columns: List[str]):
        pq = pyarrow_parquet()
        self.groups: List[Tuple[int, int]] = []    # (file index, row group)
        starts, sizes, nbytes = [], [], 0
        names: Optional[List[str]] = None
        total = 0
        for i, path in enumerate(files):
            try:
                meta = pq.ParquetFile(path).metadata
            except Exception as e:  # pyarrow's ArrowInvalid, OSError
                raise ValueError(f"{path} is not a readable Parquet file ({e})") from None
            schema = meta.schema.to_arrow_schema().names
            wanted = columns or schema
            missing = [c for c in wanted if c not in schema]
            if missing:
                raise ValueError(f"{path} has no column {missing[0]!r}; its columns: "
                                 + ", ".join(schema))
            if names is None:
                names = list(wanted)
            for g in range(meta.num_row_groups):
                rg = meta.row_group(g)
                if rg.num_rows == 0:
                    continue
                self.groups.append((i, g))
                starts.append(total)
                sizes.append(rg.num_rows)
                total += rg.num_rows
                nbytes += sum(rg.column(c).total_uncompressed_size
                              for c in range(rg.num_columns)
                              if rg.column(c).path_in_schema.split(".")[0] in names)
        if total == 0:
            raise ValueError("the Parquet files hold no rows")
        self.files = files
        self.columns = names or []
        self.starts = np.asarray(starts, dtype=np.int64)
        self.sizes = sizes
        self.num_rows = total
        self.row_bytes = max(1, nbytes // total)


def to_numpy(column: Any) -> np.ndarray:
    """A pyarrow column as a NumPy array: lists of equal length become a dimension.

    >>> import pyarrow as pa
    >>> to_numpy(pa.chunked_array([[[1.0, 2.0], [3.0, 4.0]]])).shape
    (2, 2)
    >>> to_numpy(pa.chunked_array([["a", "b"]])).tolist()
    ['a', 'b']
    """
    import pyarrow as pa

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    t = arr.type
    if pa.types.is_fixed_size_list(t) and arr.null_count == 0:
        inner = to_numpy(arr.flatten())
        return inner.reshape((len(arr), t.list_size) + inner.shape[1:])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        lengths = np.diff(arr.offsets.to_numpy(zero_copy_only=False))
        if arr.null_count == 0 and len(arr) and (lengths == lengths[0]).all():
            inner = to_numpy(arr.flatten())
            return inner.reshape((len(arr), int(lengths[0])) + inner.shape[1:])
        return np.asarray(arr.to_pylist(), dtype=object)
    return arr.to_numpy(zero_copy_only=False)


class ParquetShard(DatasetShard):
    """This rank's rows of a :class:`ParquetDataset`; batches are ``{column: ndarray}``."""

    def __init__(self, source: ParquetDataset, *, rank: int, world_size: int, seed: int):
        layout = _Layout(source.files(), source.columns)
        super().__init__(rank=rank, world_size=world_size, num_rows=layout.num_rows,
                         shuffle=source.shuffle, seed=seed, remainder=source.remainder)
        self.columns = layout.columns
        self._layout = layout
        window_bytes = source.window_mb << 20
        rows = min(layout.sizes)
        if rows * layout.row_bytes > window_bytes:  # a row group larger than the window
            rows = max(1, window_bytes // 8 // layout.row_bytes)
        self.block_rows = rows
        self.window_blocks = max(1, window_bytes // max(1, rows * layout.row_bytes))
        self._handles: Dict[int, Any] = {}
        self._pid: Optional[int] = None
        self._cache: Tuple[Optional[int], Dict[str, np.ndarray]] = (None, {})
        self._specs: Optional[Dict[str, Tuple[np.dtype, Tuple[int, ...]]]] = None

    def _group(self, g: int) -> Dict[str, np.ndarray]:
        """Row group ``g`` (numbered across the files) as NumPy columns; the last one
        read is kept (consecutive segments mostly fall in the same group)."""
        if self._cache[0] == g:
            return self._cache[1]
        if self._pid != os.getpid():  # a DataLoader worker opens its own handles
            self._handles, self._pid = {}, os.getpid()
        f, rg = self._layout.groups[g]
        handle = self._handles.get(f)
        if handle is None:
            handle = self._handles[f] = pyarrow_parquet().ParquetFile(self._layout.files[f])
        table = handle.read_row_group(rg, columns=self.columns)
        cols = {c: to_numpy(table.column(c)) for c in self.columns}
        self._cache = (g, cols)
        return cols

    def _read(self, segments: List[plan.Segment]) -> Dict[str, Any]:
        rows = plan.segment_rows(segments)
        starts = self._layout.starts
        group = np.searchsorted(starts, rows, side="right") - 1
        out: Dict[str, Any] = {}
        # the output positions sorted by row group (one sort, not one scan of the window per
        # group): each group the window touches is read once, in file order
        order = np.argsort(group, kind="stable")
        groups, bounds = np.unique(group[order], return_index=True)
        for g, where in zip(groups.tolist(), np.split(order, bounds[1:])):
            cols = self._group(g)
            local = rows[where] - starts[g]
            for c, values in cols.items():
                if c not in out:
                    out[c] = np.empty((len(rows),) + values.shape[1:], dtype=values.dtype)
                out[c][where] = values[local]
        return out

    def column_specs(self) -> Dict[str, Tuple[np.dtype, Tuple[int, ...]]]:
        """``{column: (dtype, shape of one row)}`` (read from the first row group)."""
        if self._specs is None:
            cols = self._group(0)
            self._specs = {c: (v.dtype, v.shape[1:]) for c, v in cols.items()}
        return dict(self._specs)

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_handles"], state["_pid"], state["_cache"] = {}, None, (None, {})
        return state


__all__ = ["ParquetDataset", "ParquetShard", "is_parquet_path", "to_numpy"]
