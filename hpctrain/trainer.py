"""``DataParallelTrainer``: the driver side of a run.

``fit()`` builds a :class:`~hpctrain.run.Run` of the trainer: the configs resolved into one
:class:`~hpctrain.spec.JobSpec`, the run directory prepared (spec.toml, the pickled
training function), then the run handed to the supervisor — in this process for the local
default, in the batch job on a cluster — and the :class:`~hpctrain.Result` read back from
the run directory.
"""
from __future__ import annotations

import copy
import os
import time
from typing import Any, Callable, Dict, Optional

from hpctrain._internal.rundir.layout import RunDir
from ._internal.worker.entry import WorkerPayload
from .checkpoint import Checkpoint
from .config import DataConfig, RunConfig, ScalingConfig, default_storage_path
from .errors import ConfigError
from .result import Result
from .run import FROM_PYTHON, Run, RunOptions
from ._internal.registry import SCHEDULERS, storage_for  # the registry's names


class DataParallelTrainer:
    """Runs ``train_loop_per_worker`` on ``scaling_config.num_workers`` ranks."""

    _backend_name = "torch"
    #: the backend's config dataclass (TorchConfig, …), set by each framework's trainer
    _backend_config_cls: Any = None

    @classmethod
    def _backend_config(cls, value: Any, keyword: str) -> Any:
        """``value`` for the trainer's ``<framework>_config=`` keyword: a
        ``_backend_config_cls`` instance, or its defaults for None; anything else is
        refused, naming the keyword."""
        expected = cls._backend_config_cls
        if value is None:
            return expected()
        if not isinstance(value, expected):
            name = expected.__name__
            article = "an" if name[:1] in "AEIOU" or name.startswith("MPI") else "a"
            raise ConfigError(f"{keyword}: expected {article} {name}, got {type(value).__name__}")
        return value

    def __init__(self, train_loop_per_worker: Callable, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 backend_config: Any = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 scheduler: Any = None, site: Optional[str] = None,
                 metadata: Optional[Dict[str, Any]] = None):
        if not callable(train_loop_per_worker) and not hasattr(train_loop_per_worker, "resolve"):
            raise TypeError("train_loop_per_worker must be a function, got "
                            f"{type(train_loop_per_worker).__name__}")
        if train_loop_config is not None and not isinstance(train_loop_config, dict):
            raise ConfigError(f"train_loop_config: expected a dict, got {type(train_loop_config).__name__}")
        if resume_from_checkpoint is not None and not isinstance(resume_from_checkpoint, Checkpoint):
            raise ConfigError("resume_from_checkpoint: expected a hpctrain.Checkpoint, got "
                              f"{type(resume_from_checkpoint).__name__}")
        if getattr(scaling_config, "_search_space", False):
            raise ConfigError(
                "scaling_config: holds a search space (tune.grid_search, tune.choice…), "
                "which only a Tuner resolves",
                hint="Tuner(trainer, param_space={\"scaling_config\": ScalingConfig("
                     "num_workers=tune.grid_search([1, 2]))})")
        self.metadata = _checked_metadata(metadata)
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = train_loop_config
        self.backend_config = backend_config
        self.scaling_config = scaling_config or ScalingConfig()
        self.run_config = run_config or RunConfig()
        self.resume_from_checkpoint = resume_from_checkpoint
        self.datasets = {}
        if datasets:
            from .data import as_datasets

            self.datasets = as_datasets(datasets)
        if dataset_config is None:
            dataset_config = DataConfig()
        elif not isinstance(dataset_config, DataConfig):
            raise ConfigError("dataset_config: expected a hpctrain.DataConfig, got "
                              f"{type(dataset_config).__name__}",
                              hint='e.g. dataset_config=DataConfig(datasets_to_split=["train"])')
        dataset_config.check_names(list(self.datasets))
        self.dataset_config = dataset_config
        from .config import SchedulerConfig

        if scheduler is None:
            scheduler = SchedulerConfig(kind="local")
        elif isinstance(scheduler, str):
            if scheduler not in SCHEDULERS:
                raise ConfigError(f"scheduler: expected one of {', '.join(SCHEDULERS)} or a "
                                  f"SchedulerConfig, got {scheduler!r}")
            scheduler = SchedulerConfig(kind=scheduler)
        elif not isinstance(scheduler, SchedulerConfig):
            raise ConfigError("scheduler: expected \"local\", \"slurm\", \"pbs\" or a "
                              f"SchedulerConfig, got {type(scheduler).__name__}")
        self.scheduler = scheduler
        self.site = site
        self._spec = None  # a JobSpec loaded from TOML (trainer_from_spec): used as is
        self._spec_layer: Dict[str, Any] = {}  # [setup]/[env] of a restored batch run
        # the run restore() continues: its directory, trial and payload options
        self._restored: Optional[RunOptions] = None

    @property
    def run_options(self) -> RunOptions:
        """The :class:`~hpctrain.run.RunOptions` ``fit()`` runs with: those of the run
        :meth:`restore` continues (its directory…), else the defaults. A copy."""
        return copy.copy(self._restored) if self._restored is not None else RunOptions()

    def with_configs(self, **changes: Any) -> "DataParallelTrainer":
        """A copy of this trainer with some of its configs replaced
        (``train_loop_config=``, ``scaling_config=``, ``run_config=``): what a sweep's
        trial runs. The copy's spec is made from its configs: a job file's spec (of
        ``trainer_from_spec``), which they no longer match, is not kept."""
        allowed = ("train_loop_config", "scaling_config", "run_config")
        unknown = [k for k in changes if k not in allowed]
        if unknown:
            raise TypeError(f"with_configs: unexpected {', '.join(unknown)}; expected "
                            f"{', '.join(allowed)}")
        t = copy.copy(self)
        for key, value in changes.items():
            setattr(t, key, value)
        t._spec = None
        return t

    # -- the run directory ---------------------------------------------------------------
    @property
    def run_name(self) -> str:
        if self._restored is not None and self._restored.path:
            return os.path.basename(self._restored.path)
        if self.run_config.name is None:
            stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
            self.run_config.name = f"{type(self).__name__}_{stamp}_{os.getpid() % 10000:04d}"
        return self.run_config.name

    @property
    def run_path(self) -> str:
        if self._restored is not None and self._restored.path:
            return self._restored.path
        storage = os.path.expandvars(os.path.expanduser(
            self.run_config.storage_path or default_storage_path()))
        # posix: <storage_path>/<name>; another storage kind: the run's location there
        return storage_for(storage).run_location(storage, self.run_name)

    def job_spec(self):
        """The resolved :class:`~hpctrain.spec.JobSpec`: the one loaded from TOML, or one
        built from the Python configs layered over the site config (when ``site``)."""
        if self._spec is not None:
            return self._spec
        spec = self._python_spec()
        if self.site is None and self.scheduler.kind == "local":
            return spec
        from .spec import merge_layers, spec_from_dict

        layers = []
        site = None
        if self.site is not None:
            from .spec import load_site

            site = load_site(self.site, key="site", file="TorchTrainer(site=...)")
            layers.append((site.layer, site.path))
        from .userconfig import load_user_defaults

        layers.extend(load_user_defaults().layer(storage=False))  # the user's account
        if self._spec_layer:
            layers.append((self._spec_layer, os.path.join(self.run_path, "spec.toml")))
        data = spec.to_toml_dict()
        if self.site is not None and self.scheduler.kind == "local":
            data.get("scheduler", {}).pop("kind", None)  # site="x" alone: the site's scheduler
        layers.append((data, None))
        origins: Dict[str, str] = {}
        merged = merge_layers(layers, origins)
        if site is not None:
            merged["site"] = site.name
        merged.setdefault("job", {}).pop("entrypoint", None)
        resolved = spec_from_dict(merged, file="the trainer's configs", origins=origins)
        resolved.entrypoint = spec.entrypoint
        resolved.site_config = site
        if site is not None:
            from .sites import derive_nodes

            derive_nodes(resolved)
        # the Python objects stay authoritative for what the workers run
        resolved.run = self.run_config
        return resolved

    def _python_spec(self):
        from .spec import JobSpec

        from .backends import backend_options

        return JobSpec(entrypoint=self.train_loop_per_worker if hasattr(
            self.train_loop_per_worker, "resolve") else None,
            backend=self._backend_name, scaling=self.scaling_config, run=self.run_config,
            config=dict(self.train_loop_config or {}),
            backend_options=backend_options(self.backend_config),
            scheduler=self.scheduler, site=self.site, datasets=dict(self.datasets),
            data_config=self.dataset_config)

    def check_datasets(self) -> None:
        """Open each dataset's file and check its columns before anything is written."""
        for name, source in self.datasets.items():
            try:
                source.check(name)
            except ConfigError as e:
                if self._spec is None or e.file is not None:
                    raise
                raise ConfigError(e.message, file=self._spec.where(f"datasets.{name}"),
                                  hint=e.hint) from None

    # -- fit -------------------------------------------------------------------------------
    def fit(self) -> Result:
        """Run the training to the end and return its Result. Raises
        :class:`TrainingFailedError` (with ``.result``) when it failed for good.
        (``Run(trainer).fit()``: see :class:`hpctrain.run.Run`.)"""
        return Run(self, self.run_options).fit()

    def submit(self):
        """Submit the run as a batch job and return at once: a :class:`~hpctrain.job.Job`
        (``status()``, ``wait()``, ``result()``, ``cancel()``, as submitit's). Needs a
        Slurm or PBS scheduler (``scheduler=``/``site=``); ``fit()`` submits and waits."""
        return Run(self, self.run_options).submit(FROM_PYTHON)

    # -- restore ---------------------------------------------------------------------------
    @classmethod
    def can_restore(cls, path: str | os.PathLike) -> bool:
        """True if ``path`` is a run directory that :meth:`restore` can continue; False
        (never an error) for anything else, a missing path included."""
        run = RunDir(path)
        return os.path.isdir(run.path) and run.exists() and os.path.exists(run.payload_file)

    @classmethod
    def restore(cls, path: str | os.PathLike, train_loop_per_worker: Optional[Callable] = None,
                train_loop_config: Optional[Dict[str, Any]] = None,
                scheduler: Any = None) -> "DataParallelTrainer":
        """A trainer that continues the run at ``path`` from its latest committed checkpoint.
        The training function and config can be given again (e.g. after a code fix).
        A path :meth:`can_restore` refuses raises
        :class:`~hpctrain.errors.RunNotFoundError` (a ValueError, as Ray's "Invalid
        restore path", and a FileNotFoundError); a run of another framework's trainer a
        ConfigError naming the trainer to use.

        A batch run continues as a batch job with the scheduler, site and directives it
        was submitted with (from its ``spec.toml``); ``scheduler="local"`` continues it on
        this machine instead."""
        from hpctrain._internal.rundir.layout import existing_run

        run = existing_run(path, f"{cls.__name__}.restore", restorable=True)
        payload = WorkerPayload.load(run)
        if cls is not DataParallelTrainer and cls._backend_name != payload.backend:
            from ._internal.registry import BACKENDS, backend_entry

            theirs = (backend_entry(payload.backend).trainer.partition(":")[2]
                      if payload.backend in BACKENDS else "the matching trainer")
            raise ConfigError(
                f"{cls.__name__}.restore: {run.path} is a run of {theirs} (backend "
                f"{payload.backend!r}), not of {cls.__name__}",
                hint=f"use {theirs}.restore({run.path!r})")
        state = run.read_state()
        trainer = cls.__new__(cls)
        DataParallelTrainer.__init__(
            trainer, train_loop_per_worker or payload.train_func,
            train_loop_config=train_loop_config if train_loop_config is not None else payload.train_loop_config,
            backend_config=payload.backend_config, scaling_config=payload.scaling,
            run_config=RunConfig(name=run.name, storage_path=os.path.dirname(run.path),
                                 checkpoint_config=payload.checkpoint_config,
                                 failure_config=_failure_config(state),
                                 callbacks=_saved_callbacks(run)),
            datasets=payload.datasets, metadata=getattr(payload, "metadata", None),
            dataset_config=DataConfig(payload.datasets_to_split),
            **_batch_settings(run, scheduler))
        trainer._restored = RunOptions(
            path=run.path,
            trial={k: v for k, v in (getattr(payload, "trial", None) or {}).items()
                   if k != "trainer"} or None,
            per_rank_results=payload.per_rank_results,
            keep_return_values=payload.keep_return_values)
        if scheduler is None:
            trainer._spec_layer = _setup_and_env(run)
        return trainer


