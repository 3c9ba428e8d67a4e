"""``ray.train.callbacks`` (Ray Train 1.x): the callbacks a 1.x ``Trainer.run`` calls on
the driver, with every worker's results of each ``train.report()``."""
from __future__ import annotations

import json
import math
import numbers
import time
from pathlib import Path
from typing import Dict, List, Optional, Union

from ..callbacks import EventFile
from hpctrain.common.fsutil import atomic_write_bytes, json_default
from hpctrain.common.metrics import flatten
from .constants import RESULT_FILE_JSON, TIMESTAMP, TRAINING_ITERATION

__all__ = ["TrainingCallback", "JsonLoggerCallback", "PrintCallback", "TBXLoggerCallback"]


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
        self.logdir = Path(self._logdir or logdir)
        self._file = EventFile(str(self.logdir))

    def handle_result(self, results: List[Dict], **info) -> None:
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
