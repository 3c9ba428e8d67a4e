"""``Tuner`` and ``TuneConfig`` (Ray Tune 2's names), and the TOML route (``hpctrain sweep``).

A sweep is a directory of trials, each a normal hpctrain run with its own run directory
(see :mod:`._sweep`). Locally the trials run here; with a Slurm or PBS scheduler they run
as job arrays, one array task per trial, and ``fit()`` follows them to the end.
"""
from __future__ import annotations

import contextlib
import copy
import os
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import cloudpickle

from ..config import RunConfig, default_storage_path
from ..errors import ConfigError
from ..run import Run, RunOptions, spec_of_trainer
from . import search
from ._sweep import (SweepDir, local_concurrency, open_manifest, run_local, submit_arrays,
                     to_run, train_loop_config, trial_id)
from ._control import (TrialControl, ensure_trial_config, searching, tell_pending,
                       write_control)
from .result_grid import ResultGrid

if TYPE_CHECKING:  # (for the hints only)
    from hpctrain.spec import JobSpec


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

    def __post_init__(self) -> None:
        from .schedulers import check_scheduler

        self.scheduler = check_scheduler(self.scheduler)
        if self.search_alg is not None:
            from .search.optuna import Searcher

            if not isinstance(self.search_alg, Searcher):
                raise ConfigError(f"tune_config.search_alg: expected a search algorithm "
                                  f"(OptunaSearch), got {type(self.search_alg).__name__}",
                                  hint="from hpctrain.tune.search.optuna import OptunaSearch")
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


def _trainer_classes():
    from ..trainer import DataParallelTrainer

    return DataParallelTrainer


class Tuner:
    """Runs one trial per config of ``param_space`` and returns a :class:`ResultGrid`.

    ``trainable``: a trainer (``TorchTrainer(...)``; ``param_space={"train_loop_config":
    {...}}`` is merged over its ``train_loop_config``), a training function (run as a
    1-worker ``TorchTrainer``; the space is its config), or the seed-era
    ``Trainer.to_tune_trainable(train_func)``. ``run_config``: the sweep's name and
    storage path (default: the trainer's); trials go to ``<storage>/<name>/trial_NNNNN``.
    Running a sweep again with the same name continues it: finished trials are kept,
    the others run (from their latest checkpoint)."""

    def __init__(self, trainable: Any = None, *, param_space: Optional[Dict[str, Any]] = None,
                 tune_config: Optional[TuneConfig] = None,
                 run_config: Optional[RunConfig] = None):
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
        self._path = os.path.join(os.path.abspath(os.path.expandvars(os.path.expanduser(
            storage))), name)

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
        sweep = SweepDir(path)
        if not sweep.exists():
            from .result_grid import not_a_sweep

            raise not_a_sweep(sweep.path, "Tuner.restore")
        m = sweep.read()
        tuner = cls(trainable, param_space=None, tune_config=TuneConfig(
            metric=m.get("metric"), mode=m.get("mode"),
            max_concurrent_trials=m.get("max_concurrent_trials")),
            run_config=RunConfig(name=sweep.name, storage_path=os.path.dirname(sweep.path)))
        tuner._restored = True
        tuner._retry_failed = resume_errored
        return tuner

    # -- fit ---------------------------------------------------------------------------------
    def _manifest(self, sweep: SweepDir) -> Dict[str, Any]:
        if self._restored:
            return sweep.read()
        tc = self.tune_config
        space = self.param_space
        control = self._control()
        fresh = not sweep.exists()
        settings = tc.settings()
        if control.scheduler is not None:
            settings["scheduler"] = control.scheduler.describe()
        if control.search_alg is not None:
            settings["search_alg"] = type(control.search_alg).__name__
        if isinstance(control.stop, dict):
            settings["stop"] = control.stop
        searched = control.search_alg is not None
        m = open_manifest(
            sweep, space=space,
            expand_fn=lambda seed: ([{} for _ in range(search.count(space, tc.num_samples))]
                                    if searched else search.expand(space, tc.num_samples,
                                                                   seed)),
            fingerprint=search.fingerprint(space, tc.num_samples),
            num_samples=tc.num_samples, seed=tc.seed, tune=settings, shape=self._shape,
            space_tables=search.to_tables(space))
        if fresh and searched:
            with sweep.update() as fresh_m:  # their configs are asked for as they start
                for t in fresh_m["trials"]:
                    t["suggested"] = False
            m = sweep.read()
        if fresh or control.active:
            # (a re-run with no scheduler given keeps the sweep's)
            write_control(sweep.path, control)
        return m

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
                                        storage_path=sweep.path, verbose=0, callbacks=callbacks)
        return Run.for_trainer(base.with_configs(**changes),
                               replace(self._options, path=sweep.trial_path(index),
                                       trial=_trial_context(sweep, index)))

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
            n = local_concurrency(s.num_workers, s.cpus_per_worker,
                                  self.tune_config.max_concurrent_trials, s.gpus_each)
            if verbose >= 1:
                print(f"[hpctrain] sweep {sweep.name}: {len(indices)} of {len(configs)} "
                      f"trials to run here, {_at_a_time(n, s.gpus_each)} ({sweep.path})",
                      flush=True)
            run_local(sweep, indices, make, concurrency=n, verbose=verbose,
                      warning_signal=self._trainer.run_config.failure_config.warning_signal)
        elif indices:
            from ._sweep import follow

            base = copy.deepcopy(spec)
            base.run.name, base.run.storage_path = sweep.name, os.path.dirname(sweep.path)

            def prepare(i: int) -> None:
                _prepare_batch_trial(make(i), sweep)

            with _removed_on_failure(sweep, fresh):
                arrays = submit_arrays(sweep, base, indices, prepare_trial=prepare,
                                       max_concurrent=self.tune_config.max_concurrent_trials,
                                       rerender="(submitted from Python: hpctrain.tune.Tuner)")
            if verbose >= 1:
                print(f"[hpctrain] sweep {sweep.name}: submitted {len(indices)} trials as "
                      + ", ".join(f"{a['scheduler']} job array {a['job_id']}" for a in arrays)
                      + f" ({sweep.path})", flush=True)
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