def _checked_metadata(metadata: Any) -> Dict[str, Any]:
    """The trainer's ``metadata=`` (Ray: a JSON-serializable dict, made available as
    ``get_context().get_metadata()`` and in every reported checkpoint's
    ``get_metadata()``), as JSON gives it back."""
    import json

    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise ConfigError(f"metadata: expected a dict, got {type(metadata).__name__}")
    try:
        return json.loads(json.dumps(metadata))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"metadata: expected a JSON-serializable dict: {e}",
                          hint="it is stored in each checkpoint's .metadata.json: use "
                               "numbers, strings, booleans, lists and dicts") from None


def _batch_settings(run: RunDir, scheduler: Any) -> Dict[str, Any]:
    """The scheduler and site a run was submitted with, from its spec.toml (none: a
    local run; a damaged one raises, naming it: never a batch run silently made local)."""
    if scheduler is not None:
        return {"scheduler": scheduler}
    data = run.read_spec() or {}
    table = dict(data.get("scheduler") or {})
    if table.get("kind", "local") == "local":
        return {}
    from .config import SchedulerConfig

    return {"scheduler": SchedulerConfig(**table), "site": data.get("site")}


def _setup_and_env(run: RunDir) -> Dict[str, Any]:
    """The ``[setup]`` and ``[env]`` a batch run was submitted with."""
    data = run.read_spec() or {}
    return {k: data[k] for k in ("setup", "env") if data.get(k)}


