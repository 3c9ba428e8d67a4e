"""The worker-side session behind ``hpctrain.report``, ``get_checkpoint``, ``get_context``.

One session per worker process. Each ``report()`` starts one small collective — an
element-wise max of two integers over the job's own communicator: "did any rank hand
in a checkpoint?", "must we stop?" — and, on rank 0, appends one line. The collective
is not waited for: the next ``report()`` (or the end of the function) collects it, by
when a training step has passed and it is long complete. So every rank learns the
outcome of report *i* at report *i+1*, all at the same iteration.

A rank that hands in a checkpoint stages its files before starting the collective and
then waits for it, so the collective doubles as the barrier proving every shard is
complete; rank 0 then publishes the checkpoint before ``report()`` returns. (When only
ranks other than 0 hand in files, rank 0 publishes at its next report.)
"""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..checkpoint import Checkpoint
from ..cluster_env import WorkerInfo
from ..config import CheckpointConfig
from .commit import digest_shard_async, new_staging_dir, publish, stage_shard
from .fsutil import json_default
from .storage import ResultWriter, RunDir, autofilled, checkpoint_dir_name

DETAILED_ENV = "HPCTRAIN_RESULT_ENABLE_DETAILED_AUTOFILLED_METRICS"


class Agreement:
    """An element-wise max across ranks, possibly still in flight."""

    def wait(self) -> List[int]:  # pragma: no cover - interface
        raise NotImplementedError


class Done(Agreement):
    def __init__(self, values: Sequence[int]):
        self.values = list(values)

    def wait(self) -> List[int]:
        return self.values


class Coordinator:
    """Agreement across ranks: an element-wise max of a few small integers, started
    without blocking (``wait()`` on the result blocks)."""

    def allreduce_max_async(self, values: Sequence[int]) -> Agreement:  # pragma: no cover
        raise NotImplementedError


class SingleProcessCoordinator(Coordinator):
    def allreduce_max_async(self, values: Sequence[int]) -> Agreement:
        return Done(values)


@dataclass
class _Pending:
    agreement: Agreement
    iteration: int
    index: int
    metrics: Dict[str, Any]
    started: float


class Session:
    def __init__(self, *, info: WorkerInfo, run: RunDir, coordinator: Coordinator,
                 checkpoint_config: CheckpointConfig, run_name: str,
                 resume_checkpoint: Optional[str], start_iteration: int,
                 next_checkpoint_index: int, use_gpu: bool = False,
                 per_rank_results: bool = False, attempt: int = 1,
                 datasets: Optional[Dict[str, Any]] = None):
        self.info = info
        self.run = run
        self.coordinator = coordinator
        self.checkpoint_config = checkpoint_config
        self.run_name = run_name
        self.resume_checkpoint = resume_checkpoint
        self.iteration = start_iteration
        self.next_checkpoint_index = next_checkpoint_index
        self.use_gpu = use_gpu
        self.attempt = attempt
        self.datasets = datasets or {}
        self._detailed = os.environ.get(DETAILED_ENV, "0") not in ("", "0", "false", "False")
        self._started = time.time()
        self._last = time.perf_counter()
        self._writer = ResultWriter(run) if info.world_rank == 0 else None
        self._rank_results = None
        if per_rank_results:
            d = os.path.join(run.internal_dir, "worker-results")
            os.makedirs(d, exist_ok=True)
            self._rank_results = open(os.path.join(d, f"rank-{info.world_rank}.jsonl"), "a",
                                      buffering=1)
        self._stop_requested = threading.Event()
        self.stop_agreed = False
        self._threads: List[threading.Thread] = []
        self._pending: Optional[_Pending] = None
        self.last_metrics: Dict[str, Any] = {}

    # -- reporting ----------------------------------------------------------------
    def report(self, metrics: Dict[str, Any], checkpoint: Optional[Checkpoint] = None) -> None:
        if not isinstance(metrics, dict):
            raise TypeError(f"hpctrain.report: metrics must be a dict, got {type(metrics).__name__}")
        if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
            raise TypeError("hpctrain.report: checkpoint must be a hpctrain.Checkpoint "
                            "(e.g. Checkpoint.from_directory(path)), got "
                            f"{type(checkpoint).__name__}")
        started = time.time()
        self._collect()  # the previous report's agreement, complete by now
        iteration = self.iteration + 1
        index = self.next_checkpoint_index
        rank = self.info.world_rank
        if checkpoint is not None:
            manifest = stage_shard(self.run, index, rank, checkpoint,
                                   sync=self.checkpoint_config.sync_to_disk)
            if getattr(checkpoint, "_temporary", False):
                shutil.rmtree(checkpoint.path, ignore_errors=True)
        local = [1 if checkpoint is not None else 0, 1 if self._stop_requested.is_set() else 0]
        agreement = (self.coordinator.allreduce_max_async(local) if self.info.world_size > 1
                     else Done(local))
        self._pending = _Pending(agreement, iteration, index, metrics, started)
        name = self._collect() if checkpoint is not None else None
        if checkpoint is not None:  # after the commit, so it never competes with it
            self._threads.append(digest_shard_async(self.run, index, rank, list(manifest["files"])))
        now = time.perf_counter()
        row = dict(metrics)
        row.update(autofilled(iteration, now - self._last, time.time() - self._started,
                              self._detailed))
        row["checkpoint_dir_name"] = name
        if self._writer is not None:
            self._writer.write(row)
        if self._rank_results is not None:
            self._rank_results.write(json.dumps(
                {"rank": rank, "attempt": self.attempt, "metrics": row,
                 "checkpoint_dir_name": None if checkpoint is None else checkpoint_dir_name(index)},
                default=json_default) + "\n")
        self.iteration = iteration
        self.last_metrics = row
        self._last = now

    def _collect(self) -> Optional[str]:
        """Wait for the agreement in flight and act on it: count the checkpoint, publish it
        (rank 0), note a stop. Returns the published checkpoint's name, if any."""
        p, self._pending = self._pending, None
        if p is None:
            return None
        any_ckpt, stop = p.agreement.wait()
        self.stop_agreed = self.stop_agreed or bool(stop)
        if not any_ckpt:
            return None
        self.next_checkpoint_index = p.index + 1
        if self.info.world_rank != 0:
            return None
        name, deleter = publish(self.run, p.index, iteration=p.iteration, metrics=p.metrics,
                                world_size=self.info.world_size, config=self.checkpoint_config,
                                started=p.started)
        if deleter is not None:
            self._threads.append(deleter)
        return name

    # -- checkpoints ----------------------------------------------------------------
    def get_checkpoint(self) -> Optional[Checkpoint]:
        return Checkpoint(self.resume_checkpoint) if self.resume_checkpoint else None

    def staging_dir(self) -> str:
        return new_staging_dir(self.run, self.info.world_rank)

    # -- preemption (set by the signal handler / timer) -------------------------------
    def request_stop(self) -> None:
        self._stop_requested.set()

    def should_checkpoint(self) -> bool:
        return self._stop_requested.is_set() or self.stop_agreed

    def close(self) -> None:
        """End of the training function (every rank): settle the last agreement, wait
        for background digests and deletions."""
        self._collect()
        for t in self._threads:
            t.join(timeout=600)
        if self._writer is not None:
            self._writer.close()
        if self._rank_results is not None:
            self._rank_results.close()


