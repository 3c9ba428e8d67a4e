"""``ray.train.tensorflow``: the names of :mod:`hpctrain.tensorflow`, for programs written
for Ray."""
from ...tensorflow import *  # noqa: F401,F403
from ...tensorflow import __all__  # noqa: F401
