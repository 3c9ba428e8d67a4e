"""``ray.train.huggingface``: see :mod:`hpctrain.train.huggingface.transformers`, imported on
first access (``hpctrain.train.huggingface.transformers`` after ``import hpctrain.train``, as
Ray's attribute chain resolves), so that importing this package imports no framework."""
import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    if name == "transformers":
        return importlib.import_module(f"{__name__}.transformers")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
