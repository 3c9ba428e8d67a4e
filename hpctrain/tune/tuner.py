"""``Tuner`` and ``TuneConfig`` (Ray Tune 2's names), and the TOML route (``hpctrain sweep``).

A sweep is a directory of trials, each a normal hpctrain run with its own run directory
(see :mod:`.sweepdir`). Locally the trials run here; with a Slurm or PBS scheduler they run
as job arrays, one array task per trial, and ``fit()`` follows them to the end.
"""
from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass, fields, replace
from typing import Any, Dict, Optional, Tuple

import cloudpickle

from ..common.registry import is_local_path, storage_for
from ..config import RunConfig, ScalingConfig, default_storage_path
from ..errors import ConfigError
from ..function_trainer import FunctionTrainer
from ..run import Run, RunOptions, spec_of_trainer
from ..train import LegacyTrainable
from ..trainer import DataParallelTrainer
from ._control import TrialControl, ensure_trial_config, open_sweep, searching, tell_pending
from ._sweep import (at_a_time, local_concurrency, prepare_batch_trial, removed_on_failure,
                     run_local, submit_arrays, trial_context, worker_cpus)
from .resources import scaling_of
from .result_grid import ResultGrid, not_a_sweep
from .schedulers import check_scheduler
from .search.optuna import Searcher
from .sweepdir import SweepDir, follow, to_run, train_loop_config, trial_id
from hpctrain.common.log import get_logger, progress_line

_log = get_logger("tune")


@dataclass
class TuneConfig:
    """``metric``/``mode``: how ``ResultGrid.get_best_result()`` ranks trials (by default).
    ``num_samples``: how many times the grid is repeated (each repeat samples the random
    domains anew). ``max_concurrent_trials``: at most this many trials at once (the
    ``%K`` of a Slurm array; locally also bounded by the cores). ``seed``: the sampling
    seed (default: a fresh one, recorded in the sweep's manifest)."""

    metric: Optional[str] = None
    mode: Optional[str] = None
    num_samples: int = 1
    max_concurrent_trials: Optional[int] = None
    seed: Optional[int] = None
    #: a trial scheduler (:mod:`hpctrain.tune.schedulers`: ASHA, HyperBand, PBT)
    scheduler: Any = None
    #: a search algorithm (:class:`hpctrain.tune.search.optuna.OptunaSearch`)
    search_alg: Any = None
    #: Ray's actor reuse between trials: accepted and without effect (each trial is its own
    #: worker processes, or its own array task on a cluster; there is no actor to reuse)
    reuse_actors: Optional[bool] = None

    def __post_init__(self) -> None:
        self.scheduler = check_scheduler(self.scheduler)
        if self.search_alg is not None:

            if not isinstance(self.search_alg, Searcher):
                raise ConfigError(f"tune_config.search_alg: expected a search algorithm "
                                  f"(OptunaSearch), got {type(self.search_alg).__name__}",
                                  hint="from hpctrain.tune.search.optuna import OptunaSearch")
        if self.reuse_actors is not None and not isinstance(self.reuse_actors, bool):
            raise ConfigError(f"tune_config.reuse_actors: expected True, False or None, got "
                              f"{self.reuse_actors!r}")
        if self.mode is not None and self.mode not in ("min", "max"):
            raise ConfigError(f'tune_config.mode: expected "min" or "max", got {self.mode!r}')
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int) \
                or self.num_samples < 1:
            raise ConfigError(f"tune_config.num_samples: expected an integer ≥ 1, got "
                              f"{self.num_samples!r}")
        m = self.max_concurrent_trials
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ConfigError(f"tune_config.max_concurrent_trials: expected an integer ≥ 1 "
                              f"or None, got {m!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or
                                      not isinstance(self.seed, int) or self.seed < 0):
            raise ConfigError(f"tune_config.seed: expected an integer ≥ 0, got {self.seed!r}")

    def settings(self) -> Dict[str, Any]:
        return {"metric": self.metric, "mode": self.mode,
                "max_concurrent_trials": self.max_concurrent_trials}


