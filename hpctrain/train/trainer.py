"""Ray Train 1.x's ``Trainer`` (``ray.train.Trainer``): ``start``/``run``/``run_iterator``/
``shutdown`` over hpctrain's trainers (``backend="torch"``: a TorchTrainer on the local
launcher), its checkpoints, and ``to_tune_trainable``."""
from __future__ import annotations

import inspect
import logging
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

import cloudpickle

from ..checkpoint import Checkpoint
from ..config import FailureConfig, RunConfig, ScalingConfig, default_storage_path
from ..errors import ConfigError
from ..run import RunOptions
from hpctrain.common.registry import backend_entries, backend_entry, load
from hpctrain.rundir.layout import RunDir, checkpoints_to_delete
from hpctrain.common.trust import make_private_dir
from .callbacks import TrainingCallback
from .checkpoint import CheckpointStrategy
from .constants import TRAIN_CHECKPOINT_SUBDIR
from .driver import TrainingIterator, TrainRun
from .session import WorkerEntry

__all__ = ["Trainer", "LegacyTrainable"]

logger = logging.getLogger("hpctrain.train")

_NOT_ACTIVE = ("This Trainer is not active. It is either shutdown already or never started "
               "in the first place. Either create a new Trainer or start this one.")
_UNSET: Any = object()


def _legacy_backends():
    """The backend names of the 1.x API (``backend="torch"``): the registered backends
    that say ``legacy_api``."""
    return tuple(e.name for e in backend_entries() if e.legacy_api)


def _backend_classes(name: str):
    entry = backend_entry(name)
    try:
        return load(entry.trainer), load(entry.config), entry.config_keyword
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"backend {name!r} is not available in this hpctrain installation "
                          f"({e})") from e


def _resolve_backend(backend: Any):
    """``(trainer class, config keyword, config or None)`` for a name or a config object."""
    if isinstance(backend, str):
        if backend not in _legacy_backends():
            raise ConfigError(f"Invalid backend: {backend!r}. Supported string values are: "
                              f"{sorted(_legacy_backends())}",
                              hint="or pass a backend config such as hpctrain.torch.TorchConfig()")
        cls, _, keyword = _backend_classes(backend)
        return cls, keyword, None
    for name in _legacy_backends():
        try:
            cls, config_cls, keyword = _backend_classes(name)
        except ConfigError:
            continue
        if isinstance(backend, config_cls):
            return cls, keyword, backend
    raise TypeError(f"Invalid type for backend: {type(backend)}. Expected one of "
                    f"{sorted(_legacy_backends())} or a backend config such as TorchConfig().")


