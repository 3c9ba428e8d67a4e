"""``ray.air.config``: hpctrain's configuration dataclasses under Ray's module path."""
from ..config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig

__all__ = ["RunConfig", "ScalingConfig", "FailureConfig", "CheckpointConfig"]
