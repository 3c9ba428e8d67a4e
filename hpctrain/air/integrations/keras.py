"""``ray.air.integrations.keras``: :class:`hpctrain.tensorflow.keras.ReportCheckpointCallback`
(built from ``tf.keras`` on first access, so importing this module needs no TensorFlow)."""
from typing import Any

from ...tensorflow import keras as _keras

__all__ = ["ReportCheckpointCallback"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(_keras, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