class TrainContext:
    """What a training function can ask about its place in the job (Ray's TrainContext)."""

    def __init__(self, session: Session):
        self._s = session

    def get_world_rank(self) -> int:
        return self._s.info.world_rank

    def get_local_rank(self) -> int:
        return self._s.info.local_rank

    def get_node_rank(self) -> int:
        return self._s.info.node_rank

    def get_world_size(self) -> int:
        return self._s.info.world_size

    def get_local_world_size(self) -> int:
        return self._s.info.local_world_size

    def get_run_dir(self) -> str:
        return self._s.run.path

    def get_experiment_name(self) -> str:
        return self._s.run_name

    get_trial_name = get_experiment_name

    def get_job_id(self) -> str:
        return self._s.info.job_id

    def get_restart_count(self) -> int:
        return self._s.info.restart_count

    def get_attempt(self) -> int:
        return self._s.attempt

    def get_hosts(self) -> List[str]:
        return list(self._s.info.hosts)

    def get_master_addr(self) -> str:
        return self._s.info.master_addr

    def get_iteration(self) -> int:
        """Reports made so far in this run (continues after a resume)."""
        return self._s.iteration

    def should_checkpoint(self) -> bool:
        """True once the scheduler warned of preemption or the time limit: report a
        checkpoint now; the run stops cleanly after that report and resumes later."""
        return self._s.should_checkpoint()

    def get_checkpoint_staging_dir(self) -> str:
        """A fresh directory on the run's filesystem. A checkpoint reported from it is
        moved (one rename per file) instead of copied."""
        return self._s.staging_dir()

    def __repr__(self) -> str:
        i = self._s.info
        return (f"TrainContext(world_rank={i.world_rank}, local_rank={i.local_rank}, "
                f"node_rank={i.node_rank}, world_size={i.world_size}, run={self._s.run.path!r})")


_SESSION: Optional[Session] = None


def set_session(session: Optional[Session]) -> None:
    global _SESSION
    _SESSION = session


def get_session(caller: str = "this function") -> Session:
    if _SESSION is None:
        raise RuntimeError(
            f"hpctrain.{caller} must be called inside a training function started by a "
            "trainer (TorchTrainer(...).fit(), `hpctrain run job.toml`).\n"
            "HINT: pass your function to a trainer instead of calling it directly."
        )
    return _SESSION


def current_session() -> Optional[Session]:
    return _SESSION


Callback = Callable[[Dict[str, Any]], None]