def _saved_callbacks(run: RunDir):
    from hpctrain._internal.allocation.tracking import load_callbacks

    return load_callbacks(run)


def _failure_config(state: Dict[str, Any]):
    from .config import FailureConfig

    return FailureConfig(max_failures=int(state.get("max_failures", 0)))


def trainer_from_spec(spec) -> DataParallelTrainer:
    """The trainer a :class:`~hpctrain.spec.JobSpec` describes (``hpctrain run job.toml``).
    The entry point is checked here without running user code, and imported by each
    worker."""
    from .errors import ConfigError

    if spec.entrypoint is None:
        raise ConfigError("job.entrypoint: expected \"module:function\" or \"file.py:function\", "
                          "got nothing", file=spec.source)
    spec.entrypoint.check()
    from ._internal.registry import backend_entry, load

    entry = backend_entry(spec.backend)
    cls, keyword = load(entry.trainer), entry.config_keyword
    trainer = cls(
        spec.entrypoint, train_loop_config=dict(spec.config),
        **{keyword: cls._backend_config_cls(**spec.backend_options)},
        scaling_config=spec.scaling, run_config=spec.run, scheduler=spec.scheduler,
        site=spec.site, datasets=spec.datasets, dataset_config=spec.data_config)
    trainer._spec = spec
    return trainer
