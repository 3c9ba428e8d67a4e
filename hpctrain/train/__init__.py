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

import atexit
import inspect
import json
import logging
import numbers
import os
import queue
import threading
import time
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

import cloudpickle

from .. import get_checkpoint, get_context, report as _hpctrain_report
from ..checkpoint import DICT_FILE, Checkpoint
from ..config import (CheckpointConfig, CheckpointUploadMode, DataConfig, FailureConfig,
                      RunConfig, ScalingConfig, SyncConfig, default_storage_path)
from ..errors import ConfigError, TrainingFailedError
from ..result import Result
from hpctrain._internal.fsutil import atomic_write_bytes, json_default, remove_tree
from hpctrain._internal.worker.session import current_session
from hpctrain._internal.rundir.layout import ResultTail, RunDir, checkpoints_to_delete
from hpctrain._internal.trust import load_trusted_pickle, make_private_dir
from ..result import result_or_raise
from ..run import Run, RunOptions

from ..backends.torch import TorchConfig  # noqa: E402 (Ray 1.x: ray.train.TorchConfig)

__all__ = [
    # Ray Train 2.x (``ray.train``): the same objects as ``hpctrain``'s
    "report", "get_checkpoint", "get_context", "get_dataset_shard", "Checkpoint",
    "ScalingConfig", "RunConfig", "CheckpointConfig", "CheckpointUploadMode", "FailureConfig",
    "DataConfig", "SyncConfig",
    "Result", "TrainingFailedError",
    # Ray Train 1.x
    "Trainer", "TrainingIterator", "TrainingCallback", "JsonLoggerCallback", "PrintCallback",
    "TBXLoggerCallback", "CheckpointStrategy", "TorchConfig", "save_checkpoint",
    "load_checkpoint", "world_rank", "local_rank", "world_size",
]

logger = logging.getLogger(__name__)

TIMESTAMP = "_timestamp"
TIME_THIS_ITER_S = "_time_this_iter_s"
TRAINING_ITERATION = "_training_iteration"
RESULT_FILE_JSON = "results.json"
TRAIN_CHECKPOINT_SUBDIR = "checkpoints"
_RESUME_DIR = "legacy-resume"      # under <run>/.hpctrain: the checkpoint run() was given
_NOT_ACTIVE = ("This Trainer is not active. It is either shutdown already or never started "
               "in the first place. Either create a new Trainer or start this one.")
_UNSET: Any = object()


# =============================================================================
# Checkpoint strategy and callbacks (driver side)
# =============================================================================
@dataclass
class CheckpointStrategy:
    """Which checkpoints of a run stay on disk (Ray Train 1.x).

    ``num_to_keep``: keep this many (None: all; 0: none are kept once the run is over).
    ``checkpoint_score_attribute``: a numeric key of the checkpoint dict that ranks them;
    the default ``"_timestamp"`` (filled in by ``save_checkpoint``) keeps the most recent.
    ``checkpoint_score_order``: ``"max"`` or ``"min"``: which end of the score is best.
    The latest checkpoint is always kept as well: a restart resumes from it.
    """

    num_to_keep: Optional[int] = None
    checkpoint_score_attribute: str = TIMESTAMP
    checkpoint_score_order: str = "max"

    def __post_init__(self) -> None:
        if self.num_to_keep is not None and (isinstance(self.num_to_keep, bool) or
                                             not isinstance(self.num_to_keep, int) or
                                             self.num_to_keep < 0):
            raise ValueError(f"Received invalidate num_to_keep: {self.num_to_keep}. "
                             "Must be None or non-negative integer.")
        if self.checkpoint_score_order not in ("max", "min"):
            raise ValueError('checkpoint_score_order must be either "max" or "min".')

    def _checkpoint_config(self) -> CheckpointConfig:
        # num_to_keep=0: hpctrain must commit (a restart resumes from it); the run's
        # checkpoints are removed when it ends.
        return CheckpointConfig(num_to_keep=1 if self.num_to_keep == 0 else self.num_to_keep,
                                checkpoint_score_attribute=self.checkpoint_score_attribute,
                                checkpoint_score_order=self.checkpoint_score_order)


