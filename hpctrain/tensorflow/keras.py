"""``ReportCheckpointCallback``: Keras logs to ``hpctrain.report``, with a checkpoint when asked.

```python
from hpctrain.tensorflow.keras import ReportCheckpointCallback

model.fit(x, y, epochs=config["epochs"], initial_epoch=start_epoch,
          callbacks=[ReportCheckpointCallback()])
```

Each epoch end (``report_metrics_on``) reports the Keras logs (all of them, or the names
in ``metrics``: a list, or a dict ``{reported name: Keras log name}``). On
``checkpoint_on`` events — and on any report after the scheduler's warning, when
``get_context().should_checkpoint()`` is true — the report carries a checkpoint with the
whole model saved as ``model.keras`` and ``checkpoint.json`` (``{"epoch": <0-based
epoch>}``), so that a resumed run can continue with ``initial_epoch = epoch + 1``
(:func:`load_checkpoint` reads both back). Every rank saves (MultiWorkerMirroredStrategy
needs every worker in ``model.save``); only rank 0 hands its copy in, so the model is
written to the run directory once.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import hpctrain
from ..errors import ConfigError

MODEL_FILE = "model.keras"
STATE_FILE = "checkpoint.json"

_EVENTS = ("epoch_end", "train_batch_end", "test_end", "predict_end")


def _events(value: Union[str, Sequence[str]], what: str) -> List[str]:
    events = [value] if isinstance(value, str) else list(value)
    for e in events:
        if e not in _EVENTS:

            raise ConfigError(f"ReportCheckpointCallback({what}=...): expected one or more of "
                              f"{', '.join(_EVENTS)}, got {e!r}")
    return events


def _callback_base():
    import tensorflow as tf

    return tf.keras.callbacks.Callback


def load_checkpoint(checkpoint) -> Tuple[Any, int]:
    """``(model, next_epoch)`` from a checkpoint this callback wrote (call it inside the
    strategy's scope); ``(None, 0)`` for ``None``."""
    if checkpoint is None:
        return None, 0
    import tensorflow as tf

    with checkpoint.as_directory() as d:
        model = tf.keras.models.load_model(os.path.join(d, MODEL_FILE))
        epoch = -1
        if os.path.exists(os.path.join(d, STATE_FILE)):
            with open(os.path.join(d, STATE_FILE)) as f:
                epoch = int(json.load(f).get("epoch", -1))
    return model, epoch + 1


class _ReportCheckpointCallback:
    def __init__(self, checkpoint_on: Union[str, Sequence[str]] = "epoch_end",
                 report_metrics_on: Union[str, Sequence[str]] = "epoch_end",
                 metrics: Optional[Union[str, List[str], Dict[str, str]]] = None):
        super().__init__()
        self._checkpoint_on = _events(checkpoint_on, "checkpoint_on")
        self._report_on = _events(report_metrics_on, "report_metrics_on")
        self._metrics = [metrics] if isinstance(metrics, str) else metrics
        self._epoch = -1

    def _select(self, logs: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        logs = {k: _plain(v) for k, v in (logs or {}).items()}
        if self._metrics is None:
            return logs
        if isinstance(self._metrics, dict):
            return {name: logs[key] for name, key in self._metrics.items() if key in logs}
        return {name: logs[name] for name in self._metrics if name in logs}

    def _handle(self, event: str, logs: Optional[Dict[str, Any]]) -> None:

        if event not in self._report_on and event not in self._checkpoint_on:
            return
        want = event in self._checkpoint_on or hpctrain.get_context().should_checkpoint()
        metrics = self._select(logs)
        if not want:
            hpctrain.report(metrics)
            return
        d = tempfile.mkdtemp(prefix="hpctrain-keras-")
        try:
            self.model.save(os.path.join(d, MODEL_FILE))
            with open(os.path.join(d, STATE_FILE), "w") as f:
                json.dump({"epoch": self._epoch}, f)
            rank0 = hpctrain.get_context().get_world_rank() == 0
            hpctrain.report(metrics, checkpoint=hpctrain.Checkpoint.from_directory(d)
                            if rank0 else None)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        self._epoch = epoch
        self._handle("epoch_end", logs)

    def on_train_batch_end(self, batch, logs=None):
        self._handle("train_batch_end", logs)

    def on_test_end(self, logs=None):
        self._handle("test_end", logs)

    def on_predict_end(self, logs=None):
        self._handle("predict_end", logs)


def _plain(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def __getattr__(name: str):
    # The class derives from tf.keras.callbacks.Callback, built on first use so that
    # importing this module needs no TensorFlow.
    if name == "ReportCheckpointCallback":
        cls = type("ReportCheckpointCallback", (_ReportCheckpointCallback, _callback_base()),
                   {"__doc__": __doc__, "__module__": __name__})
        globals()[name] = cls
        return cls
    raise AttributeError(name)


__all__ = ["ReportCheckpointCallback", "load_checkpoint", "MODEL_FILE", "STATE_FILE"]
