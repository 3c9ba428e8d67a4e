"""``ray.train.torch``: the names of :mod:`hpctrain.torch`, for programs written for Ray."""
from ..torch import *  # noqa: F401,F403
from ..torch import __all__  # noqa: F401