class TrainingCallback:
    """Called by ``Trainer.run`` on the driver. Override what you need."""

    def handle_result(self, results: List[Dict], **info) -> None:
        """Called for every ``train.report()``: ``results`` holds one dict per worker,
        in rank order."""

    def start_training(self, logdir: str, config: Dict, **info) -> None:
        """Called once before training starts; ``logdir`` is the run's directory."""

    def finish_training(self, error: bool = False, **info) -> None:
        """Called once after training, ``error=True`` when it raised."""


class JsonLoggerCallback(TrainingCallback):
    """Writes ``results.json`` in the run directory: a JSON list with, per iteration, the
    list of the logged workers' results (worker 0 by default; ``workers_to_log=None``:
    all)."""

    def __init__(self, logdir: Optional[str] = None, filename: Optional[str] = None,
                 workers_to_log: Optional[Union[int, List[int]]] = 0) -> None:
        if isinstance(workers_to_log, int):
            workers_to_log = [workers_to_log]
        if workers_to_log is not None:
            workers_to_log = list(workers_to_log)
            if not workers_to_log or not all(isinstance(w, int) for w in workers_to_log):
                raise ValueError("workers_to_log: expected a worker index, a non-empty list "
                                 f"of them, or None (all workers), got {workers_to_log!r}")
        self._logdir = logdir
        self._filename = filename
        self._workers_to_log = workers_to_log
        self._log_path: Optional[Path] = None

    def start_training(self, logdir: str, config: Dict, **info) -> None:
        path = Path(self._logdir or logdir)
        if not path.is_dir():
            raise ValueError(f"logdir '{path}' must be a directory.")
        self.logdir = path
        self._log_path = path / (self._filename or RESULT_FILE_JSON)
        self._results: List[List[Dict]] = []
        self._write()

    @property
    def log_path(self) -> Optional[Path]:
        """The file written to; None before ``start_training``."""
        return self._log_path

    def handle_result(self, results: List[Dict], **info) -> None:
        if self._workers_to_log is not None:
            results = [r for i, r in enumerate(results) if i in self._workers_to_log]
        self._results.append(results)
        self._write()

    def _write(self) -> None:
        atomic_write_bytes(str(self._log_path), json.dumps(self._results, default=json_default)
                           .encode(), sync=False, mode=0o600)


class TBXLoggerCallback(TrainingCallback):
    """Ray Train 1.x's TensorBoard logger: one event file in ``logdir`` (default: the
    run's directory, ``<logdir>/run_001``) with, per ``train.report()``, the numeric
    values of worker ``worker_to_log``'s results as scalars tagged ``ray/train/<key>``
    (nested dicts flattened with ``/``), step ``_training_iteration``, as Ray 1.x wrote
    them; ``_pid``, ``_timestamp`` and ``_time_total_s`` are left out, and so are NaNs.
    Lists (Ray 1.x: histograms) and other values are skipped. Written with TensorBoard's
    own record writer (needs ``tensorboard``, not tensorboardX or TensorFlow); the
    2.x-style :class:`hpctrain.callbacks.TBXLoggerCallback` is the ``RunConfig`` one."""

    IGNORE_KEYS = {"_pid", TIMESTAMP, "_time_total_s"}

    def __init__(self, logdir: Optional[str] = None, worker_to_log: int = 0) -> None:
        if isinstance(worker_to_log, bool) or not isinstance(worker_to_log, int) \
                or worker_to_log < 0:
            raise ValueError(f"worker_to_log: expected a worker index ≥ 0, got "
                             f"{worker_to_log!r}")
        self._logdir = logdir
        self._worker_to_log = worker_to_log
        self._file = None

    def start_training(self, logdir: str, config: Dict, **info) -> None:
        from ..callbacks import EventFile

        self.logdir = Path(self._logdir or logdir)
        self._file = EventFile(str(self.logdir))

    def handle_result(self, results: List[Dict], **info) -> None:
        import math

        from hpctrain._internal.metrics import flatten

        if self._worker_to_log >= len(results):
            raise ValueError(f"worker_to_log={self._worker_to_log}, but the run has "
                             f"{len(results)} workers")
        result = dict(results[self._worker_to_log])
        step = int(result.pop(TRAINING_ITERATION, 0))
        wall_time = float(result.get(TIMESTAMP) or time.time())
        values = {f"ray/train/{k}": v for k, v in flatten(result).items()
                  if k not in self.IGNORE_KEYS and isinstance(v, numbers.Real)
                  and not math.isnan(v)}
        self._file.scalars(step, wall_time, values)
        self._file.flush()

    def finish_training(self, error: bool = False, **info) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class PrintCallback(TrainingCallback):
    """Prints every iteration's results as indented JSON."""

    def handle_result(self, results: List[Dict], **info) -> None:
        print(json.dumps(results, default=json_default, indent=4))