def _load_dict(path: Union[str, os.PathLike]) -> Dict:
    """A checkpoint dict from a checkpoint directory or a (Ray-style) pickle file."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"Checkpoint path {p} does not exist.")
    if p.is_dir():
        return Checkpoint(str(p)).to_dict()
    with p.open("rb") as f:
        return cloudpickle.load(f)


def _start_checkpoint(checkpoint: Any) -> Union[None, Dict, Checkpoint]:
    """``run(checkpoint=...)`` as a dict or a checkpoint directory."""
    if checkpoint is None or isinstance(checkpoint, (dict, Checkpoint)):
        return checkpoint
    p = Path(checkpoint).expanduser()
    return Checkpoint(str(p.resolve())) if p.is_dir() else _load_dict(p)


class Trainer:
    """Ray Train 1.x's ``Trainer``: runs a training function on ``num_workers`` workers.

    ``backend``: ``"torch"`` (or a ``TorchConfig``). ``logdir``: where the runs go
    (relative paths and the default ``train_<date>`` lie under the default storage path,
    ``$HPCTRAIN_STORAGE_PATH`` or ``~/hpctrain_results``); each ``run()`` is
    ``<logdir>/run_001``, ``run_002``… ``max_retries``: restarts of the worker group after a
    failure (-1: unlimited), each from the latest checkpoint.
    """

    def __init__(self, backend: Union[str, Any], num_workers: int, use_gpu: bool = False,
                 resources_per_worker: Optional[Dict[str, float]] = None,
                 logdir: Optional[str] = None, max_retries: int = 3):
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers <= 0:
            raise ValueError("`num_workers` must be a positive integer.")
        if resources_per_worker:
            gpus = resources_per_worker.get("GPU", int(use_gpu))
            if not use_gpu and gpus > 0:
                raise ValueError("`use_gpu` is False but `GPU` was found in "
                                 "`resources_per_worker`. Either set `use_gpu` to True or "
                                 "remove `GPU` from `resources_per_worker.")
            if use_gpu and gpus == 0:
                raise ValueError("`use_gpu` is True but `GPU` is set to 0 in "
                                 "`resources_per_worker`. Either set `use_gpu` to False or "
                                 "request a positive number of `GPU` in `resources_per_worker.")
        self._trainer_cls, self._config_keyword, self._backend_config = _resolve_backend(backend)
        self._num_workers = num_workers
        self._use_gpu = bool(use_gpu)
        self._resources_per_worker = dict(resources_per_worker) if resources_per_worker else None
        self._max_retries = FailureConfig(max_failures=max_retries).max_failures
        self._run_id = 0
        self._started = False
        self._initialization_hook: Optional[Callable[[], None]] = None
        self._strategy = CheckpointStrategy()
        self._iterator: Optional[TrainingIterator] = None
        self._latest_ckpt_path: Optional[str] = None
        self._latest_ckpt: Any = _UNSET
        self.logdir = self.create_logdir(logdir)

    def create_logdir(self, log_dir: Optional[Union[str, Path]]) -> Path:
        """Create the trainer's log directory (``train_<date>`` under the default storage
        path when none is given; relative paths are taken under it too, as in Ray)."""
        base = Path(os.path.expandvars(default_storage_path())).expanduser()
        path = Path(log_dir).expanduser() if log_dir else Path(
            f"train_{datetime.today().strftime('%Y-%m-%d_%H-%M-%S')}")
        path = (path if path.is_absolute() else base / path).resolve()
        path.mkdir(parents=True, exist_ok=True)
        logger.info("Trainer logs will be logged in: %s", path)
        return path

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, initialization_hook: Optional[Callable[[], None]] = None) -> None:
        """Open the trainer for ``run()``. ``initialization_hook`` is called in every
        worker before the training function (worker processes start with each run)."""
        self._initialization_hook = initialization_hook
        self._started = True

    def shutdown(self) -> None:
        """Close the trainer; a ``run_iterator()`` still in flight is stopped."""
        if self._iterator is not None:
            self._iterator._abandon()
            self._iterator = None
        self._started = False

    # -- running --------------------------------------------------------------------------
    def _new_run(self, train_func: Callable, config: Optional[Dict[str, Any]], dataset: Any,
                 checkpoint: Any, checkpoint_strategy: Optional[CheckpointStrategy]) -> TrainRun:
        if not self._started:
            raise RuntimeError(_NOT_ACTIVE)
        if self._iterator is not None and not self._iterator.is_finished():
            raise RuntimeError("A run_iterator() of this Trainer is still running: consume it "
                               "to the end (or call get_final_results(force=True)) first.")
        if dataset is not None:
            raise ConfigError("Trainer.run(dataset=...): Ray Datasets are not available in "
                              "hpctrain", hint="load the data inside the training function "
                              "(e.g. a DataLoader with hpctrain.torch.prepare_data_loader)")
        if not callable(train_func):
            raise TypeError(f"train_func must be a function, got {type(train_func).__name__}")
        num_params = len(inspect.signature(train_func).parameters)
        if num_params > 1:
            raise ValueError("train_func should take in a 0 or 1 arguments.")
        if config is not None and not isinstance(config, dict):
            raise TypeError(f"config: expected a dict, got {type(config).__name__}")
        checkpoint = _start_checkpoint(checkpoint)
        strategy = checkpoint_strategy or CheckpointStrategy()
        if not isinstance(strategy, CheckpointStrategy):
            raise TypeError("checkpoint_strategy: expected a CheckpointStrategy, got "
                            f"{type(strategy).__name__}")
        while True:  # never reuse a run directory: hpctrain would resume it
            self._run_id += 1
            path = self.latest_run_dir
            if not path.exists():
                break
        make_private_dir(str(path))  # 0700 whatever the umask (hpctrain then checks it)
        logger.info("Run results will be logged in: %s", path)
        self._strategy = strategy
        entry = WorkerEntry(train_func, num_params == 1, strategy, self._initialization_hook)
        return TrainRun(self, path, entry, config, checkpoint)

    def run(self, train_func: Callable, config: Optional[Dict[str, Any]] = None,
            callbacks: Optional[List[TrainingCallback]] = None, dataset: Any = None,
            checkpoint: Optional[Union[Dict, str, Path]] = None,
            checkpoint_strategy: Optional[CheckpointStrategy] = None) -> List[Any]:
        """Run ``train_func`` (taking no argument, or ``config``) on every worker and return
        the list of their return values, in rank order. ``callbacks`` get every
        iteration's results while training runs. ``checkpoint`` (a dict, or the path of a
        checkpoint) is what ``train.load_checkpoint()`` returns until the first save.
        Raises :class:`hpctrain.TrainingFailedError` when a worker failed for good."""
        job = self._new_run(train_func, config, dataset, checkpoint, checkpoint_strategy)
        callbacks = list(callbacks or [])
        for cb in callbacks:
            cb.start_training(logdir=str(self.latest_run_dir), config=config or {})
        error = True
        try:
            job.execute(lambda results: [cb.handle_result(results) for cb in callbacks])
            error = False
            return job.return_values
        finally:
            for cb in callbacks:
                cb.finish_training(error=error)

    def run_iterator(self, train_func: Callable, config: Optional[Dict[str, Any]] = None,
                     dataset: Any = None, checkpoint: Optional[Union[Dict, str, Path]] = None,
                     checkpoint_strategy: Optional[CheckpointStrategy] = None
                     ) -> TrainingIterator:
        """Like ``run()``, but returns an iterator over the results: training starts now
        and runs in the background; each item is one iteration's list of per-worker
        dicts. ``get_final_results()`` on it returns the workers' return values."""
        job = self._new_run(train_func, config, dataset, checkpoint, checkpoint_strategy)
        self._iterator = TrainingIterator(job)
        return self._iterator

    # -- results --------------------------------------------------------------------------
    def _note_checkpoint(self, path: str) -> None:
        if path != self._latest_ckpt_path:
            self._latest_ckpt_path = path
            self._latest_ckpt = _UNSET

    @property
    def latest_run_dir(self) -> Optional[Path]:
        """The directory of the latest ``run()`` (None before the first)."""
        return self.logdir / f"run_{self._run_id:03d}" if self._run_id > 0 else None

    @property
    def latest_checkpoint_dir(self) -> Optional[Path]:
        """The checkpoints directory of the latest run (None before the first)."""
        run_dir = self.latest_run_dir
        return run_dir / TRAIN_CHECKPOINT_SUBDIR if run_dir is not None else None

    @property
    def latest_checkpoint(self) -> Optional[Dict]:
        """The dict of the latest ``train.save_checkpoint()`` (rank 0's), across runs;
        None if no run saved one."""
        if self._latest_ckpt is _UNSET:
            if self._latest_ckpt_path is None:
                return None
            if not os.path.isdir(self._latest_ckpt_path):  # retention passed it meanwhile
                rec = RunDir(self.latest_run_dir).latest_checkpoint()
                if rec is None:
                    return None
                self._note_checkpoint(rec.path)
            self._latest_ckpt = _load_dict(self._latest_ckpt_path)
        return self._latest_ckpt

    @property
    def best_checkpoint_path(self) -> Optional[Path]:
        """The best checkpoint directory of the latest run by its ``CheckpointStrategy``
        (by default the most recent); None if it saved none or kept none."""
        if self.latest_run_dir is None or self._strategy.num_to_keep == 0:
            return None
        records = RunDir(self.latest_run_dir).list_checkpoints()
        if not records:
            return None
        # the best survives top-1 retention, beside the latest (which is the last record)
        dropped = {r.index for r in checkpoints_to_delete(
            records, 1, self._strategy.checkpoint_score_attribute,
            self._strategy.checkpoint_score_order)}
        return Path([r for r in records if r.index not in dropped][0].path)

    @property
    def best_checkpoint(self) -> Optional[Dict]:
        """The dict of :attr:`best_checkpoint_path`."""
        path = self.best_checkpoint_path
        return _load_dict(path) if path is not None else None

    @staticmethod
    def load_checkpoint(checkpoint_file_path: Union[str, Path]) -> Dict:
        """The dict of a checkpoint directory (or of a Ray 1.x checkpoint file)."""
        return _load_dict(checkpoint_file_path)

    def to_tune_trainable(self, train_func: Callable, dataset: Any = None):
        """A trainable for ``hpctrain.tune.run`` (or a ``Tuner``): each trial runs
        ``train_func(config)`` on this trainer's workers, as ``run()`` would; its
        ``train.report()`` results are what the sweep ranks."""
        return LegacyTrainable(self, train_func, dataset)

    def to_worker_group(self, *args, **kwargs):
        raise NotImplementedError("hpctrain has no long-lived worker actors: put the work in "
                                  "a training function and use Trainer.run().")


