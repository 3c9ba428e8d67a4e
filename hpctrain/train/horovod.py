"""``ray.train.horovod``: the names of :mod:`hpctrain.horovod`, for programs written for Ray."""
from ..horovod import *  # noqa: F401,F403
from ..horovod import __all__  # noqa: F401
