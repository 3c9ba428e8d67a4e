"""``DataParallelTrainer``: the driver side of a run.

``fit()`` builds a :class:`~hpctrain.run.Run` of the trainer: the configs resolved into one
:class:`~hpctrain.spec.JobSpec`, the run directory prepared (spec.toml, the pickled
training function), then the run handed to the supervisor — in this process for the local
default, in the batch job on a cluster — and the :class:`~hpctrain.Result` read back from
the run directory.
"""
from __future__ import annotations

import copy
import json
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Union

from hpctrain.common.registry import BACKENDS, SCHEDULERS, backend_entry, describe
from hpctrain.driver.login import warn_if_login_node
from hpctrain.rundir.layout import RunDir, existing_run
from .checkpoint import Checkpoint
from .config import DataConfig, RunConfig, ScalingConfig, SchedulerConfig, ValidationConfig
from .errors import ConfigError
from .result import Result
from .sites import LOCAL_SITE
from .run import FROM_PYTHON, Run

if TYPE_CHECKING:
    from .job import Job

#: the training function: ``f()`` or ``f(config)``, run on every rank
TrainLoop = Callable[..., Any]
#: where a run goes: a scheduler's name (``"slurm"``, ``"pbs"``, ``"lsf"``, ``"local"``) or
#: its config (``SlurmConfig(...)``…); None: this machine, or the site's scheduler
SchedulerArg = Union[str, SchedulerConfig, None]