# =============================================================================
# Inside the workers: train.report() & co.
# =============================================================================
def _warn_session_misuse(fn_name: str) -> None:
    warnings.warn(f"`train.{fn_name}()` is meant to only be called inside a training function "
                  "that is executed by `Trainer.run`. Returning None.", stacklevel=3)


class _WorkerState:
    """This worker's seed-era state: the checkpoint strategy (rank 0 checks the score
    attribute) and the dict ``load_checkpoint()`` returns."""

    def __init__(self, session) -> None:
        self.session = session
        self.strategy = CheckpointStrategy()
        self._loaded: Any = _UNSET

    def loaded(self) -> Optional[Dict]:
        if self._loaded is _UNSET:
            ckpt = get_checkpoint()
            self._loaded = ckpt.to_dict() if ckpt is not None else None
        return self._loaded

    def save(self, data: Dict[str, Any]) -> None:
        self._loaded = data
        if self.session.info.world_rank != 0:
            _hpctrain_report({})  # takes part in the checkpoint's collective; rank 0's dict wins
            return
        ckpt = dict(data)
        ckpt[TIMESTAMP] = int(time.time())
        metrics: Dict[str, Any] = {TIMESTAMP: ckpt[TIMESTAMP]}
        if self.strategy.num_to_keep != 0:
            attr = self.strategy.checkpoint_score_attribute
            if attr not in ckpt:
                raise ValueError(f"Unable to persist checkpoint for checkpoint_score_attribute: "
                                 f"{attr}. Include this attribute in the call to "
                                 "train.save_checkpoint.")
            if isinstance(ckpt[attr], bool) or not isinstance(ckpt[attr], numbers.Number):
                raise ValueError(f"Unable to persist checkpoint for checkpoint_score_attribute: "
                                 f"{attr} with value {ckpt[attr]!r}. This attribute must be "
                                 "numerical.")
            metrics[attr] = ckpt[attr]   # retention ranks by the committed metadata
        # written on the run's filesystem, so committing it is a rename, not a copy
        staging = get_context().get_checkpoint_staging_dir()
        with open(os.path.join(staging, DICT_FILE), "wb") as f:
            cloudpickle.dump(ckpt, f)
        _hpctrain_report(metrics, checkpoint=Checkpoint(staging))


_WORKER: Optional[_WorkerState] = None


def _worker_state() -> Optional[_WorkerState]:
    global _WORKER
    session = current_session()
    if session is None:
        return None
    if _WORKER is None or _WORKER.session is not session:
        _WORKER = _WorkerState(session)
    return _WORKER


def report(metrics: Optional[Dict[str, Any]] = None, *, checkpoint: Optional[Checkpoint] = None,
           checkpoint_upload_mode: Any = None, **kwargs: Any) -> None:
    """Report this iteration's results; every worker must call it the same number of times.

    Both of Ray's forms: Ray 2's ``train.report({"loss": x}, checkpoint=ckpt)`` is
    :func:`hpctrain.report`; Ray 1's ``train.report(loss=x)`` reports the keyword
    arguments (``_timestamp``, ``_time_this_iter_s`` and ``_training_iteration`` are filled
    in, and a 1.x ``Trainer`` hands every worker's dict to its callbacks)."""
    if metrics is not None and kwargs:
        raise TypeError("report() takes a metrics dict (Ray 2) or keyword arguments (Ray 1), "
                        "not both")
    if metrics is not None and not isinstance(metrics, dict):
        raise TypeError(f"report(): metrics must be a dict, got {type(metrics).__name__}")
    if current_session() is None:
        _warn_session_misuse("report")
        return
    _hpctrain_report(dict(metrics if metrics is not None else kwargs), checkpoint=checkpoint,
                     checkpoint_upload_mode=checkpoint_upload_mode)


