"""Framework set-up inside each worker, one small module per backend.

A backend prepares the worker's framework before the training function runs (process
group, ``TF_CONFIG``, …), provides the :class:`Coordinator` that ``report()`` uses to
agree across ranks, and tears down afterwards. Backends are imported lazily, so that
``import hpctrain`` works without any framework installed.

This package holds the **backend registry**'s lines: one :func:`register_backend` per
backend names its class, its config dataclass (the job file's ``[name]`` section), its
trainer and the modules it needs; ``job.backend``'s choices, ``hpctrain run`` and the 1.x
API read them (:mod:`hpctrain.common.registry`).

=============== ====================================== ========================= ==========
backend         set-up                                 report()'s agreement      launcher
=============== ====================================== ========================= ==========
``torch``       ``init_process_group`` (NCCL/Gloo)     a Gloo group              any
``tensorflow``  ``TF_CONFIG`` (free ports, probed)     hpctrain's TCP group      any
``horovod``     MPI controller, or Gloo + rendezvous   hpctrain's TCP group      any
``mpi``         mpi4py ``COMM_WORLD``                  a duplicate of COMM_WORLD an MPI one
``xgboost``     a RabitTracker on rank 0 + collective  hpctrain's TCP group      any
``lightgbm``    ``machines``/ports for LightGBM        hpctrain's TCP group      any
``function``    nothing (a Tune function trainable)    hpctrain's TCP group      any
=============== ====================================== ========================= ==========
"""
from __future__ import annotations

import importlib.util
from dataclasses import asdict
from typing import Any, Dict, Mapping

from ..errors import ConfigError, MissingFrameworkError
from ..common.install import pip_install
from ..common.registry import (BACKENDS, backend_entry, backend_names, load,
                                       register_backend)
from .base import Backend

# The backend registry (hpctrain.common.registry): one line per backend.
register_backend("torch", backend="hpctrain.backends.torch:TorchBackend",
                 config="hpctrain.backends.torch:TorchConfig",
                 trainer="hpctrain.torch:TorchTrainer", config_keyword="torch_config",
                 requires=("torch",), install=pip_install("torch"),
                 legacy_api=True)
register_backend("tensorflow", backend="hpctrain.backends.tensorflow:TensorflowBackend",
                 config="hpctrain.backends.tensorflow:TensorflowConfig",
                 trainer="hpctrain.tensorflow:TensorflowTrainer",
                 config_keyword="tensorflow_config", requires=("tensorflow", "tf_keras"),
                 install=pip_install("tensorflow tf-keras") + " (tensorflow-cpu on a "
                 "machine without GPUs)", legacy_api=True)
register_backend("horovod", backend="hpctrain.backends.horovod:HorovodBackend",
                 config="hpctrain.backends.horovod:HorovodConfig",
                 trainer="hpctrain.horovod:HorovodTrainer", config_keyword="horovod_config",
                 requires=("torch", "horovod"),
                 install="bash scripts/install-horovod.sh (builds Horovod 0.28.1 against "
                 "torch 2.x; `pip install horovod` does not build with torch 2.x)",
                 legacy_api=True)
register_backend("mpi", backend="hpctrain.backends.mpi:MPIBackend",
                 config="hpctrain.backends.mpi:MPIConfig",
                 trainer="hpctrain.mpi:MPITrainer", config_keyword="mpi_config",
                 requires=("mpi4py",),
                 install=pip_install("mpi4py") + " (built against the job's MPI: load "
                 "the MPI module first)")
register_backend("xgboost", backend="hpctrain.backends.xgboost:XGBoostBackend",
                 config="hpctrain.backends.xgboost:XGBoostConfig",
                 trainer="hpctrain.xgboost:XGBoostTrainer", config_keyword="xgboost_config",
                 requires=("xgboost",), install=pip_install("xgboost pandas"))
register_backend("lightgbm", backend="hpctrain.backends.lightgbm:LightGBMBackend",
                 config="hpctrain.backends.lightgbm:LightGBMConfig",
                 trainer="hpctrain.lightgbm:LightGBMTrainer", config_keyword="lightgbm_config",
                 requires=("lightgbm",), install=pip_install("lightgbm pandas"))
# no framework: a Tune function trainable (Tuner(train_fn)), as Ray runs it in a plain actor
register_backend("function", backend="hpctrain.backends.function:FunctionBackend",
                 config="hpctrain.backends.function:FunctionConfig",
                 trainer="hpctrain.function_trainer:FunctionTrainer",
                 config_keyword="function_config")


def check_installed(name: str) -> None:
    """Raise :class:`MissingFrameworkError` (an ImportError), saying what to install, when
    backend ``name``'s framework is not importable here. Nothing is imported."""
    entry = backend_entry(name)
    modules, install = entry.requires, entry.install
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
    if name not in BACKENDS:  # (hpctrain's own: no scan of the installed plugins)
        raise ConfigError(f"job.backend: expected one of {sorted(backend_names())}, "
                          f"got {name!r}")
    check_installed(name)
    return load(backend_entry(name).backend)(config)


def needs_mpi_launcher(name: str, options: Mapping[str, Any]) -> bool:
    """True when backend ``name`` with these options must have its ranks started by an
    MPI launcher (mpirun/mpiexec, or srun with an --mpi plugin): the backend class says
    (:meth:`Backend.needs_mpi_launcher`).

    >>> needs_mpi_launcher("mpi", {}), needs_mpi_launcher("horovod", {"controller": "mpi"})
    (True, True)
    >>> needs_mpi_launcher("horovod", {}), needs_mpi_launcher("torch", {})
    (False, False)
    """
    if name not in backend_names():
        return False
    return load(backend_entry(name).backend).needs_mpi_launcher(options)


def backend_options(config: Any) -> Dict[str, Any]:
    """A backend config dataclass as its TOML table (``None`` values left out)."""
    if config is None or not hasattr(config, "__dataclass_fields__"):
        return {}

    return {k: v for k, v in asdict(config).items() if v is not None}
