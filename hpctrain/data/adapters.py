"""A shard as a torch ``IterableDataset``/``DataLoader`` or a ``tf.data.Dataset``.

Imported only when asked for: ``import hpctrain`` needs neither torch nor TensorFlow.
"""
from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable, Dict, Optional

import numpy as np

from ..common.install import pip_install
from ..backends.torch import get_device
from ..errors import ConfigError
from hpctrain.common.context import current_session


def _need(module: str, package: str):

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{module} is not installed.\nHINT: {pip_install(package)}") from e


def _column_dtypes(dtypes: Any, columns: Any, is_dtype: Callable[[Any], bool],
                   what: str) -> Callable[[Any], Any]:
    """``dtypes`` (one dtype, or ``{column: dtype}``) checked against the shard's columns;
    returns ``column → dtype or None`` (None: as read)."""
    columns = list(columns)
    unnamed = columns == [None]
    if dtypes is None or is_dtype(dtypes):
        return lambda column: dtypes
    if not isinstance(dtypes, dict):
        raise ConfigError(f"dtypes: expected a {what} or a dict of column → {what}, got "
                          f"{dtypes!r}", hint=f"e.g. dtypes={{\"x\": {_example(what)}}}")
    if unnamed:  # a plain sequence: one column, as in Ray one dtype in the dict
        if len(dtypes) != 1:
            raise ConfigError(f"dtypes: this shard's batches are single arrays; expected one "
                              f"{what}, got a dict of {len(dtypes)}",
                              hint=f"e.g. dtypes={_example(what)}")
        (only,) = dtypes.values()
        dtypes = {None: only}
    else:
        unknown = [c for c in dtypes if c not in columns]
        if unknown:
            raise ConfigError(f"dtypes: no column {unknown[0]!r} in this shard (its columns: "
                              + ", ".join(repr(c) for c in columns) + ")",
                              hint="name columns of the dataset's keys; columns left out "
                                   "keep the dtype they are read with")
    for column, dtype in dtypes.items():
        if not is_dtype(dtype):
            raise ConfigError(f"dtypes[{column!r}]: expected a {what}, got {dtype!r}",
                              hint=f"e.g. {_example(what)}")
    return dtypes.get


def _example(what: str) -> str:
    return "torch.float32" if what.startswith("torch") else "tf.float32"


def _map_batch(batch: Any, convert: Callable[[Any, Any], Any]) -> Any:
    if isinstance(batch, dict):
        return {k: convert(v, k) for k, v in batch.items()}
    return convert(batch, None)


def torch_device(device: Any) -> Any:
    """``device="auto"`` (or None): this rank's device (``hpctrain.torch.get_device()``)
    inside a training function, the CPU outside one (Ray's rule); else ``device``."""
    torch = _need("torch", "torch")
    if device is None or device == "auto":

        if current_session() is None:
            return torch.device("cpu")

        return get_device()
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ConfigError(f"device: expected \"auto\", \"cpu\", \"cuda:N\" or a "
                          f"torch.device, got {device!r} ({e})") from None


def torch_converter(columns: Any, dtypes: Any = None, device: Any = "auto",
                    collate_fn: Optional[Callable[[Any], Any]] = None) -> Callable[[Any], Any]:
    """What ``iter_torch_batches`` does to each NumPy batch: arrays → tensors of
    ``dtypes`` on ``device``, or ``collate_fn(batch)`` with the tensors it returns moved
    to this rank's device. Checked here, before anything is read."""
    torch = _need("torch", "torch")
    if collate_fn is not None:
        if dtypes is not None or not (device is None or device == "auto"):
            raise ConfigError("iter_torch_batches: collate_fn cannot be used with dtypes or "
                              "device (as in Ray)",
                              hint="convert and move the tensors inside collate_fn, or "
                                   "leave collate_fn out")
        if not callable(collate_fn):
            raise ConfigError(f"collate_fn: expected a function of the NumPy batch, got "
                              f"{type(collate_fn).__name__}")
        target = torch_device("auto")
        return lambda batch: _move(collate_fn(batch), target, torch)
    dtype_of = _column_dtypes(dtypes, columns, lambda d: isinstance(d, torch.dtype),
                              "torch.dtype")
    target = torch_device(device)

    def convert(v: Any, column: Any) -> Any:
        if not isinstance(v, np.ndarray):
            return v  # a list (of file names…) stays a list
        with warnings.catch_warnings():  # a read-only array (a user's): not written to
            warnings.simplefilter("ignore")
            return torch.as_tensor(v, dtype=dtype_of(column), device=target)

    return lambda batch: _map_batch(batch, convert)


