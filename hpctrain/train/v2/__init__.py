"""``ray.train.v2``: Ray Train's module paths under ``ray.train.v2.api`` (Ray's docs import
``DataParallelTrainer`` from ``ray.train.v2.api.data_parallel_trainer``), each module
naming hpctrain's own objects (the same objects as ``hpctrain.train``'s)."""
import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    if name == "api":  # train.v2.api after ``import hpctrain.train``, as in Ray
        return importlib.import_module(f"{__name__}.api")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
