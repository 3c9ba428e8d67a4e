"""Ray Data's readers (``ray.data.from_items``, ``read_csv``…): each makes a
:class:`~hpctrain.data.Dataset` in memory."""
from __future__ import annotations

import glob
import os
from typing import Any, List, Optional, Union

import numpy as np

from ..errors import ConfigError
from . import arrow
from .dataset import Dataset
from .parquet import pyarrow_parquet


def from_items(items: List[Any]) -> Dataset:
    """Rows from a list: dicts (their keys are the columns) or plain values (one column,
    ``"item"``, as in Ray).

    >>> from_items([1, 2]).take_all()
    [{'item': 1}, {'item': 2}]
    """
    if not isinstance(items, (list, tuple)):
        raise ConfigError(f"from_items: expected a list, got {type(items).__name__}")
    items = list(items)
    if items and all(isinstance(i, dict) for i in items):
        return Dataset(arrow.rows_table(items, "from_items"))
    if any(isinstance(i, dict) for i in items):
        raise ConfigError("from_items: some items are dicts and some are not",
                          hint="give every row as a dict of column → value, or none")
    return Dataset(arrow.table({"item": items}))


def range(n: int) -> Dataset:  # noqa: A001 (Ray's name)
    """Rows ``{"id": 0}`` … ``{"id": n - 1}``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ConfigError(f"range: expected an integer >= 0, got {n!r}")
    return Dataset(arrow.table({"id": np.arange(n, dtype=np.int64)}))


def from_numpy(ndarrays: Union[np.ndarray, List[np.ndarray]]) -> Dataset:
    """Rows of one array (or several, one after the other) in the column ``"data"``; an
    array of more than one dimension is a tensor column (a row is ``array[i]``)."""
    arrays = list(ndarrays) if isinstance(ndarrays, (list, tuple)) else [ndarrays]
    if not arrays or not all(isinstance(a, np.ndarray) and a.ndim >= 1 for a in arrays):
        raise ConfigError("from_numpy: expected a NumPy array or a list of them, got "
                          f"{type(ndarrays).__name__}")
    return Dataset(arrow.table({"data": np.concatenate(arrays)}))


def from_pandas(dfs: Any) -> Dataset:
    """Rows of a pandas DataFrame (or several, one after the other); the index is left
    out."""
    frames = list(dfs) if isinstance(dfs, (list, tuple)) else [dfs]
    if not frames or not all(type(f).__name__ == "DataFrame" for f in frames):
        raise ConfigError("from_pandas: expected a pandas DataFrame or a list of them, got "
                          f"{type(dfs).__name__}")
    return Dataset(_concat([arrow.from_pandas(f) for f in frames]))


def from_arrow(tables: Any) -> Dataset:
    """Rows of a ``pyarrow.Table`` (or several, one after the other)."""
    pa = arrow.pa()
    tables = list(tables) if isinstance(tables, (list, tuple)) else [tables]
    if not tables or not all(isinstance(t, pa.Table) for t in tables):
        raise ConfigError("from_arrow: expected a pyarrow Table or a list of them")
    return Dataset(_concat(tables))


def _concat(tables: List[Any]) -> Any:
    return tables[0] if len(tables) == 1 else arrow.pa().concat_tables(tables)


def _files(paths: Union[str, List[str]], suffixes: tuple, reader: str) -> List[str]:
    """The files of ``paths`` (files, or directories: their files ending in ``suffixes``,
    in name order); a ConfigError naming the path that is missing or empty."""
    out: List[str] = []
    for p in [paths] if isinstance(paths, (str, os.PathLike)) else list(paths):
        p = os.fspath(p)
        if p.startswith("local://"):
            p = p[len("local://"):]
        if os.path.isdir(p):
            found = sorted(f for s in suffixes for f in glob.glob(os.path.join(p, "*" + s)))
            if not found:
                raise ConfigError(f"{reader}: no {'/'.join(suffixes)} file in the "
                                  f"directory {p}")
            out.extend(found)
        elif os.path.isfile(p):
            out.append(p)
        else:
            raise ConfigError(f"{reader}: not found: {p}",
                              hint="a local path (file or directory) readable here; "
                                   "object-store URIs are not read by hpctrain.data")
    if not out:
        raise ConfigError(f"{reader}: expected a path or a list of paths, got {paths!r}")
    return out


def read_csv(paths: Union[str, List[str]], **arrow_csv_args: Any) -> Dataset:
    """Rows of CSV files (a file, a directory of ``*.csv``, or a list), read by
    ``pyarrow.csv`` (``arrow_csv_args``: its ``read_options``, ``parse_options``,
    ``convert_options``)."""
    pyarrow_parquet()
    from pyarrow import csv

    tables = []
    for path in _files(paths, (".csv", ".csv.gz"), "read_csv"):
        try:
            tables.append(csv.read_csv(path, **arrow_csv_args))
        except (ValueError, OSError) as e:  # pyarrow's ArrowInvalid is a ValueError
            raise ConfigError(f"read_csv: {path}: {e}") from None
    return Dataset(_concat(tables))


def read_parquet(paths: Union[str, List[str]], *, columns: Optional[List[str]] = None,
                 **arrow_parquet_args: Any) -> Dataset:
    """Rows of Parquet files (a file, a directory of ``*.parquet``, or a list), only
    ``columns`` if given. For files larger than memory, give
    :class:`~hpctrain.data.ParquetDataset` to ``datasets=`` instead: each rank reads
    only its own row groups."""
    pq = pyarrow_parquet()
    tables = []
    for path in _files(paths, (".parquet", ".pq"), "read_parquet"):
        try:
            tables.append(pq.read_table(path, columns=columns, **arrow_parquet_args))
        except (ValueError, OSError, KeyError) as e:
            raise ConfigError(f"read_parquet: {path}: {e}") from None
    return Dataset(_concat(tables))