def _move(out: Any, device: Any, torch: Any) -> Any:
    """Tensors (alone, or in a dict, list or tuple) of ``collate_fn``'s result, moved."""
    if isinstance(out, torch.Tensor):
        return out.to(device)
    if isinstance(out, dict) and all(isinstance(v, torch.Tensor) for v in out.values()):
        return {k: v.to(device) for k, v in out.items()}
    if isinstance(out, (list, tuple)) and all(isinstance(v, torch.Tensor) for v in out):
        return type(out)(v.to(device) for v in out)
    return out


def tf_converter(columns: Any, dtypes: Any = None) -> Callable[[Any], Any]:
    """What ``iter_tf_batches`` does to each NumPy batch: every column →
    ``tf.convert_to_tensor`` (of ``dtypes``)."""
    tf = _need("tensorflow", "tensorflow")
    dtype_of = _column_dtypes(dtypes, columns, lambda d: isinstance(d, tf.dtypes.DType),
                              "tf.dtypes.DType")

    def convert(v: Any, column: Any) -> Any:
        return tf.convert_to_tensor(v, dtype=dtype_of(column))

    return lambda batch: _map_batch(batch, convert)


def pandas_frame(batches: Any) -> Any:
    """One ``pandas.DataFrame`` of a shard's batches (see ``DatasetShard.to_pandas``)."""
    pd = _need("pandas", "pandas")

    def frame(batch: Any) -> Any:
        if isinstance(batch, dict):
            cols: Dict[str, Any] = {}
            for key, v in batch.items():
                v = np.asarray(v)
                if v.ndim <= 1:
                    cols[key] = v
                else:
                    flat = v.reshape(len(v), -1)
                    cols.update({f"{key}_{i}": flat[:, i] for i in range(flat.shape[1])})
            return pd.DataFrame(cols)
        return pd.DataFrame(batch)

    frames = [frame(b) for b in batches]
    if not frames:
        return pd.DataFrame()
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def torch_dataset(shard, batch_size: int, drop_last: bool):
    _need("torch", "torch")
    from ._torch import ShardIterableDataset

    return ShardIterableDataset(shard, batch_size, drop_last)


def torch_dataloader(shard, batch_size: int, drop_last: bool, loader_kwargs: Dict[str, Any]):
    _need("torch", "torch")
    from ._torch import ShardDataLoader, ShardIterableDataset

    for bad in ("batch_size", "shuffle", "sampler", "batch_sampler"):
        if bad in loader_kwargs:
            raise TypeError(f"to_torch_dataloader: {bad}= is the shard's to set "
                            "(batch_size as the first argument; shuffling in the dataset "
                            "config)")
    return ShardDataLoader(ShardIterableDataset(shard, batch_size, drop_last),
                           batch_size=None, **loader_kwargs)


def tf_dataset(shard, batch_size: int, drop_last: bool):
    tf = _need("tensorflow", "tensorflow")
    specs = shard.column_specs()

    def spec(dtype, shape):
        return tf.TensorSpec(shape=(None if not drop_last else batch_size,) + tuple(shape),
                             dtype=tf.as_dtype(dtype))

    if list(specs) == [None]:  # a plain array: batches are arrays
        (dtype, shape), = specs.values()
        signature = spec(dtype, shape)
    else:
        signature = {k: spec(d, s) for k, (d, s) in specs.items()}
    return tf.data.Dataset.from_generator(
        lambda: shard.iter_batches(batch_size, drop_last=drop_last, prefetch_batches=0),
        output_signature=signature)
