"""``ray.train.callbacks`` (Ray Train 1.x): the callbacks a 1.x ``Trainer.run`` calls."""
from . import JsonLoggerCallback, PrintCallback, TBXLoggerCallback, TrainingCallback

__all__ = ["TrainingCallback", "JsonLoggerCallback", "PrintCallback", "TBXLoggerCallback"]
