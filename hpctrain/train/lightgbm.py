"""``ray.train.lightgbm``: the names of :mod:`hpctrain.lightgbm`, for programs written for
Ray (``RayTrainReportCallback`` imports LightGBM when first asked for)."""
from ..lightgbm import (LightGBMConfig, LightGBMTrainer, __all__, __getattr__,  # noqa: F401
                        get_network_params)