@contextlib.contextmanager
def _removed_on_failure(sweep: SweepDir, fresh: bool):
    """When the submission fails (an array refused, Ctrl-C): a sweep directory it created
    is removed again if no array was submitted yet (nothing is left behind); otherwise it
    stays, for the submitted arrays' tasks, and the user is told what runs and what not."""
    before = len(sweep.read().get("arrays", []))
    try:
        yield
    except BaseException:
        sent = sweep.read().get("arrays", [])[before:]
        if fresh and not sent:
            import shutil

            shutil.rmtree(sweep.path, ignore_errors=True)
        elif sent:
            import sys

            from ._sweep import array_ranges

            trials = [i for a in sent for i in a["trials"]]
            print(f"[hpctrain] the submission failed after {len(sent)} job array(s) "
                  f"({', '.join(a['job_id'] for a in sent)}, trials {array_ranges(trials)}) "
                  f"were submitted; they run. The sweep directory is kept: {sweep.path}\n"
                  "  the other trials are submitted when the sweep runs again, after those "
                  "arrays ended", file=sys.stderr, flush=True)
        raise


def _prepare_batch_trial(trial: Run, sweep: SweepDir) -> None:
    """A trial's run directory for a batch job: payload, spec.toml and its own job.sh
    (the trial alone: what a resubmission after a stop submits)."""
    from hpctrain._internal.fsutil import atomic_write_bytes
    from ..schedulers import BatchRequest

    run = trial.run_dir
    run.create(trial.spec.run.share)
    with run.exclusive():
        trial.prepare()
        script = BatchRequest(trial.spec, run.path,
                              rerender=f"(a trial of the sweep {sweep.path})").materialize()
        atomic_write_bytes(run.job_script, script.encode(), sync=False, mode=run.script_mode)


#: The trainer's constructor arguments a param_space may hold (Ray merges each key of
#: the space into the trainer's arguments of that name).
TUNABLE = ("train_loop_config", "scaling_config")


def scaling_space(value: Any) -> Dict[str, Any]:
    """``param_space["scaling_config"]`` as a table of ScalingConfig fields (what
    sweep.json records): a ScalingConfig (its fields that differ from the defaults,
    search domains included) or a dict of fields. Each trial's ScalingConfig is made from
    its resolved table alone, as Ray does: it replaces the trainer's."""
    from dataclasses import fields

    from ..config import ScalingConfig

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
    from ..config import ScalingConfig

    table = config.get("scaling_config")
    return base if table is None else ScalingConfig(**table)


def _as_trainer(trainable: Any, param_space: Dict[str, Any]) -> Tuple[Any, str, RunOptions]:
    """``(trainer, config shape, the trials' run options)`` for what a Tuner was given."""
    from ..train import LegacyTrainable

    DataParallelTrainer = _trainer_classes()
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
        from .. import ScalingConfig
        from ..torch import TorchTrainer

        return TorchTrainer(trainable, scaling_config=ScalingConfig(num_workers=1),
                            run_config=RunConfig()), "flat", RunOptions()
    raise ConfigError(f"trainable: expected a trainer (e.g. TorchTrainer(...)), a training "
                      f"function or Trainer.to_tune_trainable(...), got "
                      f"{type(trainable).__name__}")


