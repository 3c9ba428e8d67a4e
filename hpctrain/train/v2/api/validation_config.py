"""``ray.train.v2.api.validation_config``."""
from ....config import ValidationConfig, ValidationTaskConfig

__all__ = ["ValidationConfig", "ValidationTaskConfig"]
