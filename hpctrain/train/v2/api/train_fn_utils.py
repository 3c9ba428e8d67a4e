"""``ray.train.v2.api.train_fn_utils``: the functions a training function calls."""
from .... import (get_all_reported_checkpoints, get_checkpoint, get_context, get_dataset_shard,
                  get_preemption_info, report)

__all__ = ["report", "get_context", "get_checkpoint", "get_all_reported_checkpoints",
           "get_dataset_shard", "get_preemption_info"]