class DataParallelTrainer:
    """Runs ``train_loop_per_worker`` on ``scaling_config.num_workers`` ranks.

    The framework trainers (:class:`~hpctrain.torch.TorchTrainer`…) are this class with
    their backend chosen; ``DataParallelTrainer`` itself runs the ``torch`` backend with
    ``backend_config`` (a :class:`~hpctrain.torch.TorchConfig`) as given.

    :param train_loop_per_worker: the training function, ``f()`` or ``f(config)``.
    :param train_loop_config: the ``config`` dict it is called with.
    :param backend_config: the backend's config (each framework trainer names it:
        ``torch_config=``…).
    :param scaling_config: how many ranks, GPUs and CPUs (``ScalingConfig``).
    :param run_config: name, storage path, checkpoints, failures, callbacks (``RunConfig``).
    :param resume_from_checkpoint: a checkpoint the first attempt starts from
        (``get_checkpoint()`` returns it).
    :param datasets: named datasets; each rank reads its shard with ``get_dataset_shard``.
    :param dataset_config: which datasets are split across ranks (``DataConfig``).
    :param scheduler: hpctrain's own: the batch system (``"slurm"``, ``"pbs"``, ``"lsf"``,
        or a ``SlurmConfig``/``PbsConfig``/``LsfConfig``); None runs on this machine.
    :param site: hpctrain's own: a site config by name (``"perlmutter"``…), which gives the
        scheduler and its defaults; ``"local"`` runs here on purpose.
    :param metadata: a JSON-serializable dict, in ``get_context().get_metadata()`` and in
        every checkpoint's ``get_metadata()``.
    """

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

    def __init__(self, train_loop_per_worker: TrainLoop, *,
                 train_loop_config: Optional[Dict[str, Any]] = None,
                 backend_config: Any = None,
                 scaling_config: Optional[ScalingConfig] = None,
                 run_config: Optional[RunConfig] = None,
                 resume_from_checkpoint: Optional[Checkpoint] = None,
                 datasets: Optional[Dict[str, Any]] = None,
                 dataset_config: Optional[DataConfig] = None,
                 scheduler: SchedulerArg = None, site: Optional[str] = None,
                 metadata: Optional[Dict[str, Any]] = None,
                 validation_config: Optional[ValidationConfig] = None) -> None:
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
        if validation_config is not None and not isinstance(validation_config, ValidationConfig):
            raise ConfigError("validation_config: expected a hpctrain.ValidationConfig, got "
                              f"{type(validation_config).__name__}")
        self.validation_config = validation_config
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
        #: site="local" or an explicit scheduler: the user chose where it runs (no
        #: login-node warning)
        self._placed = scheduler is not None or site == LOCAL_SITE
        if site == LOCAL_SITE:  # "here, on purpose": the local scheduler, no site config
            site = None
        if scheduler is None:
            scheduler = SchedulerConfig(kind="local")
        elif isinstance(scheduler, str):
            if scheduler not in SCHEDULERS:
                raise ConfigError(f"scheduler: expected one of {', '.join(SCHEDULERS)} or a "
                                  f"SchedulerConfig, got {scheduler!r}")
            scheduler = SchedulerConfig(kind=scheduler)
        elif not isinstance(scheduler, SchedulerConfig):
            raise ConfigError(f"scheduler: expected {describe()} or a SchedulerConfig, got "
                              f"{type(scheduler).__name__}")
        self.scheduler = scheduler
        self.site = site
        self.restored: Optional[Run] = None
        """The run :meth:`restore` continues (its directory, options and earlier spec);
        None for a new run."""

    @property
    def backend_name(self) -> str:
        """The backend the trainer's ranks use (``"torch"``…)."""
        return self._backend_name

    def with_configs(self, **changes: Any) -> "DataParallelTrainer":
        """A copy of this trainer with some of its configs replaced
        (``train_loop_config=``, ``scaling_config=``, ``run_config=``): what a sweep's
        trial runs."""
        allowed = ("train_loop_config", "scaling_config", "run_config")
        unknown = [k for k in changes if k not in allowed]
        if unknown:
            raise TypeError(f"with_configs: unexpected {', '.join(unknown)}; expected "
                            f"{', '.join(allowed)}")
        t = copy.copy(self)
        for key, value in changes.items():
            setattr(t, key, value)
        return t

    # -- fit -------------------------------------------------------------------------------
    def fit(self) -> Result:
        """Run the training to the end and return its Result. Raises
        :class:`TrainingFailedError` (with ``.result``) when it failed for good.
        (``Run.for_trainer(trainer).fit()``: see :class:`hpctrain.run.Run`.) With no site nor
        scheduler on a machine with a batch system, outside an allocation, warns once
        (a :class:`~hpctrain.errors.LoginNodeWarning`): it would train on a login node."""
        run = Run.for_trainer(self)
        if run.here and not self._placed and self.restored is None:
            warn_if_login_node()
        return run.fit()

    def submit(self) -> "Job":
        """Submit the run as a batch job and return at once: a :class:`~hpctrain.job.Job`
        (``status()``, ``wait()``, ``result()``, ``cancel()``, as submitit's). Needs a
        Slurm or PBS scheduler (``scheduler=``/``site=``); ``fit()`` submits and waits."""
        return Run.for_trainer(self).submit(FROM_PYTHON)

    # -- restore ---------------------------------------------------------------------------
    @classmethod
    def can_restore(cls, path: Union[str, "os.PathLike[str]"]) -> bool:
        """True if ``path`` is a run directory that :meth:`restore` can continue; False
        (never an error) for anything else, a missing path included."""
        run = RunDir(path)
        return os.path.isdir(run.path) and run.exists() and os.path.exists(run.payload_file)

    @classmethod
    def restore(cls, path: Union[str, "os.PathLike[str]"],
                train_loop_per_worker: Optional[TrainLoop] = None,
                train_loop_config: Optional[Dict[str, Any]] = None,
                scheduler: SchedulerArg = None) -> "DataParallelTrainer":
        """A trainer that continues the run at ``path`` from its latest committed checkpoint.
        The training function and config can be given again (e.g. after a code fix).
        A path :meth:`can_restore` refuses raises
        :class:`~hpctrain.errors.RunNotFoundError` (a ValueError, as Ray's "Invalid
        restore path", and a FileNotFoundError); a run of another framework's trainer a
        ConfigError naming the trainer to use.

        A batch run continues as a batch job with the scheduler, site and directives it
        was submitted with (from its ``spec.toml``); ``scheduler="local"`` continues it on
        this machine instead."""
        existing_run(path, f"{cls.__name__}.restore", restorable=True)
        run = Run.at(path, caller=f"{cls.__name__}.restore")
        payload, spec = run.payload, run.spec
        if cls is not DataParallelTrainer and cls._backend_name != payload.backend:
            theirs = (backend_entry(payload.backend).trainer.partition(":")[2]
                      if payload.backend in BACKENDS else "the matching trainer")
            raise ConfigError(
                f"{cls.__name__}.restore: {run.path} is a run of {theirs} (backend "
                f"{payload.backend!r}), not of {cls.__name__}",
                hint=f"use {theirs}.restore({run.path!r})")
        if scheduler is None and spec.scheduler.kind != "local":
            # a batch run continues as a batch job, as it was submitted
            batch: Dict[str, Any] = {"scheduler": spec.scheduler, "site": spec.site}
        else:
            batch = {"scheduler": scheduler} if scheduler is not None else {}
        trainer = cls.__new__(cls)
        DataParallelTrainer.__init__(
            trainer, train_loop_per_worker or payload.train_func,
            train_loop_config=train_loop_config if train_loop_config is not None else payload.train_loop_config,
            backend_config=payload.backend_config, scaling_config=payload.scaling,
            run_config=spec.run,
            resume_from_checkpoint=(Checkpoint(run.options.resume_from)
                                    if run.options.resume_from else None),
            datasets=payload.datasets, metadata=getattr(payload, "metadata", None),
            dataset_config=DataConfig(payload.datasets_to_split), **batch)
        trainer.restored = run
        return trainer


def _checked_metadata(metadata: Any) -> Dict[str, Any]:
    """The trainer's ``metadata=`` (Ray: a JSON-serializable dict, made available as
    ``get_context().get_metadata()`` and in every reported checkpoint's
    ``get_metadata()``), as JSON gives it back."""

    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise ConfigError(f"metadata: expected a dict, got {type(metadata).__name__}")
    try:
        checked: Dict[str, Any] = json.loads(json.dumps(metadata))
        return checked
    except (TypeError, ValueError) as e:
        raise ConfigError(f"metadata: expected a JSON-serializable dict: {e}",
                          hint="it is stored in each checkpoint's .metadata.json: use "
                               "numbers, strings, booleans, lists and dicts") from None