# --------------------------------------------------------------------------- TOML
def space_of(spec: JobSpec) -> Dict[str, Any]:
    from ..spec import Ctx

    ctx = Ctx(spec.source, spec.origins)
    return {"train_loop_config": search.from_tables(
        spec.sweep.get("param_space", {}), "sweep.param_space", ctx.error)}


def manifest_from_spec(sweep: SweepDir, spec: JobSpec) -> Dict[str, Any]:
    """Create (or check and open) the manifest of the sweep a spec's ``[sweep]`` describes;
    the seed it used is written into ``spec.sweep``."""
    from ._sweep import check_json

    sw = spec.sweep
    check_json(sw.get("param_space", {}), "sweep.param_space", spec.source)  # (TOML dates)
    space = space_of(spec)
    n = sw.get("num_samples", 1)
    control = control_from_spec(spec, space)
    searched = control.search_alg is not None
    fresh = not sweep.exists()
    settings = {"metric": sw.get("metric"), "mode": sw.get("mode"),
                "max_concurrent_trials": sw.get("max_concurrent_trials")}
    if control.scheduler is not None:
        settings["scheduler"] = control.scheduler.describe()
    if searched:
        settings["search_alg"] = type(control.search_alg).__name__
    if control.stop:
        settings["stop"] = control.stop
    m = open_manifest(sweep, space=space,
                      expand_fn=lambda seed: ([{} for _ in range(search.count(space, n))]
                                              if searched else search.expand(space, n, seed)),
                      fingerprint=search.fingerprint(space, n), num_samples=n,
                      seed=sw.get("seed"), tune=settings,
                      shape="train_loop_config", space_tables=search.to_tables(space),
                      where="sweep.param_space", file=spec.source)
    if fresh and searched:
        with sweep.update() as fresh_m:  # their configs are asked for as they start
            for t in fresh_m["trials"]:
                t["suggested"] = False
        m = sweep.read()
    if fresh or control.active:
        write_control(sweep.path, control)
    spec.sweep["seed"] = m["seed"]
    return m


def control_from_spec(spec: JobSpec, space: Dict[str, Any]) -> TrialControl:
    """The scheduler, search algorithm and stopping criteria of a job file's ``[sweep]``."""
    from ._toml import build

    sw = spec.sweep

    def error(key: str, message: str, hint: Optional[str] = None) -> Exception:
        return ConfigError(f"{key}: {message}", file=spec.source, hint=hint)

    scheduler = build(sw["scheduler"], "sweep.scheduler", error) if sw.get("scheduler") \
        else None
    search_alg = build(sw["search_alg"], "sweep.search_alg", error) \
        if sw.get("search_alg") else None
    try:
        if scheduler is not None:
            scheduler.set_search_properties(sw.get("metric"), sw.get("mode"))
        if search_alg is not None:
            search_alg.set_search_properties(sw.get("metric"), sw.get("mode"), space)
    except ConfigError as e:
        raise ConfigError(e.message.replace("tune_config.", "sweep."), file=spec.source,
                          hint=(e.hint or "").replace("TuneConfig", "[sweep]")) from None
    return TrialControl(scheduler=scheduler, stop=sw.get("stop") or None,
                        search_alg=search_alg, metric=sw.get("metric"), mode=sw.get("mode"),
                        shape="train_loop_config")


def sweep_path_of(spec: JobSpec) -> str:
    """``<storage_path>/<run.name>`` (a fresh timestamped name when none is given)."""
    storage = os.path.expandvars(os.path.expanduser(spec.run.storage_path or
                                                    default_storage_path()))
    if spec.run.name is None:
        spec.run.name = f"sweep_{time.strftime('%Y-%m-%d_%H-%M-%S')}_{os.getpid() % 10000:04d}"
    return os.path.join(os.path.abspath(storage), spec.run.name)


def _spec_trial(spec: JobSpec, sweep: SweepDir, index: int, config: Dict[str, Any],
                local: bool) -> Run:
    """Trial ``index``'s :class:`~hpctrain.run.Run` of a job file's sweep."""
    from ._batch import trial_spec

    one = trial_spec(spec, sweep, index, config)
    one.run.verbose = 0
    return Run.from_spec(one, RunOptions(path=sweep.trial_path(index), local_only=local,
                                         trial=_trial_context(sweep, index)))


