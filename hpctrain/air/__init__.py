"""``ray.air``: the module paths Ray 2.58 still has under ``ray.air``, for programs written
for Ray (``from ray.air.integrations.keras import ReportCheckpointCallback`` →
``from hpctrain.air.integrations.keras import ...``). The names are hpctrain's own objects:

- ``hpctrain.air``, ``hpctrain.air.config``: ``RunConfig``, ``ScalingConfig``,
  ``FailureConfig``, ``CheckpointConfig``;
- ``hpctrain.air.result``: ``Result``;
- ``hpctrain.air.integrations.keras``: ``ReportCheckpointCallback``
  (:mod:`hpctrain.tensorflow.keras`; TensorFlow is imported on first use of the class);
- ``hpctrain.air.integrations.mlflow`` / ``.wandb``: ``MLflowLoggerCallback``,
  ``WandbLoggerCallback`` (:mod:`hpctrain.callbacks`).

- ``hpctrain.air.session``: Ray 2.0–2.6's session functions (``session.report``,
  ``session.get_world_rank``…).

Ray's ``ray.air.execution``, ``ray.air.util`` and ``DataBatchType`` have no counterpart
(docs/porting.md lists them).
"""
from ..config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ..result import Result

__all__ = ["RunConfig", "Result", "ScalingConfig", "FailureConfig", "CheckpointConfig"]
