"""``ray.tune.integration.keras``: ``TuneReportCheckpointCallback``, Ray's Keras callback for
a Tune trial: :class:`hpctrain.tensorflow.keras.ReportCheckpointCallback` (the same
arguments: ``metrics``, ``report_metrics_on``, ``checkpoint_on``; a trial's report is
``hpctrain.report``). Built from ``tf.keras`` on first access: importing this module needs
no TensorFlow."""
from typing import Any

from ...tensorflow import keras as _keras

__all__ = ["TuneReportCheckpointCallback"]


def __getattr__(name: str) -> Any:
    if name == "TuneReportCheckpointCallback":
        return _keras.ReportCheckpointCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
