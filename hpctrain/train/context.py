"""``ray.train.context``: :class:`TrainContext`, the class of what
``hpctrain.get_context()`` (``train.get_context()``) returns, for type hints."""
from hpctrain.worker.train_context import TrainContext

__all__ = ["TrainContext"]