def save_checkpoint(**kwargs) -> None:
    """Checkpoint the keyword arguments (rank 0's are kept; every worker must call it the
    same number of times)."""
    state = _worker_state()
    if state is None:
        _warn_session_misuse("save_checkpoint")
        return
    state.save(kwargs)


def load_checkpoint() -> Optional[Dict]:
    """What this worker last passed to ``save_checkpoint``; before that, the checkpoint the
    run started from (``Trainer.run(checkpoint=...)``, or the latest one after a restart);
    else None."""
    state = _worker_state()
    if state is None:
        _warn_session_misuse("load_checkpoint")
        return None
    return state.loaded()


def world_rank() -> int:
    """This worker's rank, 0 … world_size-1 (0 outside a training function)."""
    s = current_session()
    return s.info.world_rank if s is not None else 0


def local_rank() -> int:
    """This worker's rank on its node (0 outside a training function)."""
    s = current_session()
    return s.info.local_rank if s is not None else 0


def world_size() -> int:
    """The number of workers (1 outside a training function)."""
    s = current_session()
    return s.info.world_size if s is not None else 1


def get_dataset_shard(dataset_name: Optional[str] = None):
    """This worker's shard of a dataset the run was given (``datasets=`` of a trainer,
    ``[datasets]`` of a job file: see :mod:`hpctrain.data`); with no name, the only one.
    Ray Datasets do not exist here (``Trainer.run`` refuses ``dataset=``): without such a
    dataset, None with a warning, as Ray 1.x did when no dataset was passed."""
    session = current_session()
    if session is None:
        _warn_session_misuse("get_dataset_shard")
        return None
    names = list(session.datasets)
    if dataset_name is None and len(names) == 1:
        dataset_name = names[0]
    if dataset_name is not None and dataset_name in session.datasets:
        return session.get_dataset_shard(dataset_name)
    warnings.warn("No dataset passed in. Returning None. hpctrain has no Ray Datasets: "
                  "load the data inside the training function, or give the trainer "
                  "datasets= (HDF5 files, lists, arrays: hpctrain.data).", stacklevel=2)
    return None


class _WorkerEntry:
    """What each rank runs: the seed-era state, the initialization hook, then train_func
    (called with the config only when it takes an argument, as in Ray)."""

    def __init__(self, train_func: Callable, takes_config: bool, strategy: CheckpointStrategy,
                 initialization_hook: Optional[Callable[[], None]]) -> None:
        self.train_func = train_func
        self.takes_config = takes_config
        self.strategy = strategy
        self.initialization_hook = initialization_hook

    def __call__(self, config):
        state = _worker_state()
        state.strategy = self.strategy
        if self.initialization_hook is not None:
            self.initialization_hook()
        return self.train_func(config) if self.takes_config else self.train_func()


# =============================================================================
# The driver: following a run
# =============================================================================
class _ResultTracker:
    """Turns the per-rank result lines of a run into seed-era events.

    Every rank writes one line per ``hpctrain.report``, numbered by ``_training_iteration``
    and carrying the attempt that wrote it; a line whose report handed in a checkpoint says
    ``"checkpoint": true`` (and its ``checkpoint_dir_name`` once committed). An iteration is complete once every rank has its
    line from the same attempt. After a restart the ranks write the iterations since the
    resumed checkpoint again: those already handed out are skipped, and a line of a newer
    attempt replaces what older attempts left for its iteration."""

    def __init__(self, run: RunDir, num_workers: int) -> None:
        d = os.path.join(run.internal_dir, "worker-results")
        self._tails = [ResultTail(os.path.join(d, f"rank-{r}.jsonl")) for r in range(num_workers)]
        self._pending: Dict[int, tuple] = {}   # iteration: (attempt, per-rank lines)
        self._next = 1
        self._reports = 0
        self._carry = [0.0] * num_workers   # time spent in save_checkpoint since the last report

    def poll(self, on_checkpoint: Callable[[str], None]) -> List[List[Dict[str, Any]]]:
        """The iterations completed since the last call, each a list of per-rank dicts."""
        for rank, tail in enumerate(self._tails):
            for line in tail.poll():
                it, attempt = line["metrics"][TRAINING_ITERATION], line["attempt"]
                if it < self._next:
                    continue
                if it not in self._pending or self._pending[it][0] < attempt:
                    self._pending[it] = (attempt, [None] * len(self._tails))
                if self._pending[it][0] == attempt:
                    self._pending[it][1][rank] = line
        out = []
        while self._next in self._pending and None not in self._pending[self._next][1]:
            lines = self._pending.pop(self._next)[1]
            self._next += 1
            if lines[0].get("checkpoint"):
                for r, line in enumerate(lines):
                    self._carry[r] += line["metrics"].get(TIME_THIS_ITER_S, 0.0)
                if lines[0].get("checkpoint_dir_name"):  # else committed a little later
                    on_checkpoint(lines[0]["checkpoint_dir_name"])
                continue
            self._reports += 1
            results = []
            for r, line in enumerate(lines):
                m = dict(line["metrics"])
                m.pop("checkpoint_dir_name", None)
                m[TRAINING_ITERATION] = self._reports
                if TIME_THIS_ITER_S in m:
                    m[TIME_THIS_ITER_S] += self._carry[r]
                self._carry[r] = 0.0
                results.append(m)
            out.append(results)
        return out


