"""``FunctionTrainer``: a training function run with no framework set up (the ``function``
backend): what a Tune function trainable (``Tuner(train_fn)``) runs as, and what
``hpctrain run`` builds for ``job.backend = "function"``.

No framework is imported and no process group is formed; a function that uses one sets
it up itself (``hpctrain.torch.prepare_model``/``prepare_data_loader`` work with one rank
and no process group).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from .backends.function import FunctionConfig
from .checkpoint import Checkpoint
from .config import DataConfig, RunConfig, ScalingConfig, ValidationConfig
from .trainer import DataParallelTrainer, SchedulerArg, TrainLoop

__all__ = ["FunctionTrainer", "FunctionConfig"]


class FunctionTrainer(DataParallelTrainer):
    """A training function with no framework set up; ``function_config`` is a
    :class:`FunctionConfig`. The other parameters are
    :class:`~hpctrain.DataParallelTrainer`'s."""

    _backend_name = "function"
    _backend_config_cls = FunctionConfig

    def __init__(self, train_loop_per_worker: TrainLoop, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 function_config: Optional[FunctionConfig] = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 scheduler: SchedulerArg = None, site: Optional[str] = None,
                 validation_config: Optional[ValidationConfig] = None) -> None:
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config,
                         backend_config=self._backend_config(function_config,
                                                             "function_config"),
                         scaling_config=scaling_config, run_config=run_config,
                         datasets=datasets, dataset_config=dataset_config,
                         resume_from_checkpoint=resume_from_checkpoint, metadata=metadata,
                         scheduler=scheduler, site=site,
                         validation_config=validation_config)
