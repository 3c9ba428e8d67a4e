"""LightGBM integration: ``LightGBMTrainer``, ``RayTrainReportCallback`` and
``get_network_params`` (Ray Train's ``ray.train.lightgbm``).

Ray 2.x style — the training function calls ``lightgbm.train`` itself. Before it runs,
the ranks have agreed LightGBM's socket network (``machines`` = every rank's
``host:port``, ``num_machines``, this rank's ``local_listen_port``:
:mod:`hpctrain.backends.lightgbm`); ``get_network_params()`` returns them, as in Ray, and
``lightgbm.train`` adds them (with ``tree_learner="data"``) to params that set no network,
so Ray's quick start trains one data-parallel model over all ranks unchanged.

The older style: ``LightGBMTrainer(params=..., label_column="y", num_boost_round=10,
datasets={"train": ..., "valid": ...})``, as for :class:`~hpctrain.xgboost.XGBoostTrainer`.
LightGBM is imported only by the callback and inside the workers.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from ..backends.lightgbm import LightGBMConfig, get_network_params
from ..gbdt.trainer import GBDTTrainer
from ..checkpoint import Checkpoint
from ..config import DataConfig, RunConfig, ScalingConfig
from ..trainer import SchedulerArg, TrainLoop

__all__ = ["LightGBMTrainer", "LightGBMConfig", "RayTrainReportCallback", "get_network_params"]

CHECKPOINT_NAME = "model.txt"



class LightGBMTrainer(GBDTTrainer):
    """Ray Train's LightGBMTrainer: ``train_loop_per_worker`` on every rank with
    LightGBM's network agreed; or ``params``/``label_column``/``num_boost_round``.

    The keywords after ``checkpoint_frequency`` are :class:`~hpctrain.DataParallelTrainer`'s;
    any other keyword goes to ``lightgbm.train`` (with ``params=`` only).
    """

    _backend_name = _library = "lightgbm"
    _backend_config_cls = LightGBMConfig

    def __init__(self, train_loop_per_worker: Optional[TrainLoop] = None, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 lightgbm_config: Optional[LightGBMConfig] = None,
                 params: Optional[Dict[str, Any]] = None, label_column: Optional[str] = None,
                 num_boost_round: int = 10, dmatrix_params: Optional[Dict[str, Dict[str, Any]]] = None,
                 checkpoint_frequency: int = 0,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 scheduler: SchedulerArg = None, site: Optional[str] = None,
                 **train_kwargs: Any) -> None:
        common = dict(scaling_config=scaling_config, run_config=run_config, datasets=datasets,
                      dataset_config=dataset_config,
                      resume_from_checkpoint=resume_from_checkpoint, metadata=metadata,
                      scheduler=scheduler, site=site)
        self._setup(train_loop_per_worker, train_loop_config, lightgbm_config, params,
                    label_column, num_boost_round, dmatrix_params, checkpoint_frequency,
                    common, train_kwargs)

    @staticmethod
    def get_model(checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> Any:
        """The ``lightgbm.Booster`` saved in ``checkpoint`` (by ``RayTrainReportCallback``)."""
        from ._callback import RayTrainReportCallback

        return RayTrainReportCallback.get_model(checkpoint, filename)


def __getattr__(name: str) -> Any:
    if name == "RayTrainReportCallback":
        from ._callback import RayTrainReportCallback

        return RayTrainReportCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
