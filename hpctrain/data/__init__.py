"""Datasets on the parallel filesystem, sharded over the ranks (Ray Data's dataset shards,
the HPC way: every rank reads its own rows of a shared HDF5 or Parquet file, nothing is
shipped).

```python
trainer = TorchTrainer(train_func, datasets={
    "train": "/lustre/data/train.h5:images,labels",                 # shuffled, equal shards
    "val": HDF5Dataset("/lustre/data/val.h5", ["images", "labels"], shuffle=False),
})

def train_func(config):
    train = hpctrain.get_dataset_shard("train")
    for epoch in range(config["epochs"]):
        for batch in train.iter_torch_batches(batch_size=64):   # {"images": …, "labels": …}
            ...
```
Parquet: ``"/lustre/data/train/:x,label"`` (a directory of ``*.parquet`` files, a file, or
:class:`ParquetDataset` with a list). Job files: ``[datasets]`` with
``train = "/lustre/data/train.h5:images,labels"`` or
``val = { path = "val.h5", keys = ["images", "labels"], shuffle = false }``.
``dataset_config=hpctrain.DataConfig(datasets_to_split=["train"])`` (``[data]
datasets_to_split``) splits only "train"; the other datasets are read whole by every rank.
Batches are read ahead on a background thread (``prefetch_batches``, :mod:`.prefetch`).

Ray Data's common subset (:mod:`.dataset`, :mod:`.read_api`): ``hpctrain.data.from_items``,
``read_csv``, ``read_parquet``… make a :class:`Dataset` (a pyarrow Table in memory) with
``map_batches``, ``filter``, ``random_shuffle``, ``train_test_split``…; given to
``datasets=`` it is sharded like the others.

The plan (who reads which rows, shuffling, rows that do not divide by the world size)
is in :mod:`hpctrain.data.plan`; the shard's API in :class:`DatasetShard`.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from ..common.install import pip_install
from ..errors import ConfigError, MissingFrameworkError

try:
    import numpy as np
except ImportError as _e:  # a login node or a TF-only venv without NumPy
    raise MissingFrameworkError(
        f"hpctrain.data needs NumPy, which is not importable here ({_e}).\n"
        f"HINT: {pip_install('numpy h5py')}") from None
from .hdf5 import HDF5Dataset, HDF5Shard
from .parquet import ParquetDataset, ParquetShard, is_parquet_path
from .plan import REMAINDERS, shard_indices
from .sequence import SequenceDataset, SequenceShard, shard_list
from .source import resolve_path
from .shard import DatasetShard
from .dataset import Dataset, TableShard
from .read_api import (from_arrow, from_items, from_numpy, from_pandas, range, read_csv,
                       read_parquet)

#: Ray's name of what ``get_dataset_shard`` returns (documented as DatasetShard)
DataIterator = DatasetShard

__all__ = ["Dataset", "TableShard", "from_items", "from_numpy",
           "from_pandas", "from_arrow", "range", "read_csv", "read_parquet", "HDF5Dataset", "ParquetDataset", "SequenceDataset", "DatasetShard", "HDF5Shard",
           "ParquetShard", "SequenceShard", "shard_list", "shard_indices", "as_dataset",
           "REMAINDERS"]


def _parquet_path(path: Any, base_dir: Optional[str]) -> bool:
    if isinstance(path, (list, tuple)):
        return bool(path) and all(_parquet_path(p, base_dir) for p in path)
    return isinstance(path, str) and is_parquet_path(resolve_path(path, base_dir))


def as_dataset(value: Any, key: str = "datasets", base_dir: Optional[str] = None) -> Any:
    """What a ``datasets=`` value (or a ``[datasets]`` entry) means: an
    :class:`HDF5Dataset` for ``"file.h5:keys"`` or a table, a :class:`ParquetDataset` for
    ``"file.parquet:columns"`` or a directory of Parquet files (or a table whose path is
    one), a :class:`SequenceDataset` for a list, tuple or NumPy array; a ConfigError
    naming ``key`` otherwise."""
    if isinstance(value, (HDF5Dataset, ParquetDataset, SequenceDataset, Dataset)):
        return value
    try:
        if isinstance(value, str):
            if not value.strip():
                raise ConfigError("expected \"file.h5:dataset1,dataset2\", got an empty string")
            head = value.rpartition(":")[0]
            if _parquet_path(value, base_dir) or head and _parquet_path(head, base_dir):
                return ParquetDataset.parse(value, base_dir=base_dir)
            return HDF5Dataset.parse(value, base_dir=base_dir)
        if isinstance(value, dict):
            if _parquet_path(value.get("path"), base_dir):
                return ParquetDataset.from_table(value, base_dir=base_dir)
            return HDF5Dataset.from_table(value, base_dir=base_dir)
        if isinstance(value, (list, tuple, np.ndarray)):
            return SequenceDataset(value)
        if type(value).__name__ == "DataFrame" and hasattr(value, "to_records"):
            # pandas: its rows as a structured array (shard.to_pandas() gives the columns back)
            return SequenceDataset(value.to_records(index=False))
    except ConfigError as e:
        msg = e.message.split(": ", 1)[1] if e.message.startswith(("HDF5Dataset:",
                                                                    "ParquetDataset:",
                                                                    "SequenceDataset:")) \
            else e.message
        raise ConfigError(f"{key}: {msg}", hint=e.hint or
                          'e.g. train = "/lustre/data/train.h5:images,labels"') from None
    raise ConfigError(f"{key}: expected \"file.h5:dataset1,dataset2\", "
                      f"\"file.parquet:col1,col2\" (or a directory of them), "
                      f"a table (path, keys or columns, shuffle, seed, remainder, window_mb), "
                      f"a list, an array or a pandas DataFrame; got {type(value).__name__}",
                      hint="for other data, pass a list of file names and read them in the "
                           "training function")


def as_datasets(datasets: Optional[Dict[str, Any]], prefix: str = "datasets",
                base_dir: Optional[str] = None) -> Dict[str, Any]:
    """Every entry of ``datasets=`` through :func:`as_dataset`."""
    if datasets is None:
        return {}
    if not isinstance(datasets, dict):
        raise ConfigError(f"{prefix}: expected a dict of name → dataset, got "
                          f"{type(datasets).__name__}")
    out = {}
    for name, value in datasets.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{prefix}: dataset names must be non-empty strings, got {name!r}")
        out[name] = as_dataset(value, f"{prefix}.{name}", base_dir)
    return out
