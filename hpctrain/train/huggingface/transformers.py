"""``ray.train.huggingface.transformers``: the names of :mod:`hpctrain.huggingface.transformers`."""
from ...huggingface.transformers import *  # noqa: F401,F403
from ...huggingface.transformers import __all__  # noqa: F401
