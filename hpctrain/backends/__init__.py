"""Framework set-up inside each worker, one small module per backend.

A backend prepares the worker's framework before the training function runs (process
group, ``TF_CONFIG``, …), provides the :class:`Coordinator` that ``report()`` uses to
agree across ranks, and tears down afterwards. Backends are imported lazily, so that
``import hpctrain`` works without any framework installed.
"""
from __future__ import annotations

import importlib
from typing import Any

from ..errors import ConfigError
from .base import Backend

_REGISTRY = {
    "torch": ("hpctrain.backends.torch", "TorchBackend", "torch"),
}


def get_backend(name: str, config: Any = None) -> Backend:
    """``get_backend("torch", TorchConfig())`` → a TorchBackend instance."""
    try:
        module, cls, package = _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"job.backend: expected one of {sorted(_REGISTRY)}, got {name!r}") from None
    try:
        mod = importlib.import_module(module)
    except ImportError as e:  # the framework itself is missing
        raise ImportError(
            f"the {name!r} backend needs {package!r}, which is not importable here ({e}).\n"
            f"HINT: pip install 'hpctrain[{name}]'"
        ) from e
    return getattr(mod, cls)(config)
