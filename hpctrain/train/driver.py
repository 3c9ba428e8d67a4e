"""The driver of one 1.x ``Trainer.run``/``run_iterator`` call: the hpctrain
:class:`~hpctrain.run.Run` below it, and the ranks' result lines turned into the 1.x
events (every worker's dict per ``train.report()``, checkpoints) while it runs."""
from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Union

import cloudpickle

from ..checkpoint import DICT_FILE, Checkpoint
from ..config import FailureConfig, RunConfig, ScalingConfig
from ..result import result_or_raise
from ..run import Run, RunOptions
from hpctrain.common.fsutil import atomic_write_bytes, remove_tree
from hpctrain.rundir.layout import ResultTail, RunDir
from hpctrain.common.trust import load_trusted_pickle
from .constants import TIME_THIS_ITER_S, TRAINING_ITERATION
from .session import WorkerEntry

if TYPE_CHECKING:  # (for the hints only)
    from .trainer import Trainer

__all__ = ["ResultTracker", "TrainRun", "TrainingIterator"]

logger = logging.getLogger("hpctrain.train")

_RESUME_DIR = "legacy-resume"      # under <run>/.hpctrain: the checkpoint run() was given


class ResultTracker:
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


class TrainRun:
    """One ``Trainer.run``/``run_iterator`` call: a run directory and its hpctrain trainer
    (a TorchTrainer for ``backend="torch"``)."""

    def __init__(self, trainer: "Trainer", path: Path, entry: WorkerEntry,
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
        tracker = ResultTracker(run, self.trainer._num_workers)

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

    def __init__(self, run: TrainRun) -> None:
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
