"""``ray.train.v2.api.exceptions``."""
from ....errors import ControllerError, TrainingFailedError, WorkerGroupError

__all__ = ["TrainingFailedError", "WorkerGroupError", "ControllerError"]
