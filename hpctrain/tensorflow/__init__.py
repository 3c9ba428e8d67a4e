"""TensorFlow integration: ``TensorflowTrainer`` and ``prepare_dataset_shard``.

TensorFlow is imported only inside the helpers, so ``from hpctrain.tensorflow import
TensorflowTrainer`` works on a login node without TensorFlow. In the training function,
create ``tf.distribute.MultiWorkerMirroredStrategy()`` as in Ray Train: ``TF_CONFIG`` is
already set for this rank (:mod:`hpctrain.backends.tensorflow`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

from ..backends.tensorflow import TensorflowConfig
from ..checkpoint import Checkpoint
from ..config import DataConfig, RunConfig, ScalingConfig, ValidationConfig
from ..trainer import DataParallelTrainer, SchedulerArg, TrainLoop

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = ["TensorflowTrainer", "TensorflowConfig", "prepare_dataset_shard"]


class TensorflowTrainer(DataParallelTrainer):
    """Ray Train's TensorflowTrainer: one ``TF_CONFIG`` worker per rank;
    ``tensorflow_config`` is a :class:`TensorflowConfig`. The other parameters are
    :class:`~hpctrain.DataParallelTrainer`'s."""

    _backend_name = "tensorflow"
    _backend_config_cls = TensorflowConfig

    def __init__(self, train_loop_per_worker: TrainLoop, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 tensorflow_config: Optional[TensorflowConfig] = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 scheduler: SchedulerArg = None, site: Optional[str] = None,
                 validation_config: Optional[ValidationConfig] = None) -> None:
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config,
                         backend_config=self._backend_config(tensorflow_config, "tensorflow_config"),
                         scaling_config=scaling_config, run_config=run_config,
                         datasets=datasets, dataset_config=dataset_config,
                         resume_from_checkpoint=resume_from_checkpoint, metadata=metadata,
                         scheduler=scheduler, site=site,
                         validation_config=validation_config)


def prepare_dataset_shard(tf_dataset_shard: "tf.data.Dataset") -> "tf.data.Dataset":
    """Turn TensorFlow's auto-sharding off for a dataset that is already this rank's part
    (from ``hpctrain.get_dataset_shard`` or sharded by hand): under
    MultiWorkerMirroredStrategy, ``model.fit`` would otherwise shard it again by file or
    by element and each rank would see only 1/N of its own shard."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return tf_dataset_shard.with_options(options)
