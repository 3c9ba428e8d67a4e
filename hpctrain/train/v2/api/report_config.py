"""``ray.train.v2.api.report_config``."""
from ....config import CheckpointUploadMode

__all__ = ["CheckpointUploadMode"]
