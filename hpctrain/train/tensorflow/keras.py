"""``ray.train.tensorflow.keras``: the names of :mod:`hpctrain.tensorflow.keras`."""
from ...tensorflow.keras import *  # noqa: F401,F403
from ...tensorflow.keras import __all__  # noqa: F401
