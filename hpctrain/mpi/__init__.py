"""mpi4py integration: ``MPITrainer`` runs a training function on every rank of one MPI job.

```python
from mpi4py import MPI
import hpctrain
from hpctrain.mpi import MPITrainer

def train_func(config):
    comm = MPI.COMM_WORLD            # rank and size match hpctrain.get_context()
    total = comm.allreduce(comm.Get_rank() + 1)
    hpctrain.report({"total": total})

MPITrainer(train_func, scaling_config=hpctrain.ScalingConfig(num_workers=4)).fit()
```

Locally the ranks are started with ``mpirun``/``mpiexec`` (found on ``PATH``); in a Slurm
job with ``srun --mpi=pmix`` (the default launcher there gains ``--mpi=pmix`` unless
``scheduler.launcher_args`` names another ``--mpi``) or with ``scheduler.launcher =
"mpirun"``; under PBS with the site's ``mpiexec``. mpi4py is imported only in the ranks.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from ..backends.mpi import MPIConfig
from ..checkpoint import Checkpoint
from ..config import DataConfig, RunConfig, ScalingConfig, ValidationConfig
from ..trainer import DataParallelTrainer, SchedulerArg, TrainLoop

__all__ = ["MPITrainer", "MPIConfig"]


class MPITrainer(DataParallelTrainer):
    """A training function on every rank of one MPI job (mpi4py ``COMM_WORLD``);
    ``mpi_config`` is an :class:`MPIConfig`. The other parameters are
    :class:`~hpctrain.DataParallelTrainer`'s."""

    _backend_name = "mpi"
    _backend_config_cls = MPIConfig

    def __init__(self, train_loop_per_worker: TrainLoop, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 mpi_config: Optional[MPIConfig] = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 scheduler: SchedulerArg = None, site: Optional[str] = None,
                 validation_config: Optional[ValidationConfig] = None) -> None:
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config,
                         backend_config=self._backend_config(mpi_config, "mpi_config"),
                         scaling_config=scaling_config, run_config=run_config,
                         datasets=datasets, dataset_config=dataset_config,
                         resume_from_checkpoint=resume_from_checkpoint, metadata=metadata,
                         scheduler=scheduler, site=site,
                         validation_config=validation_config)