class _Interrupted(Exception):
    """Raised from the run's tick to stop it (an abandoned iterator, shutdown, exit)."""


def _legacy_backends():
    """The backend names of the 1.x API (``backend="torch"``): the registered backends
    that say ``legacy_api``."""
    from hpctrain._internal.registry import backend_entries

    return tuple(e.name for e in backend_entries() if e.legacy_api)


def _backend_classes(name: str):
    from hpctrain._internal.registry import backend_entry, load

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


class _Run:
    """One ``Trainer.run``/``run_iterator`` call: a run directory and its hpctrain trainer
    (a TorchTrainer for ``backend="torch"``)."""

    def __init__(self, trainer: "Trainer", path: Path, entry: _WorkerEntry,
                 config: Optional[Dict[str, Any]], checkpoint: Union[None, Dict, Checkpoint]
                 ) -> None:
        self.trainer = trainer
        self.run = RunDir(path)
        self.entry = entry
        self.config = config
        self.checkpoint = checkpoint
        self.return_values: Optional[List[Any]] = None
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def _resume_checkpoint(self) -> Optional[Checkpoint]:
        if not isinstance(self.checkpoint, dict):
            return self.checkpoint
        # beside the run, on the shared filesystem, where every rank can read it
        d = os.path.join(self.run.internal_dir, _RESUME_DIR)
        self.run.makedirs(d)
        atomic_write_bytes(os.path.join(d, DICT_FILE), cloudpickle.dumps(self.checkpoint),
                           sync=False, mode=0o600)
        return Checkpoint(d)

    def _run_of_trainer(self) -> Run:
        """The hpctrain :class:`~hpctrain.run.Run` of this call: the trainer of the
        backend, with the seed-era API's payload options."""
        t = self.trainer
        kwargs = {t._config_keyword: t._backend_config} if t._backend_config is not None else {}
        trainer = t._trainer_cls(
            self.entry, train_loop_config=self.config,
            scaling_config=ScalingConfig(num_workers=t._num_workers, use_gpu=t._use_gpu,
                                         resources_per_worker=t._resources_per_worker),
            run_config=RunConfig(name=self.run.name, storage_path=str(t.logdir), verbose=0,
                                 checkpoint_config=self.entry.strategy._checkpoint_config(),
                                 failure_config=FailureConfig(max_failures=t._max_retries)),
            resume_from_checkpoint=self._resume_checkpoint(), **kwargs)
        return Run.for_trainer(trainer, RunOptions(
            per_rank_results=True, keep_return_values=True,
            echo_worker_output=True,   # "(rank R) …", as Ray 1.x shows worker output
            first_checkpoint_index=1))  # checkpoint ids start at 1, as in Ray

    def execute(self, on_results: Callable[[List[Dict[str, Any]]], None]) -> None:
        """Run to the end, handing every complete iteration to ``on_results`` (from the
        supervisor's tick, while the workers run). Raises TrainingFailedError."""
        one = self._run_of_trainer()
        run = one.prepare()
        tracker = _ResultTracker(run, self.trainer._num_workers)

        def note(name: str) -> None:
            self.trainer._note_checkpoint(os.path.join(run.checkpoints_dir, name))

        def tick(final: bool = False) -> None:
            if self._stop.is_set() and not final:
                raise _Interrupted("training stopped by the driver")
            for results in tracker.poll(note):
                on_results(results)

        try:
            status = one.run_here(on_tick=tick)
            tick(final=True)
        finally:
            self._clean_up(run)
        result_or_raise(run.path, status)
        last = run.attempt_dir(len(run.read_state()["attempts"]))
        self.return_values = [load_trusted_pickle(os.path.join(last, f"return.rank-{r}.pkl"),
                                                  what="a rank's return value")
                              for r in range(self.trainer._num_workers)]

    def _clean_up(self, run: RunDir) -> None:
        remove_tree(os.path.join(run.internal_dir, _RESUME_DIR))
        latest = run.latest_checkpoint()
        if latest is not None:
            self.trainer._note_checkpoint(latest.path)
        if self.entry.strategy.num_to_keep == 0:  # Ray keeps none on disk: only the dict in memory
            self.trainer.latest_checkpoint  # noqa: B018 - load it before the files go
            for rec in run.list_checkpoints():
                remove_tree(rec.path)


