"""XGBoost integration: ``XGBoostTrainer`` and ``RayTrainReportCallback`` (Ray Train's
``ray.train.xgboost``).

Ray 2.x style — the training function calls ``xgboost.train`` itself; hpctrain has joined
every rank to XGBoost's collective first (a ``RabitTracker`` on rank 0:
:mod:`hpctrain.backends.xgboost`), so the call trains one model over all ranks' rows::

    def train_func():
        df = hpctrain.get_dataset_shard("train").materialize().to_pandas()
        dtrain = xgboost.DMatrix(df.drop("target", axis=1), label=df["target"])
        xgboost.train(params, dtrain, num_boost_round=10,
                      callbacks=[RayTrainReportCallback(frequency=5)])

    result = XGBoostTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
                            datasets={"train": train_df}).fit()
    booster = RayTrainReportCallback.get_model(result.checkpoint)

The older style: ``XGBoostTrainer(params=..., label_column="y", num_boost_round=10,
datasets={"train": ..., "valid": ...})`` — every dataset other than "train" is an eval
set (its metrics reported as ``valid-<metric>``), a checkpoint at the end and every
``checkpoint_frequency`` rounds (Ray: ``CheckpointConfig(checkpoint_frequency=)``), a resumed
run (``resume_from_checkpoint=``, or a restart) trains up to ``num_boost_round`` trees in
all; other keywords go to ``xgboost.train``.

XGBoost is imported only by the callback and inside the workers.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from ..backends.xgboost import XGBoostConfig
from ..gbdt.trainer import GBDTTrainer
from ..checkpoint import Checkpoint
from ..config import DataConfig, RunConfig, ScalingConfig
from ..trainer import SchedulerArg, TrainLoop

__all__ = ["XGBoostTrainer", "XGBoostConfig", "RayTrainReportCallback"]

CHECKPOINT_NAME = "model.ubj"


class XGBoostTrainer(GBDTTrainer):
    """Ray Train's XGBoostTrainer: ``train_loop_per_worker`` on every rank, joined to
    XGBoost's collective; or ``params``/``label_column``/``num_boost_round``.

    The keywords after ``checkpoint_frequency`` are :class:`~hpctrain.DataParallelTrainer`'s;
    any other keyword goes to ``xgboost.train`` (with ``params=`` only).
    """

    _backend_name = _library = "xgboost"
    _backend_config_cls = XGBoostConfig

    def __init__(self, train_loop_per_worker: Optional[TrainLoop] = None, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 xgboost_config: Optional[XGBoostConfig] = None,
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
        self._setup(train_loop_per_worker, train_loop_config, xgboost_config, params,
                    label_column, num_boost_round, dmatrix_params, checkpoint_frequency,
                    common, train_kwargs)

    @staticmethod
    def get_model(checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> Any:
        """The ``xgboost.Booster`` saved in ``checkpoint`` (by ``RayTrainReportCallback``)."""
        from ._callback import RayTrainReportCallback

        return RayTrainReportCallback.get_model(checkpoint, filename)




def __getattr__(name: str) -> Any:
    if name in ("RayTrainReportCallback", "XGBoostReportCallback"):
        from ._callback import RayTrainReportCallback

        return RayTrainReportCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
