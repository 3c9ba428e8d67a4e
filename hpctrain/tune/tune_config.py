"""``ray.tune.tune_config``: :class:`TuneConfig` (defined in :mod:`hpctrain.tune.tuner`)."""
from .tuner import TuneConfig

__all__ = ["TuneConfig"]
