"""``ray.train.checkpoint.CheckpointStrategy`` (Ray Train 1.x): which checkpoints of a
1.x ``Trainer.run`` stay on disk, as the ``CheckpointConfig`` of the run below it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..config import CheckpointConfig
from .constants import TIMESTAMP

__all__ = ["CheckpointStrategy"]


@dataclass
class CheckpointStrategy:
    """Which checkpoints of a run stay on disk (Ray Train 1.x).

    ``num_to_keep``: keep this many (None: all; 0: none are kept once the run is over).
    ``checkpoint_score_attribute``: a numeric key of the checkpoint dict that ranks them;
    the default ``"_timestamp"`` (filled in by ``save_checkpoint``) keeps the most recent.
    ``checkpoint_score_order``: ``"max"`` or ``"min"``: which end of the score is best.
    The latest checkpoint is always kept as well: a restart resumes from it.
    """

    num_to_keep: Optional[int] = None
    checkpoint_score_attribute: str = TIMESTAMP
    checkpoint_score_order: str = "max"

    def __post_init__(self) -> None:
        if self.num_to_keep is not None and (isinstance(self.num_to_keep, bool) or
                                             not isinstance(self.num_to_keep, int) or
                                             self.num_to_keep < 0):
            raise ValueError(f"Received invalidate num_to_keep: {self.num_to_keep}. "
                             "Must be None or non-negative integer.")
        if self.checkpoint_score_order not in ("max", "min"):
            raise ValueError('checkpoint_score_order must be either "max" or "min".')

    def _checkpoint_config(self) -> CheckpointConfig:
        # num_to_keep=0: hpctrain must commit (a restart resumes from it); the run's
        # checkpoints are removed when it ends.
        return CheckpointConfig(num_to_keep=1 if self.num_to_keep == 0 else self.num_to_keep,
                                checkpoint_score_attribute=self.checkpoint_score_attribute,
                                checkpoint_score_order=self.checkpoint_score_order)
