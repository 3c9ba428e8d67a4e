"""``ray.train.xgboost``: the names of :mod:`hpctrain.xgboost`, for programs written for Ray
(``RayTrainReportCallback`` imports XGBoost when first asked for)."""
from ..xgboost import XGBoostConfig, XGBoostTrainer, __all__, __getattr__  # noqa: F401
