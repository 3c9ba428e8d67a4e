"""Hyperparameter sweeps, Ray Tune's way, as job arrays.

```python
from hpctrain import ScalingConfig, RunConfig, tune
from hpctrain.torch import TorchTrainer

trainer = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=1),
                       run_config=RunConfig(name="sweep", storage_path="/scratch/me/runs"))
tuner = tune.Tuner(trainer,
                   param_space={"train_loop_config": {"lr": tune.loguniform(1e-4, 1e-1),
                                                      "layers": tune.grid_search([2, 4])}},
                   tune_config=tune.TuneConfig(num_samples=4, metric="loss", mode="min",
                                               max_concurrent_trials=8))
grid = tuner.fit()                       # here, or one Slurm/PBS job array on a cluster
best = grid.get_best_result()            # .config, .metrics, .checkpoint, .path
df = grid.get_dataframe()
```
Every trial is a normal hpctrain run (``<storage>/<name>/trial_NNNNN``) with the trainer's
scaling, checkpointing and recovery settings. See :mod:`.tuner`, :mod:`.sweepdir` (a sweep
on disk: what the CLI reads) and :mod:`.jobfile` (`hpctrain sweep job.toml`).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from .. import report as _report
from .. import Checkpoint, Result, get_checkpoint, get_context  # (ray.tune's names too)
from ..config import CheckpointConfig, FailureConfig, RunConfig, SyncConfig
from ..train import LegacyTrainable
from .legacy import ExperimentAnalysis, TuneError, run
from .result_grid import ResultGrid, TrialResult
from . import schedulers
from .search import choice, grid_search, loguniform, randint, uniform
from .tuner import Tuner
from .tune_config import TuneConfig  # (ray.tune.tune_config)
from .stopper import Stopper  # (ray.tune.stopper)
from .resources import with_resources

__all__ = ["Tuner", "TuneConfig", "ResultGrid", "TrialResult", "grid_search", "choice",
           "uniform", "loguniform", "randint", "run", "report", "ExperimentAnalysis",
           "LegacyTrainable", "TuneError", "SyncConfig", "Stopper", "with_resources"]
# (also importable here, as from ray.tune, and documented as hpctrain's: RunConfig,
# CheckpointConfig, FailureConfig, Checkpoint, Result, get_checkpoint, get_context)


def report(metrics: Optional[Dict[str, Any]] = None, *, checkpoint: Any = None,
           **kwargs: Any) -> None:
    """Report from a trial's training function: Ray 2's ``tune.report({"loss": x})`` or
    Ray 1's ``tune.report(loss=x)`` (both are :func:`hpctrain.report`)."""

    _report({**(metrics or {}), **kwargs}, checkpoint=checkpoint)
