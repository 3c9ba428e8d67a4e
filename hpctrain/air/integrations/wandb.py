"""``ray.air.integrations.wandb``: :class:`hpctrain.callbacks.WandbLoggerCallback`."""
from ...callbacks import WandbLoggerCallback

__all__ = ["WandbLoggerCallback"]
