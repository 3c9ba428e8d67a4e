"""``ray.train.v2.api.context``: the class of what ``get_context()`` returns."""
from hpctrain.worker.train_context import TrainContext

__all__ = ["TrainContext"]