class LegacyTrainable:
    """What ``Trainer.to_tune_trainable(train_func)`` returns: pass it to
    :func:`run` (or to a :class:`~hpctrain.tune.Tuner`)."""

    def __init__(self, legacy_trainer: Any, train_func: Callable, dataset: Any = None):
        if dataset is not None:
            raise ConfigError("to_tune_trainable(dataset=...): Ray Datasets are not available "
                              "in hpctrain", hint="load the data inside the training function")
        if not callable(train_func):
            raise TypeError(f"train_func must be a function, got {type(train_func).__name__}")
        if len(inspect.signature(train_func).parameters) > 1:
            raise ValueError("train_func should take in a 0 or 1 arguments.")
        self._legacy = legacy_trainer
        self.train_func = train_func
        self.__name__ = getattr(train_func, "__name__", "trainable")

    def trainer(self):
        """The hpctrain trainer one trial runs (the legacy trainer's backend and workers)."""
        t = self._legacy
        takes_config = len(inspect.signature(self.train_func).parameters) == 1
        strategy = CheckpointStrategy()
        kwargs = {t._config_keyword: t._backend_config} if t._backend_config is not None else {}
        return t._trainer_cls(
            WorkerEntry(self.train_func, takes_config, strategy, None),
            scaling_config=ScalingConfig(num_workers=t._num_workers, use_gpu=t._use_gpu,
                                         resources_per_worker=t._resources_per_worker),
            run_config=RunConfig(verbose=0, checkpoint_config=strategy._checkpoint_config(),
                                 failure_config=FailureConfig(max_failures=t._max_retries)),
            **kwargs)

    @staticmethod
    def run_options() -> RunOptions:
        """How each trial runs: checkpoint ids start at 1, as in Ray 1.x."""
        return RunOptions(first_checkpoint_index=1)
