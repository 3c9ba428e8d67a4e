"""``ray.train.v2.api.config``."""
from ....config import (CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig,
                        SyncConfig)

__all__ = ["ScalingConfig", "RunConfig", "CheckpointConfig", "FailureConfig", "DataConfig",
           "SyncConfig"]
