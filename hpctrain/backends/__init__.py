"""Framework set-up inside each worker, one small module per backend.

A backend prepares the worker's framework before the training function runs (process
group, ``TF_CONFIG``, …), provides the :class:`Coordinator` that ``report()`` uses to
agree across ranks, and tears down afterwards. Backends are imported lazily, so that
``import hpctrain`` works without any framework installed.

=============== ====================================== ========================= ==========
backend         set-up                                 report()'s agreement      launcher
=============== ====================================== ========================= ==========
``torch``       ``init_process_group`` (NCCL/Gloo)     a Gloo group              any
``tensorflow``  ``TF_CONFIG`` (free ports, probed)     hpctrain's TCP group      any
``horovod``     MPI controller, or Gloo + rendezvous   hpctrain's TCP group      any
``mpi``         mpi4py ``COMM_WORLD``                  a duplicate of COMM_WORLD an MPI one
``xgboost``     a RabitTracker on rank 0 + collective  hpctrain's TCP group      any
``lightgbm``    ``machines``/ports for LightGBM        hpctrain's TCP group      any
=============== ====================================== ========================= ==========
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Dict, Mapping

from ..errors import ConfigError, MissingFrameworkError
from .base import Backend

# name: (module, class, modules the framework needs, how to install them)
_REGISTRY = {
    "torch": ("hpctrain.backends.torch", "TorchBackend", ("torch",),
              "pip install 'hpctrain[torch]'"),
    "tensorflow": ("hpctrain.backends.tensorflow", "TensorflowBackend",
                   ("tensorflow", "tf_keras"), "pip install 'hpctrain[tensorflow]' "
                   "(tensorflow-cpu or tensorflow, and tf-keras)"),
    "horovod": ("hpctrain.backends.horovod", "HorovodBackend", ("torch", "horovod"),
                "bash scripts/install-horovod.sh (builds Horovod 0.28.1 against torch 2.x; "
                "`pip install horovod` does not build with torch 2.x)"),
    "mpi": ("hpctrain.backends.mpi", "MPIBackend", ("mpi4py",),
            "pip install 'hpctrain[mpi]' (mpi4py, built against the job's MPI: load the MPI "
            "module first)"),
    "xgboost": ("hpctrain.backends.xgboost", "XGBoostBackend", ("xgboost",),
                "pip install 'hpctrain[xgboost]'"),
    "lightgbm": ("hpctrain.backends.lightgbm", "LightGBMBackend", ("lightgbm",),
                 "pip install 'hpctrain[lightgbm]'"),
}


def check_installed(name: str) -> None:
    """Raise :class:`MissingFrameworkError` (an ImportError), saying what to install, when
    backend ``name``'s framework is not importable here. Nothing is imported."""
    _, _, modules, install = _REGISTRY[name]
    missing = [m for m in modules if not _findable(m)]
    if missing:
        raise MissingFrameworkError(
            f"the {name!r} backend needs {', '.join(repr(m) for m in missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not importable here.\nHINT: {install}")


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def get_backend(name: str, config: Any = None) -> Backend:
    """``get_backend("torch", TorchConfig())`` → a TorchBackend instance."""
    try:
        module, cls, _, _ = _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"job.backend: expected one of {sorted(_REGISTRY)}, got {name!r}") from None
    check_installed(name)
    return getattr(importlib.import_module(module), cls)(config)


def needs_mpi_launcher(name: str, options: Mapping[str, Any]) -> bool:
    """True when backend ``name`` with these options must have its ranks started by an
    MPI launcher (mpirun/mpiexec, or srun with an --mpi plugin).

    >>> needs_mpi_launcher("mpi", {}), needs_mpi_launcher("horovod", {"controller": "mpi"})
    (True, True)
    >>> needs_mpi_launcher("horovod", {}), needs_mpi_launcher("torch", {})
    (False, False)
    """
    return name == "mpi" or (name == "horovod" and options.get("controller") == "mpi")


def backend_options(config: Any) -> Dict[str, Any]:
    """A backend config dataclass as its TOML table (``None`` values left out)."""
    if config is None or not hasattr(config, "__dataclass_fields__"):
        return {}
    from dataclasses import asdict

    return {k: v for k, v in asdict(config).items() if v is not None}
