"""``ray.train.v2.api.reported_checkpoint``."""
from ....checkpoint import ReportedCheckpoint, ReportedCheckpointStatus

__all__ = ["ReportedCheckpoint", "ReportedCheckpointStatus"]
