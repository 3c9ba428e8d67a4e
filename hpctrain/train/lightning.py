"""``ray.train.lightning``: the names of :mod:`hpctrain.lightning`, for programs written for Ray."""
from ..lightning import *  # noqa: F401,F403
from ..lightning import __all__  # noqa: F401
