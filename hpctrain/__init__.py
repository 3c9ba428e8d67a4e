"""hpctrain: Ray Train's ergonomics on Slurm and PBS, with the batch system as the engine.

```python
import hpctrain
from hpctrain import ScalingConfig, RunConfig, CheckpointConfig, FailureConfig, Checkpoint
from hpctrain.torch import TorchTrainer

def train_func(config):
    ctx = hpctrain.get_context()
    ...
    hpctrain.report({"loss": loss}, checkpoint=Checkpoint.from_directory(d))

result = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2)).fit()
```
Framework imports are lazy: ``import hpctrain`` needs neither torch nor TensorFlow.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from .common.context import get_session as _session
from ._version import __version__
from .errors import (CheckpointError, ConfigError, ControllerError, HpctrainError,
                     MissingFrameworkError, RunLockedError, TrainingFailedError,
                     TrainingStoppedError, WorkerGroupError)

if TYPE_CHECKING:
    from .worker.train_context import TrainContext
    from .checkpoint import Checkpoint, ReportedCheckpoint, ReportedCheckpointStatus
    from .config import (CheckpointConfig, CheckpointUploadMode, DataConfig, FailureConfig,
                         RunConfig, ScalingConfig, SchedulerConfig, SetupConfig, SyncConfig,
                         ValidationConfig, ValidationTaskConfig)
    from .data import DatasetShard
    from .preemption import PreemptionInfo
    from .result import Result
    from .run import Run, RunOptions
    from .schedulers.lsf import LsfConfig
    from .schedulers.pbs import PbsConfig
    from .schedulers.slurm import SlurmConfig
    from .trainer import DataParallelTrainer
    from .user_callback import UserCallback

#: the public names, each imported from its module on first use (PEP 562): ``import
#: hpctrain`` (every rank, the batch step) loads only ``report()``'s few modules, and
#: ``from hpctrain import ScalingConfig`` loads the config classes, not the trainer
_LAZY_NAMES = {
    **dict.fromkeys(("Checkpoint", "ReportedCheckpoint", "ReportedCheckpointStatus"),
                    "checkpoint"),
    **dict.fromkeys(("CheckpointConfig", "CheckpointUploadMode", "DataConfig", "FailureConfig",
                     "RunConfig", "ScalingConfig", "SchedulerConfig", "SetupConfig",
                     "SyncConfig", "ValidationConfig", "ValidationTaskConfig"), "config"),
    # one factory per scheduler, kept with its class (hpctrain.schedulers.<name>)
    "LsfConfig": "schedulers.lsf", "PbsConfig": "schedulers.pbs",
    "SlurmConfig": "schedulers.slurm",
    "UserCallback": "user_callback", "PreemptionInfo": "preemption", "Result": "result",
    "Run": "run", "RunOptions": "run", "DataParallelTrainer": "trainer",
}

__all__ = [
    "Checkpoint", "CheckpointConfig", "CheckpointUploadMode", "FailureConfig", "RunConfig", "ScalingConfig", "Result",
    "Run", "RunOptions", "DataParallelTrainer", "SchedulerConfig", "SlurmConfig", "PbsConfig", "LsfConfig", "SetupConfig", "DataConfig", "SyncConfig",
    "report", "get_checkpoint", "get_all_reported_checkpoints", "ReportedCheckpoint",
    "ReportedCheckpointStatus", "ValidationConfig", "ValidationTaskConfig",
    "get_context", "get_dataset_shard", "get_preemption_info", "PreemptionInfo", "UserCallback",
    "TrainingFailedError", "WorkerGroupError", "ControllerError", "TrainingStoppedError",
    "ConfigError",
    "CheckpointError", "HpctrainError", "MissingFrameworkError", "RunLockedError", "__version__",
]


def report(metrics: Dict[str, Any], checkpoint: Optional[Checkpoint] = None, *,
           checkpoint_upload_mode: Any = None,
           delete_local_checkpoint_after_upload: Optional[bool] = None,
           checkpoint_upload_fn: Any = None, validation: Any = False) -> None:
    """Report this iteration's metrics (rank 0's are recorded) and, optionally, a checkpoint.

    Every rank must call ``report`` the same number of times. When any rank passes a
    checkpoint, every rank's files are gathered into one committed checkpoint
    (``checkpoints/checkpoint_NNNNNN``), published atomically once all ranks are done.

    ``checkpoint_upload_mode`` (Ray's name; default ``CheckpointConfig``'s, ``"sync"``):
    ``CheckpointUploadMode.ASYNC`` returns once the files are moved aside (the directory
    is yours again) and commits in the background; the next checkpoint report, a stop
    and the end of the training wait for it.

    ``delete_local_checkpoint_after_upload`` (Ray's): True deletes the checkpoint's
    directory once its files are handed in; False keeps its files (an asynchronous report
    then copies them instead of moving them); None: kept for ``SYNC``, moved away for
    ``ASYNC`` (the emptied directory stays, to be reused). A committed checkpoint handed
    back in is never deleted.
    ``checkpoint_upload_fn`` is refused: checkpoints are committed into the run directory.

    ``validation`` (Ray's): True, or a :class:`~hpctrain.config.ValidationTaskConfig`,
    validates this report's checkpoint asynchronously with the trainer's
    ``ValidationConfig`` (rank 0's report decides): in a process or batch job of its
    own, whose metrics are merged into the checkpoint's (docs/guide/validation.md).
    """
    _session("report()").report(
        metrics, checkpoint, checkpoint_upload_mode=checkpoint_upload_mode,
        delete_local_checkpoint_after_upload=delete_local_checkpoint_after_upload,
        checkpoint_upload_fn=checkpoint_upload_fn, validation=validation)


def get_checkpoint() -> Optional[Checkpoint]:
    """The checkpoint to resume from (latest committed after a restart, else the
    trainer's ``resume_from_checkpoint``), or None on a fresh start."""
    checkpoint: Optional[Checkpoint] = _session("get_checkpoint()").get_checkpoint()
    return checkpoint


def get_all_reported_checkpoints() -> List[ReportedCheckpoint]:
    """Every checkpoint of this run committed so far and still kept (retention may have
    removed older ones; a restart's earlier attempts included), oldest first, as
    :class:`ReportedCheckpoint` objects (``.checkpoint``, ``.metrics``): Ray 2.x's
    ``ray.train.get_all_reported_checkpoints()``. A checkpoint handed in with
    ``CheckpointUploadMode.ASYNC``, or between agreement reports of a fast loop, is
    listed once it is committed (at a later report)."""
    reported: List[ReportedCheckpoint] = _session(
        "get_all_reported_checkpoints()").reported_checkpoints()
    return reported


def get_context() -> "TrainContext":
    """This worker's :class:`TrainContext` (ranks, sizes, run dir, job id, restarts)."""
    from hpctrain.worker.train_context import TrainContext

    return TrainContext(_session("get_context()"))


def get_preemption_info() -> Optional[PreemptionInfo]:
    """Ray Train v2's ``ray.train.get_preemption_info()``: None until the scheduler's
    warning (a preemption or the time limit) is agreed by every rank, at the same
    report; then a :class:`~hpctrain.preemption.PreemptionInfo` (every node and rank of
    the allocation, and the deadline in ``deadline_ms``). Report a checkpoint then: the
    run stops cleanly after that report and continues in a requeued allocation
    (``FailureConfig.max_requeues``, alias ``max_preemption_failures``)."""
    info: Optional[PreemptionInfo] = _session("get_preemption_info()").preemption_info()
    return info


def get_dataset_shard(name: str) -> "DatasetShard":
    """This rank's part of the trainer's dataset ``name`` (``datasets=`` or the job
    file's ``[datasets]``): a :class:`hpctrain.data.DatasetShard`, read lazily, shuffled
    per epoch alike on every rank. See :mod:`hpctrain.data`."""
    shard: DatasetShard = _session("get_dataset_shard()").get_dataset_shard(name)
    return shard


#: subpackages reachable as attributes after ``import hpctrain``, imported on first use,
#: as ``ray.data``, ``ray.train`` and ``ray.tune`` are after ``import ray``
_LAZY_SUBPACKAGES = ("data", "train", "tune", "air")


def __getattr__(name: str) -> Any:
    if name in _LAZY_NAMES:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY_NAMES[name]}"), name)
        globals()[name] = value  # once: later uses do not come here
        return value
    if name in _LAZY_SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY_NAMES) | set(_LAZY_SUBPACKAGES))
