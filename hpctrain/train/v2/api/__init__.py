"""``ray.train.v2.api``: ``UserCallback``; the modules below hold Ray's names at Ray's paths
(``data_parallel_trainer``, ``config``, ``context``, ``exceptions``, ``result``,
``reported_checkpoint``, ``train_fn_utils``, ``callback``, ``validation_config``,
``preemption``, ``report_config``). Ray's ``v2.api.mlflow.MLflowLoggerCallback`` (a
``UserCallback`` with ``save_checkpoints=``, ``checkpoint_metric=``) is not here: hpctrain's
``MLflowLoggerCallback`` (:mod:`hpctrain.air.integrations.mlflow`) takes Ray AIR's arguments."""
import importlib
from typing import Any

from ....user_callback import UserCallback

__all__ = ["UserCallback"]

#: Ray's modules under ``ray.train.v2.api``, imported on first access
MODULES = ("data_parallel_trainer", "config", "context", "exceptions", "result",
           "reported_checkpoint", "train_fn_utils", "callback", "validation_config",
           "preemption", "report_config")


def __getattr__(name: str) -> Any:
    if name in MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
