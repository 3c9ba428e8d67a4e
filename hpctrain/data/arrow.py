"""Columns between NumPy, pandas and pyarrow for :class:`~hpctrain.data.Dataset`.

A :class:`~hpctrain.data.Dataset` holds a ``pyarrow.Table``. A column of arrays (an
image per row) is stored as nested fixed-size lists and comes back as one NumPy array of
``(rows, *shape)`` (:func:`~hpctrain.data.parquet.to_numpy`), where Ray Data uses its
``ArrowTensorType`` extension.
"""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from ..errors import ConfigError
from .parquet import pyarrow_parquet, to_numpy

#: ``batch_format`` values of ``map_batches``/``iter_batches`` (Ray's names).
BATCH_FORMATS = ("default", "numpy", "pandas", "pyarrow")


def pa():
    """pyarrow, or a MissingFrameworkError with the install HINT."""
    pyarrow_parquet()
    import pyarrow

    return pyarrow


def column(values: Any) -> Any:
    """One column as a pyarrow array: a NumPy array (more than one dimension: nested
    fixed-size lists), a list of equal-shape arrays (stacked), or a list of scalars.

    >>> column(np.zeros((2, 3, 4))).type
    FixedSizeListType(fixed_size_list<item: fixed_size_list<item: double>[4]>[3])
    >>> column(["a", "b"]).to_pylist()
    ['a', 'b']
    """
    arrow = pa()
    if isinstance(values, (arrow.Array, arrow.ChunkedArray)):
        return values
    if not isinstance(values, np.ndarray) or values.dtype == object:
        items = list(values)
        if items and all(isinstance(v, np.ndarray) for v in items) and \
                len({v.shape for v in items}) == 1:
            values = np.stack(items)
        else:
            return arrow.array([v.tolist() if isinstance(v, np.ndarray) else v
                                for v in items])
    if values.ndim <= 1:
        return arrow.array(values)
    flat = arrow.array(np.ascontiguousarray(values).reshape(-1))
    for size in reversed(values.shape[1:]):
        flat = arrow.FixedSizeListArray.from_arrays(flat, size)
    return flat


def table(columns: Dict[str, Any]) -> Any:
    """A pyarrow Table from ``{name: values}`` (see :func:`column`); a ConfigError when
    the columns differ in length."""
    arrow = pa()
    names = list(columns)
    arrays = [column(columns[n]) for n in names]
    lengths = {n: len(a) for n, a in zip(names, arrays)}
    if len(set(lengths.values())) > 1:
        raise ConfigError("the columns of a batch differ in length: " + ", ".join(
            f"{n!r}: {k}" for n, k in lengths.items()),
            hint="return one value per row in every column")
    return arrow.Table.from_arrays(arrays, names=[str(n) for n in names])


def from_pandas(frame: Any) -> Any:
    """A DataFrame's columns (a column of arrays becomes a tensor column), no index."""
    return table({c: frame[c].to_numpy() for c in frame.columns})


def to_columns(tbl: Any) -> Dict[str, np.ndarray]:
    """``{column: NumPy array}`` of a Table."""
    return {c: to_numpy(tbl.column(c)) for c in tbl.column_names}


def to_batch(tbl: Any, batch_format: str) -> Any:
    """A Table as a batch in Ray's ``batch_format``: ``{column: ndarray}`` ("default",
    "numpy"), a pandas DataFrame ("pandas"; a tensor column holds one array per row) or
    the Table itself ("pyarrow")."""
    if batch_format in ("default", "numpy"):
        return to_columns(tbl)
    if batch_format == "pandas":
        import pandas as pd

        cols = to_columns(tbl)
        return pd.DataFrame({c: list(v) if v.ndim > 1 else v for c, v in cols.items()})
    return tbl


def from_batch(out: Any, where: str) -> Any:
    """What a ``map_batches`` function returned, as a Table: a dict of columns, a pandas
    DataFrame or a pyarrow Table; a ConfigError naming ``where`` otherwise."""
    arrow = pa()
    if isinstance(out, arrow.Table):
        return out
    if isinstance(out, dict):
        return table(out)
    if type(out).__name__ == "DataFrame" and hasattr(out, "columns"):
        return from_pandas(out)
    raise ConfigError(f"{where}: the function returned a {type(out).__name__}; expected a "
                      "dict of column → array, a pandas DataFrame or a pyarrow Table",
                      hint='e.g. return {"x": batch["x"] * 2}')


def check_batch_format(batch_format: Any, where: str) -> None:
    if batch_format not in BATCH_FORMATS:
        raise ConfigError(f"{where}: batch_format: expected one of "
                          + ", ".join(f'"{f}"' for f in BATCH_FORMATS)
                          + f", got {batch_format!r}")


def rows_table(rows: List[Dict[str, Any]], where: str) -> Any:
    """A Table from a list of row dicts (the same keys in every row)."""
    if not rows:
        return table({})
    names = list(rows[0])
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ConfigError(f"{where}: row {i} is a {type(row).__name__}; expected a dict "
                              "of column → value", hint='e.g. return {"x": row["x"] * 2}')
        if list(row) != names:
            raise ConfigError(f"{where}: row {i} has the columns {list(row)}, row 0 has "
                              f"{names}", hint="return the same columns for every row")
    return table({n: [r[n] for r in rows] for n in names})


def python_value(value: Any) -> Any:
    """A NumPy scalar as the Python value (a row's cells, as Ray's ``take`` gives them)."""
    return value.item() if isinstance(value, np.generic) else value
