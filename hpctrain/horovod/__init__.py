"""Horovod integration: ``HorovodTrainer`` for PyTorch training functions.

```python
import horovod.torch as hvd
from hpctrain.horovod import HorovodTrainer

def train_func(config):
    hvd.init()                       # rank/size match hpctrain.get_context()
    ...

HorovodTrainer(train_func, scaling_config=ScalingConfig(num_workers=4)).fit()
```

Horovod's last release does not build against torch 2.x as published:
``scripts/install-horovod.sh`` builds it (see :mod:`hpctrain.backends.horovod` for the
controllers and the rendezvous).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from ..backends.horovod import HorovodConfig
from ..checkpoint import Checkpoint
from ..config import DataConfig, RunConfig, ScalingConfig, ValidationConfig
from ..trainer import DataParallelTrainer, SchedulerArg, TrainLoop

__all__ = ["HorovodTrainer", "HorovodConfig"]


class HorovodTrainer(DataParallelTrainer):
    """Ray Train's HorovodTrainer (PyTorch training functions); ``horovod_config`` is a
    :class:`HorovodConfig`. The other parameters are :class:`~hpctrain.DataParallelTrainer`'s."""

    _backend_name = "horovod"
    _backend_config_cls = HorovodConfig

    def __init__(self, train_loop_per_worker: TrainLoop, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 horovod_config: Optional[HorovodConfig] = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 scheduler: SchedulerArg = None, site: Optional[str] = None,
                 validation_config: Optional[ValidationConfig] = None) -> None:
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config,
                         backend_config=self._backend_config(horovod_config, "horovod_config"),
                         scaling_config=scaling_config, run_config=run_config,
                         datasets=datasets, dataset_config=dataset_config,
                         resume_from_checkpoint=resume_from_checkpoint, metadata=metadata,
                         scheduler=scheduler, site=site,
                         validation_config=validation_config)
