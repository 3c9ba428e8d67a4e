"""Ray Data's ``Dataset``, the common subset, on a pyarrow Table in memory.

A :class:`Dataset` is made by the readers of :mod:`.read_api` (``from_items``,
``read_csv``…), transformed on the driver (``map_batches``, ``map``, ``filter``,
``random_shuffle``, ``train_test_split``), and given to a trainer's ``datasets=``: each
rank then gets its part with ``hpctrain.get_dataset_shard(name)``, a
:class:`~hpctrain.data.DatasetShard` planned like every other dataset (:mod:`.plan`).

Unlike Ray Data nothing is lazy or distributed: each transformation runs when it is
called, in this process, and returns a new Dataset (``materialize()`` is a no-op). That
fits the data a training function's driver prepares; data larger than memory belongs in
Parquet or HDF5 files read by the ranks (:class:`~hpctrain.data.ParquetDataset`).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from ..errors import ConfigError
from . import arrow, plan
from .shard import DatasetShard

#: ``map_batches``' ``batch_size="default"`` (Ray's default batch size of a map).
DEFAULT_MAP_BATCH_SIZE = 1024


class Dataset:
    """Rows in columns (a ``pyarrow.Table``), with Ray Data's API; see the module docstring.

    >>> from hpctrain.data import from_items
    >>> ds = from_items([{"x": i} for i in range(6)]).map_batches(lambda b: {"x": b["x"] * 10})
    >>> ds.count(), ds.take(2)
    (6, [{'x': 0}, {'x': 10}])
    >>> train, test = ds.train_test_split(test_size=0.5)
    >>> [r["x"] for r in test.take_all()]
    [30, 40, 50]
    """

    def __init__(self, table: Any, *, reshuffle: bool = False):
        self._table = table
        #: random_shuffle() without a seed: a new order each epoch (Ray runs the shuffle
        #: again at each pass over the dataset)
        self._reshuffle = reshuffle

    def _new(self, table: Any) -> "Dataset":
        return Dataset(table, reshuffle=self._reshuffle)

    # -- what it holds ---------------------------------------------------------------
    def count(self) -> int:
        """The number of rows."""
        return self._table.num_rows

    def schema(self) -> Any:
        """The columns' names and types: a ``pyarrow.Schema`` (``.names``, ``.types``)."""
        return self._table.schema

    def columns(self) -> List[str]:
        """The column names."""
        return list(self._table.column_names)

    def to_arrow(self) -> Any:
        """The ``pyarrow.Table`` (hpctrain's name; Ray: ``to_arrow_refs``)."""
        return self._table

    def to_pandas(self, limit: Optional[int] = None) -> Any:
        """The rows as a pandas DataFrame (a tensor column holds one array per row)."""
        tbl = self._table if limit is None else self._table.slice(0, limit)
        return arrow.to_batch(tbl, "pandas")

    def _rows(self, tbl: Any) -> Iterator[Dict[str, Any]]:
        cols = arrow.to_columns(tbl)
        for i in range(tbl.num_rows):
            yield {c: arrow.python_value(v[i]) for c, v in cols.items()}

    def take(self, limit: int = 20) -> List[Dict[str, Any]]:
        """The first ``limit`` rows, each a dict of column → value."""
        _check_count(limit, "take: limit", minimum=0)
        return list(self._rows(self._table.slice(0, limit)))

    def take_all(self) -> List[Dict[str, Any]]:
        """Every row, each a dict of column → value."""
        return list(self._rows(self._table))

    def take_batch(self, batch_size: int = 20, *, batch_format: str = "default") -> Any:
        """The first ``batch_size`` rows as one batch of ``batch_format``."""
        arrow.check_batch_format(batch_format, "take_batch")
        return arrow.to_batch(self._table.slice(0, batch_size), batch_format)

    def iter_rows(self) -> Iterator[Dict[str, Any]]:
        """The rows in order, each a dict of column → value."""
        return self._rows(self._table)

    def __len__(self) -> int:
        return self.count()

    def __repr__(self) -> str:
        cols = ", ".join(f"{f.name}: {f.type}" for f in self._table.schema)
        return f"Dataset(num_rows={self.count()}, schema={{{cols}}})"

    # -- transformations (each returns a new Dataset) ----------------------------------
    def map_batches(self, fn: Any, *, batch_size: Union[int, None, str] = "default",
                    batch_format: Optional[str] = "default",
                    fn_args: Optional[tuple] = None, fn_kwargs: Optional[dict] = None,
                    fn_constructor_args: Optional[tuple] = None,
                    fn_constructor_kwargs: Optional[dict] = None,
                    zero_copy_batch: bool = False, concurrency: Any = None,
                    **ray_remote_args: Any) -> "Dataset":
        """``fn`` over batches of ``batch_size`` rows (``"default"``: 1024; None: all
        rows at once), given as ``batch_format`` (``"default"``/``"numpy"``: a dict of
        column → ndarray; ``"pandas"``; ``"pyarrow"``) and returning a dict of columns,
        a DataFrame or a Table. ``fn`` may be a class (Ray's callable class): it is made
        once, with ``fn_constructor_args``/``fn_constructor_kwargs``. ``concurrency`` and
        Ray's resource arguments are accepted and ignored (one process does the work)."""
        where = "map_batches"
        arrow.check_batch_format(batch_format, where)
        if batch_size == "default":
            batch_size = DEFAULT_MAP_BATCH_SIZE
        elif batch_size is not None:
            _check_count(batch_size, f"{where}: batch_size", minimum=1)
        call = _callable(fn, where, fn_constructor_args, fn_constructor_kwargs)
        args, kwargs = tuple(fn_args or ()), dict(fn_kwargs or {})
        n = self.count()
        step = batch_size or max(n, 1)
        outputs = [arrow.from_batch(call(arrow.to_batch(self._table.slice(a, step),
                                                        batch_format), *args, **kwargs),
                                    where)
                   for a in range(0, n, step)]
        if not outputs:  # no rows: the function is never called, the columns stay
            return self._new(self._table)
        return self._new(_concat(outputs, where))

    def map(self, fn: Any, *, fn_args: Optional[tuple] = None,
            fn_kwargs: Optional[dict] = None, fn_constructor_args: Optional[tuple] = None,
            fn_constructor_kwargs: Optional[dict] = None, concurrency: Any = None,
            **ray_remote_args: Any) -> "Dataset":
        """``fn`` over each row (a dict of column → value), returning the new row."""
        call = _callable(fn, "map", fn_constructor_args, fn_constructor_kwargs)
        args, kwargs = tuple(fn_args or ()), dict(fn_kwargs or {})
        rows = [call(row, *args, **kwargs) for row in self._rows(self._table)]
        if not rows:
            return self._new(self._table)
        return self._new(arrow.rows_table(rows, "map"))

    def filter(self, fn: Any = None, *, fn_args: Optional[tuple] = None,
               fn_kwargs: Optional[dict] = None,
               fn_constructor_args: Optional[tuple] = None,
               fn_constructor_kwargs: Optional[dict] = None, concurrency: Any = None,
               **ray_remote_args: Any) -> "Dataset":
        """The rows for which ``fn(row)`` is true."""
        if fn is None:
            raise ConfigError("filter: expected a function of a row returning True to keep "
                              "it", hint='e.g. ds.filter(lambda row: row["label"] != 0)')
        call = _callable(fn, "filter", fn_constructor_args, fn_constructor_kwargs)
        args, kwargs = tuple(fn_args or ()), dict(fn_kwargs or {})
        keep = [bool(call(row, *args, **kwargs)) for row in self._rows(self._table)]
        return self._new(self._table.filter(arrow.pa().array(keep, type=arrow.pa().bool_()))
                         if keep else self._table)

    def random_shuffle(self, *, seed: Optional[int] = None, **ray_remote_args: Any
                       ) -> "Dataset":
        """The rows in a random order (the same for the same ``seed``). Without a seed,
        as in Ray, each pass over the dataset in the training function (each epoch of
        its shard) has a new order."""
        if seed is not None:
            _check_count(seed, "random_shuffle: seed", minimum=0)
        perm = np.random.default_rng(seed).permutation(self.count())
        return Dataset(self._table.take(perm), reshuffle=seed is None)

    def train_test_split(self, test_size: Union[int, float], *, shuffle: bool = False,
                         seed: Optional[int] = None) -> Tuple["Dataset", "Dataset"]:
        """``(train, test)``: the last ``test_size`` rows (an int) or the last fraction
        (a float in (0, 1): ``int(count * (1 - test_size))`` rows stay in train) are
        the test set; ``shuffle``: shuffle first (``seed``)."""
        ds = self.random_shuffle(seed=seed) if shuffle else self
        n = ds.count()
        if isinstance(test_size, float):
            if not 0 < test_size < 1:
                raise ValueError(f"train_test_split: test_size: a float must be in (0, 1), "
                                 f"got {test_size}")
            cut = int(n * (1 - test_size))
        elif isinstance(test_size, int) and not isinstance(test_size, bool):
            if not 0 < test_size < n:
                raise ValueError(f"train_test_split: test_size: an int must be in "
                                 f"[1, {n - 1}] for {n} rows, got {test_size}")
            cut = n - test_size
        else:
            raise ValueError(f"train_test_split: test_size: expected an int or a float, "
                             f"got {test_size!r}")
        return ds._new(ds._table.slice(0, cut)), ds._new(ds._table.slice(cut))

    def limit(self, limit: int) -> "Dataset":
        """The first ``limit`` rows."""
        _check_count(limit, "limit", minimum=0)
        return self._new(self._table.slice(0, limit))

    def select_columns(self, cols: Union[str, List[str]]) -> "Dataset":
        """Only the columns ``cols``, in that order."""
        cols = [cols] if isinstance(cols, str) else list(cols)
        self._check_columns(cols, "select_columns")
        return self._new(self._table.select(cols))

    def drop_columns(self, cols: Union[str, List[str]]) -> "Dataset":
        """Every column but ``cols``."""
        cols = [cols] if isinstance(cols, str) else list(cols)
        self._check_columns(cols, "drop_columns")
        return self._new(self._table.drop(cols))

    def _check_columns(self, cols: List[str], where: str) -> None:
        missing = [c for c in cols if c not in self._table.column_names]
        if missing:
            raise ConfigError(f"{where}: no column {missing[0]!r}; the columns: "
                              + ", ".join(self._table.column_names))

    def materialize(self) -> "Dataset":
        """This dataset (it is always in memory)."""
        return self

    def repartition(self, num_blocks: Optional[int] = None, *, shuffle: bool = False,
                    **ray_options: Any) -> "Dataset":
        """This dataset (one table: blocks do not matter here); ``shuffle=True``:
        :meth:`random_shuffle`."""
        return self.random_shuffle() if shuffle else self

    # -- reading it here -------------------------------------------------------------
    def iter_batches(self, *, batch_size: int = 256, batch_format: str = "default",
                     drop_last: bool = False, prefetch_batches: int = 1,
                     local_shuffle_buffer_size: Optional[int] = None,
                     local_shuffle_seed: Optional[int] = None) -> Iterator[Any]:
        """The rows in batches, in order (one pass of the whole dataset)."""
        return self.shard(0, 1).iter_batches(
            batch_size, batch_format=batch_format, drop_last=drop_last,
            prefetch_batches=prefetch_batches,
            local_shuffle_buffer_size=local_shuffle_buffer_size)

    def iter_torch_batches(self, *, batch_size: int = 256, dtypes: Any = None,
                           device: Any = "auto", collate_fn: Any = None,
                           drop_last: bool = False, prefetch_batches: int = 1,
                           local_shuffle_buffer_size: Optional[int] = None,
                           local_shuffle_seed: Optional[int] = None) -> Iterator[Any]:
        """The rows in batches of torch tensors (``{column: tensor}``)."""
        return self.shard(0, 1).iter_torch_batches(
            batch_size, dtypes=dtypes, device=device, collate_fn=collate_fn,
            drop_last=drop_last, prefetch_batches=prefetch_batches,
            local_shuffle_buffer_size=local_shuffle_buffer_size)

    # -- as a trainer's dataset ------------------------------------------------------
    def check(self, name: str) -> None:
        """Nothing to open: the rows are here."""

    def to_toml(self) -> None:
        return None  # travels in the pickled payload only

    def shard(self, rank: int, world_size: int, run_name: str = "") -> "TableShard":
        """Rank ``rank``'s part of ``world_size``: contiguous, equal parts (as Ray's
        ``streaming_split(equal=True)``: the last ``count % world_size`` rows sit out)."""
        return TableShard(self._table, rank=rank, world_size=world_size,
                          seed=plan.seed_from_name(run_name), shuffle=self._reshuffle)


