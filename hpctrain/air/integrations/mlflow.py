"""``ray.air.integrations.mlflow``: :class:`hpctrain.callbacks.MLflowLoggerCallback`."""
from ...callbacks import MLflowLoggerCallback

__all__ = ["MLflowLoggerCallback"]