class Tuner:
    """Runs one trial per config of ``param_space`` and returns a :class:`ResultGrid`.

    ``trainable``: a trainer (``TorchTrainer(...)``; ``param_space={"train_loop_config":
    {...}}`` is merged over its ``train_loop_config``), a training function (run as a
    1-worker :class:`~hpctrain.function_trainer.FunctionTrainer`: no framework is set up;
    the space is its config), or the seed-era
    ``Trainer.to_tune_trainable(train_func)``. ``run_config``: the sweep's name and
    storage path (default: the trainer's); trials go to ``<storage>/<name>/trial_NNNNN``.
    Running a sweep again with the same name continues it: finished trials are kept,
    the others run (from their latest checkpoint)."""

    def __init__(self, trainable: Any = None, *, param_space: Optional[Dict[str, Any]] = None,
                 tune_config: Optional[TuneConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 _tuner_kwargs: Optional[Dict[str, Any]] = None):
        check_tuner_kwargs(_tuner_kwargs)
        self.tune_config = tune_config or TuneConfig()
        if not isinstance(self.tune_config, TuneConfig):
            raise ConfigError(f"tune_config: expected a TuneConfig, got "
                              f"{type(self.tune_config).__name__}")
        self.param_space = dict(param_space or {})
        self._trainer, self._shape, self._options = _as_trainer(trainable, self.param_space)
        self.run_config = run_config
        self._restored = False
        self._retry_failed = False
        name = (run_config.name if run_config and run_config.name else
                self._trainer.run_config.name) or \
            f"{getattr(trainable, '__name__', type(trainable).__name__)}_" \
            f"{time.strftime('%Y-%m-%d_%H-%M-%S')}"
        storage = (run_config.storage_path if run_config and run_config.storage_path else
                   self._trainer.run_config.storage_path) or default_storage_path()
        storage = os.path.expandvars(os.path.expanduser(storage))
        kind = storage_for(storage)
        #: the sweep's data location on a storage kind that is not posix (s3://…/name), whose
        #: trials' checkpoints go there; the sweep directory (``_path``) is then its
        #: control directory, which holds the trials' control directories
        self._data: Optional[str] = None
        if kind.local:
            self._path = os.path.join(os.path.abspath(storage), name)
        else:
            self._data = kind.run_location(storage, name)
            self._path = kind.control_dir(self._data)

    @property
    def experiment_path(self) -> str:
        return self._path

    # -- restore ---------------------------------------------------------------------------
    @classmethod
    def can_restore(cls, path: str | os.PathLike) -> bool:
        return SweepDir.is_sweep(path)

    @classmethod
    def restore(cls, path: str | os.PathLike, trainable: Any, *,
                resume_errored: bool = False) -> "Tuner":
        """Continue the sweep at ``path``: its trials keep their configs; ``fit()`` runs the
        ones that did not finish (and the errored ones with ``resume_errored``)."""
        path = os.fspath(path)
        if not is_local_path(path):  # its location: the control directory
            parent, _, name = path.rstrip("/").rpartition("/")
            return cls._restored_at(SweepDir(storage_for(path).control_dir(path)), trainable,
                                    resume_errored, parent)
        return cls._restored_at(SweepDir(path), trainable, resume_errored, None)

    @classmethod
    def _restored_at(cls, sweep: SweepDir, trainable: Any, resume_errored: bool,
                     parent: Optional[str]) -> "Tuner":
        if not sweep.exists():
            raise not_a_sweep(sweep.path, "Tuner.restore")
        m = sweep.read()
        tuner = cls(trainable, param_space=None, tune_config=TuneConfig(
            metric=m.get("metric"), mode=m.get("mode"),
            max_concurrent_trials=m.get("max_concurrent_trials")),
            run_config=RunConfig(name=sweep.name,
                                 storage_path=parent or os.path.dirname(sweep.path)))
        tuner._restored = True
        tuner._retry_failed = resume_errored
        return tuner

    # -- fit ---------------------------------------------------------------------------------
    def _manifest(self, sweep: SweepDir) -> Dict[str, Any]:
        if self._restored:
            return sweep.read()
        tc = self.tune_config
        return open_sweep(sweep, self._control(), space=self.param_space,
                          num_samples=tc.num_samples, seed=tc.seed, settings=tc.settings())

    def _control(self) -> TrialControl:
        """The scheduler, stopping criteria and search algorithm every trial consults."""
        tc = self.tune_config
        rc = self.run_config or self._trainer.run_config
        stop = rc.stop if rc.stop is not None else self._trainer.run_config.stop
        if tc.scheduler is not None:
            tc.scheduler.set_search_properties(tc.metric, tc.mode)
        if tc.search_alg is not None:
            tc.search_alg.set_search_properties(tc.metric, tc.mode, self.param_space)
        return TrialControl(scheduler=tc.scheduler, stop=stop, search_alg=tc.search_alg,
                            metric=tc.metric, mode=tc.mode, shape=self._shape)

    def _trial_run(self, sweep: SweepDir, index: int, config: Dict[str, Any]) -> Run:
        """Trial ``index``'s :class:`~hpctrain.run.Run`: the trainer with the trial's
        config, in the trial's directory."""
        base = self._trainer
        changes: Dict[str, Any] = {
            "train_loop_config": train_loop_config(base.train_loop_config, config, self._shape)}
        if self._shape == "train_loop_config":
            changes["scaling_config"] = trial_scaling(base.scaling_config, config)
        # each trial its own callbacks: trials side by side must not share a writer
        # or a tracking run (a pickle round trip, as a batch trial gets them)
        callbacks = cloudpickle.loads(cloudpickle.dumps(list(base.run_config.callbacks or [])))
        changes["run_config"] = replace(base.run_config, name=trial_id(index),
                                        storage_path=self._data or sweep.path, verbose=0,
                                        callbacks=callbacks)
        # on an object store: the trial's location there, whose control directory is
        # sweep.trial_path(index)
        path = f"{self._data}/{trial_id(index)}" if self._data else sweep.trial_path(index)
        return Run.for_trainer(base.with_configs(**changes),
                               replace(self._options, path=path,
                                       trial=trial_context(sweep, index)))

    def fit(self) -> ResultGrid:
        """Run (or submit and follow) every trial that did not finish; return the
        ResultGrid. A trial that fails is in ``ResultGrid.errors``; fit() itself raises
        only for bad input. Ctrl-C stops local trials (batch jobs: detaches); the
        warning signal (``failure_config.warning_signal``, fit() inside a batch job) stops
        them cleanly at a checkpoint (STOPPED; fit() again continues them)."""
        sweep = SweepDir(self._path)
        fresh = not os.path.exists(sweep.path)
        spec = spec_of_trainer(self._trainer)
        batch = spec.scheduler.kind != "local" and not self._options.local_only
        if batch and ("scaling_config" in self.param_space or any(
                "scaling_config" in t["config"] for t in sweep.read().get("trials", []))):
            raise ConfigError(
                "param_space.scaling_config: a batch sweep is one job array, whose tasks all "
                "get the same allocation; its trials cannot differ in scaling",
                hint="one Tuner per scaling config, or run the sweep inside one allocation "
                     "(scheduler=\"local\" in a batch job)")
        m = self._manifest(sweep)
        tell_pending(sweep.path)
        configs = {t["index"]: t["config"] for t in m["trials"]}
        indices = to_run(sweep, m, retry_failed=self._retry_failed)
        verbose = (self.run_config or self._trainer.run_config).verbose
        make = lambda i: self._trial_run(sweep, i, configs[i])  # noqa: E731
        if not batch:
            if searching(sweep.path):  # each trial asks for its config as it starts
                make = lambda i: self._trial_run(  # noqa: E731
                    sweep, i, ensure_trial_config(sweep.path, i))
            s = self._largest_scaling(configs)
            n = local_concurrency(s.num_workers, worker_cpus(s),
                                  self.tune_config.max_concurrent_trials, s.gpus_each)
            if verbose >= 1:
                progress_line(f"[hpctrain] sweep {sweep.name}: {len(indices)} of "
                              f"{len(configs)} trials to run here, "
                              f"{at_a_time(n, s.gpus_each)} ({sweep.path})", stdout=True)
            run_local(sweep, indices, make, concurrency=n, verbose=verbose,
                      warning_signal=self._trainer.run_config.failure_config.warning_signal)
        elif indices:
            base = copy.deepcopy(spec)
            base.run.name, base.run.storage_path = sweep.name, os.path.dirname(sweep.path)

            def prepare(i: int) -> None:
                prepare_batch_trial(make(i), sweep)

            with removed_on_failure(sweep, fresh):
                arrays = submit_arrays(sweep, base, indices, prepare_trial=prepare,
                                       max_concurrent=self.tune_config.max_concurrent_trials,
                                       rerender="(submitted from Python: hpctrain.tune.Tuner)")
            if verbose >= 1:
                progress_line(
                    f"[hpctrain] sweep {sweep.name}: submitted {len(indices)} trials as "
                    + ", ".join(f"{a['scheduler']} job array {a['job_id']}" for a in arrays)
                    + f" ({sweep.path})", stdout=True)
            follow(sweep, verbose=verbose)
        sweep.refresh()
        return ResultGrid.from_path(sweep.path)

    def _largest_scaling(self, configs: Dict[int, Dict[str, Any]]) -> Any:
        """The ScalingConfig of the trial that needs the most cores (the side-by-side
        count is made for it)."""
        if self._shape != "train_loop_config":
            return self._trainer.scaling_config
        scalings = [trial_scaling(self._trainer.scaling_config, c) for c in configs.values()]
        return max(scalings, key=lambda s: (s.num_workers * (s.cpus_each or 1), s.gpus_each),
                   default=self._trainer.scaling_config)

    def get_results(self) -> ResultGrid:
        return ResultGrid.from_path(self._path)


#: the space into the trainer's arguments of that name).
TUNABLE = ("train_loop_config", "scaling_config")


def check_tuner_kwargs(kwargs: Optional[Dict[str, Any]]) -> None:
    """Ray's private ``Tuner(_tuner_kwargs=...)``: only ``fail_fast``, which is not
    supported (every trial runs to its end; ``ResultGrid.errors`` lists the failures): a
    true value is said, once, in a warning."""
    extra = sorted(set(kwargs or {}) - {"fail_fast"})
    if extra:
        raise ConfigError(f"Tuner(_tuner_kwargs=...): {', '.join(repr(k) for k in extra)} "
                          f"not supported; expected only 'fail_fast'")
    if (kwargs or {}).get("fail_fast"):
        _log.warning("Tuner(_tuner_kwargs={'fail_fast': ...}): not supported here; a failed "
                     "trial does not stop the others (ResultGrid.errors lists the failures)")


def scaling_space(value: Any) -> Dict[str, Any]:
    """``param_space["scaling_config"]`` as a table of ScalingConfig fields (what
    sweep.json records): a ScalingConfig (its fields that differ from the defaults,
    search domains included) or a dict of fields. Each trial's ScalingConfig is made from
    its resolved table alone, as Ray does: it replaces the trainer's."""
    if isinstance(value, ScalingConfig):
        return {f.name: getattr(value, f.name) for f in fields(value)
                if getattr(value, f.name) != f.default}
    if isinstance(value, dict):
        known = {f.name for f in fields(ScalingConfig)}
        unknown = [k for k in value if k not in known]
        if unknown:
            raise ConfigError(f"param_space.scaling_config: unknown field(s) "
                              f"{', '.join(map(repr, unknown))}",
                              hint="the fields of ScalingConfig: " + ", ".join(sorted(known)))
        return dict(value)
    raise ConfigError(f"param_space.scaling_config: expected a ScalingConfig (or a dict of its "
                      f"fields), got {type(value).__name__}",
                      hint="param_space={\"scaling_config\": ScalingConfig(num_workers="
                           "tune.grid_search([1, 2]))}")


def trial_scaling(base: Any, config: Dict[str, Any]) -> Any:
    """A trial's ScalingConfig: made from its resolved ``scaling_config`` table, else the
    trainer's own."""
    table = config.get("scaling_config")
    return base if table is None else ScalingConfig(**table)


def _as_trainer(trainable: Any, param_space: Dict[str, Any]) -> Tuple[Any, str, RunOptions]:
    """``(trainer, config shape, the trials' run options)`` for what a Tuner was given."""
    if isinstance(trainable, DataParallelTrainer):
        extra = [k for k in param_space if k not in TUNABLE]
        if extra:
            raise ConfigError(f"param_space: {', '.join(repr(k) for k in extra)} cannot be "
                              "tuned here; expected \"train_loop_config\" and "
                              "\"scaling_config\"",
                              hint="put the values to search in param_space="
                                   "{\"train_loop_config\": {...}}")
        if not isinstance(param_space.get("train_loop_config", {}), dict):
            raise ConfigError("param_space.train_loop_config: expected a dict")
        if "scaling_config" in param_space:
            param_space["scaling_config"] = scaling_space(param_space["scaling_config"])
        options = (copy.copy(trainable.restored.options) if trainable.restored is not None
                   else RunOptions())
        return trainable, "train_loop_config", options
    if isinstance(trainable, LegacyTrainable):
        return trainable.trainer(), "flat", trainable.run_options()
    if callable(trainable):
        # no framework, no process group: Ray runs a function trainable in a plain actor
        return FunctionTrainer(trainable,
                               scaling_config=scaling_of(trainable) or ScalingConfig(num_workers=1),
                               run_config=RunConfig()), "flat", RunOptions()
    raise ConfigError(f"trainable: expected a trainer (e.g. TorchTrainer(...)), a training "
                      f"function or Trainer.to_tune_trainable(...), got "
                      f"{type(trainable).__name__}")