class TrainingIterator:
    """Returned by ``Trainer.run_iterator``: yields, per ``train.report()``, the list of
    every worker's results (rank order) while training runs. Once exhausted,
    ``get_final_results()`` returns every worker's return value."""

    def __init__(self, run: _Run) -> None:
        self._run = run
        self._queue: "queue.Queue[Any]" = queue.Queue()
        self._finished = False
        self._final_results: Optional[List[Any]] = None
        self._thread = threading.Thread(target=self._drive, name="hpctrain-train-run", daemon=True)
        atexit.register(self._abandon)   # never leave worker processes behind
        self._thread.start()

    def _drive(self) -> None:
        try:
            self._run.execute(self._queue.put)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            self._queue.put(_End(e))
        else:
            self._queue.put(_End(None))

    def _abandon(self) -> None:
        if self._thread.is_alive():
            self._run.stop()
            self._thread.join()

    def __iter__(self) -> "TrainingIterator":
        return self

    def __next__(self) -> List[Dict[str, Any]]:
        if self._finished:
            raise StopIteration
        try:
            item = self._queue.get()
        except BaseException:  # Ctrl-C while waiting: stop the workers too
            self._abandon()
            raise
        if isinstance(item, _End):
            self._finish(item)
            raise StopIteration
        return item

    def _finish(self, end: "_End") -> None:
        self._finished = True
        self._thread.join()
        atexit.unregister(self._abandon)
        if end.error is not None:
            raise end.error
        self._final_results = self._run.return_values

    def is_finished(self) -> bool:
        return self._finished

    def get_final_results(self, force: bool = False) -> Optional[List[Any]]:
        """Every worker's return value, once the results are consumed; ``force=True``
        waits for the end of training, dropping results not yet consumed."""
        if not self._finished:
            if not force:
                logger.info("Please finish iterating through the intermediate results before "
                            "getting the final returns, or set `force=True`.")
                return None
            while True:
                item = self._queue.get()
                if isinstance(item, _End):
                    self._finish(item)
                    break
        return self._final_results


@dataclass
class _End:
    error: Optional[BaseException]


# =============================================================================
# Trainer
# =============================================================================
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
                 checkpoint: Any, checkpoint_strategy: Optional[CheckpointStrategy]) -> _Run:
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
        entry = _WorkerEntry(train_func, num_params == 1, strategy, self._initialization_hook)
        return _Run(self, path, entry, config, checkpoint)

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
        from ..config import FailureConfig, RunConfig, ScalingConfig

        t = self._legacy
        takes_config = len(inspect.signature(self.train_func).parameters) == 1
        strategy = CheckpointStrategy()
        kwargs = {t._config_keyword: t._backend_config} if t._backend_config is not None else {}
        return t._trainer_cls(
            _WorkerEntry(self.train_func, takes_config, strategy, None),
            scaling_config=ScalingConfig(num_workers=t._num_workers, use_gpu=t._use_gpu,
                                         resources_per_worker=t._resources_per_worker),
            run_config=RunConfig(verbose=0, checkpoint_config=strategy._checkpoint_config(),
                                 failure_config=FailureConfig(max_failures=t._max_retries)),
            **kwargs)

    @staticmethod
    def run_options() -> RunOptions:
        """How each trial runs: checkpoint ids start at 1, as in Ray 1.x."""
        return RunOptions(first_checkpoint_index=1)