def _trial_context(sweep: SweepDir, index: int) -> Dict[str, str]:
    """What a trial's ``get_context()`` says: the sweep's name as the experiment name,
    the trial's id (its directory name, as in ``sweep.json``) as its id and name."""
    return {"experiment_name": sweep.name, "trial_id": trial_id(index),
            "trial_name": trial_id(index)}


def render_from_spec(spec: JobSpec, rerender: str) -> List[str]:
    """``hpctrain sweep --dry-run``: the array scripts a submission would submit (every
    trial of a new sweep, or the unfinished ones of an existing one); writes nothing."""
    from ._sweep import max_array_size, render_arrays, split_arrays

    sweep = SweepDir(sweep_path_of(spec))
    if sweep.exists():
        m = sweep.read()
        spec.sweep["seed"] = m["seed"]
        indices = to_run(sweep, m)
    else:
        if spec.sweep.get("seed") is None:
            import secrets

            spec.sweep["seed"] = secrets.randbelow(2 ** 31)
        indices = list(range(search.count(space_of(spec), spec.sweep.get("num_samples", 1))))
    return render_arrays(spec, sweep, split_arrays(indices, max_array_size(spec)),
                         max_concurrent=spec.sweep.get("max_concurrent_trials"),
                         rerender=rerender)


def run_spec(spec: JobSpec, *, rerender: str, local: bool, follow: bool = True,
             retry_failed: bool = False, verbose: int = 1) -> Tuple[SweepDir, bool]:
    """``hpctrain sweep job.toml``: run the spec's sweep here (``local``) or submit it as job
    arrays (and follow it with ``follow``). Returns the sweep directory, and True when
    the local trials were stopped by the warning signal."""
    from ._sweep import follow as follow_sweep

    from hpctrain._internal.rundir.checks import check_shared_storage, ensure_storage_dir

    sweep = SweepDir(sweep_path_of(spec))
    if not (local or spec.scheduler.kind == "local"):
        check_shared_storage(spec, sweep.path)  # every trial's run directory is under it
    ensure_storage_dir(os.path.dirname(sweep.path), spec)
    fresh = not os.path.exists(sweep.path)
    m = manifest_from_spec(sweep, spec)
    tell_pending(sweep.path)
    configs = {t["index"]: t["config"] for t in m["trials"]}
    indices = to_run(sweep, m, retry_failed=retry_failed)
    if local or spec.scheduler.kind == "local":
        config_of = (lambda i: ensure_trial_config(sweep.path, i)) if searching(sweep.path) \
            else configs.__getitem__
        s = spec.scaling
        n = local_concurrency(s.num_workers, s.cpus_per_worker,
                              spec.sweep.get("max_concurrent_trials"), s.gpus_each)
        if verbose:
            print(f"[hpctrain] sweep {sweep.name}: {len(indices)} of {len(configs)} trials to "
                  f"run here, {_at_a_time(n, s.gpus_each)} ({sweep.path})", flush=True)
        stopped = run_local(sweep, indices,
                            lambda i: _spec_trial(spec, sweep, i, config_of(i), True),
                            concurrency=n, verbose=verbose,
                            warning_signal=spec.run.failure_config.warning_signal)
        return sweep, stopped
    if not indices:
        if verbose:
            print(f"[hpctrain] sweep {sweep.name}: every trial has finished; nothing to submit")
        return sweep, False

    def prepare(i: int) -> None:
        _prepare_batch_trial(_spec_trial(spec, sweep, i, configs[i], False), sweep)

    with _removed_on_failure(sweep, fresh):
        arrays = submit_arrays(sweep, spec, indices, prepare_trial=prepare,
                               max_concurrent=spec.sweep.get("max_concurrent_trials"),
                               rerender=rerender)
    for a in arrays:
        print(f"submitted {a['scheduler']} job array {a['job_id']} (trials "
              f"{array_ranges_of(a)})")
    print(f"sweep directory: {sweep.path}")
    print(f"  hpctrain results {sweep.path}")
    if follow:
        follow_sweep(sweep, verbose=verbose)
    return sweep, False


def _at_a_time(n: int, gpus_each: int) -> str:
    return f"{n} at a time" + (" (their workers use GPUs: one trial at a time)"
                               if gpus_each and n == 1 else "")


def array_ranges_of(record: Dict[str, Any]) -> str:
    from ._sweep import array_ranges

    return array_ranges(record["trials"])