class TableShard(DatasetShard):
    """This rank's rows of a :class:`Dataset`: batches are ``{column: ndarray}``, or a
    DataFrame or Table with ``batch_format="pandas"``/``"pyarrow"``."""

    def __init__(self, table: Any, *, rank: int, world_size: int, seed: int, shuffle: bool):
        super().__init__(rank=rank, world_size=world_size, num_rows=table.num_rows,
                         shuffle=shuffle, seed=seed, remainder="drop")
        self.columns = list(table.column_names)
        self._table = table
        self._cols: Optional[Dict[str, np.ndarray]] = None

    def _read(self, segments: List[plan.Segment]) -> Dict[str, Any]:
        if self._cols is None:  # NumPy once, then rows are slices
            self._cols = arrow.to_columns(self._table)
        if len(segments) == 1:
            a, b = segments[0]
            return {c: v[a:b] for c, v in self._cols.items()}
        rows = plan.segment_rows(segments)
        return {c: v[rows] for c, v in self._cols.items()}

    def column_specs(self) -> Dict[str, Tuple[np.dtype, Tuple[int, ...]]]:
        cols = arrow.to_columns(self._table.slice(0, 1))
        return {c: (v.dtype, v.shape[1:]) for c, v in cols.items()}

    def iter_batches(self, batch_size: int = 256, *, epoch: Optional[int] = None,
                     drop_last: bool = False, prefetch_batches: int = 1,
                     batch_format: Optional[str] = "default",
                     local_shuffle_buffer_size: Optional[int] = None,
                     local_shuffle_seed: Optional[int] = None) -> Iterator[Any]:
        """As :meth:`DatasetShard.iter_batches`, with Ray's ``batch_format`` "pandas"
        and "pyarrow" too."""
        arrow.check_batch_format(batch_format, "iter_batches")
        out = super().iter_batches(batch_size, epoch=epoch, drop_last=drop_last,
                                   prefetch_batches=prefetch_batches,
                                   local_shuffle_buffer_size=local_shuffle_buffer_size)
        if batch_format in ("default", "numpy"):
            return out
        return (arrow.to_batch(arrow.table(b), batch_format) for b in out)

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_cols"] = None
        return state


def _callable(fn: Any, where: str, args: Optional[tuple], kwargs: Optional[dict]
              ) -> Callable[..., Any]:
    """``fn``, or an instance of it when it is a class (made once)."""
    if inspect.isclass(fn):
        return fn(*(args or ()), **(kwargs or {}))
    if not callable(fn):
        raise ConfigError(f"{where}: expected a function or a callable class, got "
                          f"{type(fn).__name__}")
    if args or kwargs:
        raise ConfigError(f"{where}: fn_constructor_args/fn_constructor_kwargs are for a "
                          "callable class; got a function",
                          hint="pass the function's own arguments as fn_args/fn_kwargs")
    return fn


def _concat(tables: List[Any], where: str) -> Any:
    names = tables[0].column_names
    for t in tables[1:]:
        if t.column_names != names:
            raise ConfigError(f"{where}: the batches returned different columns: {names} "
                              f"and {t.column_names}",
                              hint="return the same columns for every batch")
    return arrow.pa().concat_tables(tables, promote_options="permissive")


def _check_count(value: Any, what: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{what}: expected an integer >= {minimum}, got {value!r}")
