"""``ray.train``'s worker-side functions (Ray Train 1.x's ``ray.train.session``):
``train.report(**kw)``, ``save_checkpoint(**kw)``, ``load_checkpoint()``, the ranks and the
dataset shard, inside a training function that a 1.x ``Trainer`` (or hpctrain's own
trainers) runs; and :class:`WorkerEntry`, what each rank of a 1.x ``Trainer.run`` calls."""
from __future__ import annotations

import numbers
import os
import time
import warnings
from typing import Any, Callable, Dict, Optional

import cloudpickle

from .. import get_checkpoint, get_context, report as _hpctrain_report
from ..checkpoint import DICT_FILE, Checkpoint
from hpctrain.worker.session import current_session
from .checkpoint import CheckpointStrategy
from .constants import TIMESTAMP

__all__ = ["report", "save_checkpoint", "load_checkpoint", "world_rank", "local_rank",
           "world_size", "get_dataset_shard", "WorkerEntry"]

_UNSET: Any = object()


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
           checkpoint_upload_mode: Any = None,
           delete_local_checkpoint_after_upload: Optional[bool] = None,
           checkpoint_upload_fn: Any = None, validation: Any = False,
           **kwargs: Any) -> None:
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
                     checkpoint_upload_mode=checkpoint_upload_mode,
                     delete_local_checkpoint_after_upload=delete_local_checkpoint_after_upload,
                     checkpoint_upload_fn=checkpoint_upload_fn, validation=validation)


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


class WorkerEntry:
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
