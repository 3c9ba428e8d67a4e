"""Ray Train 1.x's API, as a thin adapter over hpctrain's runtime.

``hpctrain.train`` is ``ray.train`` with its imports changed, for Ray Train 2.x programs
(``train.report(metrics, checkpoint=...)``, ``train.get_context()``, ``train.ScalingConfig``:
the same objects as in :mod:`hpctrain`) and for seed-era 1.x scripts alike::

    import ray.train.torch                   ->  import hpctrain.train.torch
    from ray import train                    ->  from hpctrain import train
    from ray.train import Trainer, ...       ->  from hpctrain.train import Trainer, ...
    from ray.train.callbacks import ...      ->  from hpctrain.train.callbacks import ...
    from ray.train.torch import ...          ->  from hpctrain.train.torch import ...
    from ray.train.tensorflow[.keras] import ... -> from hpctrain.train.tensorflow[.keras] import ...
    from ray.train.horovod import ...        ->  from hpctrain.train.horovod import ...
    from ray.train.lightning import ...      ->  from hpctrain.train.lightning import ...
    from ray.train.huggingface.transformers import ...
                                 ->  from hpctrain.train.huggingface.transformers import ...

    from ray.train.xgboost import ...        ->  from hpctrain.train.xgboost import ...
    from ray.train.lightgbm import ...       ->  from hpctrain.train.lightgbm import ...

The submodules re-export :mod:`hpctrain.torch`, :mod:`hpctrain.tensorflow`,
:mod:`hpctrain.horovod`, :mod:`hpctrain.lightning`, :mod:`hpctrain.huggingface.transformers`,
:mod:`hpctrain.xgboost` and :mod:`hpctrain.lightgbm`. The rest of this page is about the
1.x API.

```python
from hpctrain import train
from hpctrain.train import Trainer

def train_func(config):
    for epoch in range(config["epochs"]):
        ...
        train.save_checkpoint(epoch=epoch, model=model.state_dict())
        train.report(loss=loss)
    return train.world_rank()

trainer = Trainer(backend="torch", num_workers=2)
trainer.start()
print(trainer.run(train_func, config={"epochs": 3}))    # [0, 1]: every worker's return value
trainer.shutdown()
```

How it maps onto hpctrain:

- Each ``run()`` is one hpctrain run, ``<logdir>/run_001``, ``run_002``… (a TorchTrainer on
  the local launcher; worker processes start for each run, so ``start()``/``shutdown()``
  only open and close the trainer).
- ``train.report(**kw)`` is one ``hpctrain.report(kw)`` on every rank; every rank's metrics
  land in ``.hpctrain/worker-results/rank-R.jsonl``, which the driver follows to call
  ``TrainingCallback.handle_result`` with one dict per worker (rank order) while training
  runs, and to feed ``run_iterator()``.
- ``train.save_checkpoint(**kw)`` is also one ``hpctrain.report`` on every rank, so the
  ranks stay in step (as in Ray, every worker calls it the same number of times): rank 0
  hands in its dict as a committed checkpoint (``checkpoints/checkpoint_000001/
  dict_checkpoint.pkl``, numbered from 1 as in Ray), the other ranks an empty report.
  Rank 0's dict wins; ``load_checkpoint()`` on each worker returns what that worker saved
  last, else the checkpoint the run started from.

Differences from Ray 1.x, all on purpose:

- A checkpoint is a directory (``checkpoint_000003/dict_checkpoint.pkl``), not a pickle
  file; ``Trainer.load_checkpoint(path)`` and ``run(checkpoint=path)`` take either.
- Retention keeps the ``num_to_keep`` best checkpoints *and* the latest one, which a
  restart resumes from (hpctrain's rule).
- Reported values travel as JSON: numpy/torch scalars arrive as numbers, other objects
  that JSON cannot hold as their ``repr``.
- ``max_retries`` counts every worker failure, exceptions in ``train_func`` included; after
  a restart, iterations already handed to callbacks are not handed again.
- ``dataset=`` (Ray Datasets) is not available: load data inside ``train_func``.
"""
from __future__ import annotations

import importlib
from typing import Any

from .. import get_all_reported_checkpoints, get_checkpoint, get_context
from .. import PreemptionInfo, UserCallback, get_preemption_info  # Ray Train v2
from ..backends.torch import TorchConfig  # (Ray 1.x: ray.train.TorchConfig)
from ..checkpoint import Checkpoint, ReportedCheckpoint, ReportedCheckpointStatus
from ..config import (CheckpointConfig, CheckpointUploadMode, DataConfig, FailureConfig,
                      RunConfig, ScalingConfig, SyncConfig, ValidationConfig,
                      ValidationTaskConfig)
from ..errors import ControllerError, TrainingFailedError, WorkerGroupError
from ..result import Result
from .callbacks import JsonLoggerCallback, PrintCallback, TBXLoggerCallback, TrainingCallback
from .checkpoint import CheckpointStrategy
from .constants import (RESULT_FILE_JSON, TIME_THIS_ITER_S, TIMESTAMP,  # noqa: F401
                        TRAIN_CHECKPOINT_SUBDIR, TRAINING_ITERATION)
from .driver import TrainingIterator
from .session import (WorkerEntry, get_dataset_shard, load_checkpoint, local_rank, report,
                      save_checkpoint, world_rank, world_size)
from .trainer import LegacyTrainable, Trainer
from . import collective, context  # noqa: F401 - ray.train.collective, ray.train.context

#: (the name runs prepared by an earlier hpctrain pickled their ranks' entry under)
_WorkerEntry = WorkerEntry

__all__ = [
    # Ray Train 2.x (``ray.train``): the same objects as ``hpctrain``'s
    "report", "get_checkpoint", "get_all_reported_checkpoints", "get_context",
    "get_dataset_shard", "Checkpoint", "ReportedCheckpoint",
    "ScalingConfig", "RunConfig", "CheckpointConfig", "CheckpointUploadMode", "FailureConfig",
    "DataConfig", "SyncConfig",
    "Result", "TrainingFailedError", "WorkerGroupError", "ControllerError",
    # Ray Train 1.x
    "Trainer", "TrainingIterator", "TrainingCallback", "JsonLoggerCallback", "PrintCallback",
    "TBXLoggerCallback", "CheckpointStrategy", "TorchConfig", "save_checkpoint",
    "load_checkpoint", "world_rank", "local_rank", "world_size",
]
# Ray Train v2: user callbacks and preemption (the same objects as hpctrain's)
__all__ += ["UserCallback", "get_preemption_info", "PreemptionInfo"]
# Ray Train v2: asynchronous validation
__all__ += ["ValidationConfig", "ValidationTaskConfig", "ReportedCheckpointStatus"]

#: the framework subpackages, imported on first access (``train.torch`` after ``import
#: hpctrain.train as train``, as ``ray.train.torch``) so that importing this package
#: imports no framework
_FRAMEWORKS = ("torch", "tensorflow", "horovod", "lightning", "huggingface", "xgboost",
               "lightgbm", "v2")


def __getattr__(name: str) -> Any:
    if name in _FRAMEWORKS:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
