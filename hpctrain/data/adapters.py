"""A shard as a torch ``IterableDataset``/``DataLoader`` or a ``tf.data.Dataset``.

Imported only when asked for: ``import hpctrain`` needs neither torch nor TensorFlow.
"""
from __future__ import annotations

from typing import Any, Dict

import numpy as np


def _need(module: str, extra: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{module} is not installed: pip install '{extra}'") from e


def to_tensors(batch: Any, device: Any = None) -> Any:
    """numpy arrays → torch tensors (on ``device``; default this rank's device)."""
    torch = _need("torch", "hpctrain[torch]")
    if device is None:
        from ..torch import get_device

        device = get_device()

    def conv(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return torch.from_numpy(v).to(device)
        return v

    if isinstance(batch, dict):
        return {k: conv(v) for k, v in batch.items()}
    return conv(batch)


def torch_dataset(shard, batch_size: int, drop_last: bool):
    _need("torch", "hpctrain[torch]")
    from ._torch import ShardIterableDataset

    return ShardIterableDataset(shard, batch_size, drop_last)


def torch_dataloader(shard, batch_size: int, drop_last: bool, loader_kwargs: Dict[str, Any]):
    _need("torch", "hpctrain[torch]")
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
        lambda: shard.iter_batches(batch_size, drop_last=drop_last),
        output_signature=signature)
