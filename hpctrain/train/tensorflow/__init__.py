"""``ray.train.tensorflow``: the names of :mod:`hpctrain.tensorflow`, for programs written
for Ray."""
import importlib

from ...tensorflow import *  # noqa: F401,F403
from ...tensorflow import __all__  # noqa: F401


def __getattr__(name: str):
    """``keras`` on first access (``train.tensorflow.keras`` as in Ray's attribute chain)."""
    if name == "keras":
        return importlib.import_module(f"{__name__}.keras")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
