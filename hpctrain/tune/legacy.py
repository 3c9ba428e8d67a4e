"""The seed-era (Ray 1.x) route: ``trainer.to_tune_trainable(train_func)`` and
``tune.run(trainable, config=...)`` returning an ``ExperimentAnalysis``.

```python
from hpctrain import train, tune
from hpctrain.train import Trainer

def train_func(config):
    for _ in range(config["num_epochs"]):
        train.report(output=config["input"])

trainer = Trainer(backend="torch", num_workers=2)
trainable = trainer.to_tune_trainable(train_func)
analysis = tune.run(trainable, config={"num_epochs": 2, "input": tune.grid_search([1, 2, 3])})
print(analysis.get_best_config(metric="output", mode="max"))   # {'num_epochs': 2, 'input': 3}
```
Each trial is one hpctrain run (``<local_dir>/<name>/trial_NNNNN``) of ``train_func`` on the
trainer's workers, with the seed-era ``train.report``/``save_checkpoint``/
``load_checkpoint`` working inside it. The trial's return value is ignored, as in Ray.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional

from ..config import RunConfig
from ..errors import ConfigError, HpctrainError
from .tuner import TuneConfig, Tuner


class TuneError(HpctrainError):
    """``tune.run`` with ``raise_on_failed_trial=True`` (the default): a trial failed."""


class Trial:
    """One trial of an :class:`ExperimentAnalysis`: ``config``, ``last_result``,
    ``logdir``, ``status``, ``trial_id``, ``error``."""

    def __init__(self, result: Any):
        self.config = result.config
        self.last_result = dict(result.metrics or {})
        self.logdir = result.path
        self.local_path = result.path
        self.status = {"FINISHED": "TERMINATED", "FAILED": "ERROR"}.get(result.status,
                                                                         result.status)
        self.trial_id = result.trial_id
        self.error = result.error
        self.checkpoint = result.checkpoint

    def __repr__(self) -> str:
        return f"Trial({self.trial_id}, {self.status}, config={self.config})"


class ExperimentAnalysis:
    """Ray 1.x's analysis of a ``tune.run``: ``get_best_config(metric, mode)``,
    ``get_best_trial``, ``get_best_logdir``, ``best_config``, ``dataframe()``,
    ``results_df``, ``trials``, ``trial_dataframes``."""

    def __init__(self, grid: Any, metric: Optional[str] = None, mode: Optional[str] = None):
        self._grid = grid
        self.default_metric = metric
        self.default_mode = mode
        self.trials = [Trial(r) for r in grid]
        self.experiment_path = grid.experiment_path

    def _best(self, metric: Optional[str], mode: Optional[str], scope: str):
        metric, mode = metric or self.default_metric, mode or self.default_mode
        if not metric or not mode:
            raise ValueError("To fetch the best trial, pass a metric and a mode (\"min\" or "
                             "\"max\"), here or to tune.run().")
        ranked = self._grid.ranked(metric, mode, "all" if scope == "all" else "last")
        return ranked[0] if ranked else None

    def get_best_trial(self, metric: Optional[str] = None, mode: Optional[str] = None,
                       scope: str = "last") -> Optional[Trial]:
        best = self._best(metric, mode, scope)
        return None if best is None else next(t for t in self.trials
                                              if t.trial_id == best.trial_id)

    def get_best_config(self, metric: Optional[str] = None, mode: Optional[str] = None,
                        scope: str = "last") -> Optional[Dict[str, Any]]:
        best = self._best(metric, mode, scope)
        return None if best is None else best.config

    def get_best_logdir(self, metric: Optional[str] = None, mode: Optional[str] = None,
                        scope: str = "last") -> Optional[str]:
        best = self._best(metric, mode, scope)
        return None if best is None else best.path

    best_trial = property(lambda self: self.get_best_trial())
    best_config = property(lambda self: self.get_best_config())
    best_logdir = property(lambda self: self.get_best_logdir())
    best_result = property(lambda self: (self.get_best_trial() or Trial.__new__(Trial)).__dict__
                           .get("last_result"))

    def get_all_configs(self) -> Dict[str, Dict[str, Any]]:
        return {t.logdir: t.config for t in self.trials}

    def dataframe(self, metric: Optional[str] = None, mode: Optional[str] = None):
        """One row per trial (its last result; with metric and mode, its best)."""
        return self._grid.get_dataframe(filter_metric=metric, filter_mode=mode)

    @property
    def results_df(self):
        return self._grid.get_dataframe()

    @property
    def trial_dataframes(self) -> Dict[str, Any]:
        return {r.path: r.metrics_dataframe for r in self._grid}


def run(run_or_experiment: Any, *, config: Optional[Dict[str, Any]] = None,
        num_samples: int = 1, metric: Optional[str] = None, mode: Optional[str] = None,
        name: Optional[str] = None, local_dir: Optional[str] = None,
        max_concurrent_trials: Optional[int] = None, seed: Optional[int] = None,
        raise_on_failed_trial: bool = True, verbose: int = 1,
        **unsupported: Any) -> ExperimentAnalysis:
    """Ray 1.x's ``tune.run``: one trial per config of ``config`` (grid searches crossed,
    repeated ``num_samples`` times, random domains sampled per trial), run here; returns
    an :class:`ExperimentAnalysis`. Trials go to ``<local_dir>/<name>/trial_NNNNN``
    (default: the default storage path and ``<trainable>_<date>``). Running again with
    the same ``name`` continues the sweep (only unfinished trials run)."""
    if unsupported:
        raise ConfigError(f"tune.run({', '.join(f'{k}=...' for k in sorted(unsupported))}): "
                          "not available in hpctrain", hint="supported: config, num_samples, "
                          "metric, mode, name, local_dir, max_concurrent_trials, seed, "
                          "raise_on_failed_trial, verbose")
    trainable_name = getattr(run_or_experiment, "__name__", type(run_or_experiment).__name__)
    tuner = Tuner(run_or_experiment, param_space=config or {},
                  tune_config=TuneConfig(metric=metric, mode=mode, num_samples=num_samples,
                                         max_concurrent_trials=max_concurrent_trials,
                                         seed=seed),
                  run_config=RunConfig(name=name or f"{trainable_name}_"
                                       f"{time.strftime('%Y-%m-%d_%H-%M-%S')}",
                                       storage_path=local_dir, verbose=verbose))
    tuner._trainer.run_config.verbose = min(verbose, 1)
    grid = tuner.fit()
    if raise_on_failed_trial and grid.num_errors:
        failed: List[str] = [r.trial_id for r in grid if r.status == "FAILED"]
        raise TuneError(f"Trials did not complete: {', '.join(failed)} (see "
                        f"{os.path.join(grid.experiment_path, failed[0], 'error.txt')})")
    return ExperimentAnalysis(grid, metric, mode)
