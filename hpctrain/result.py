"""``Result``: what a run left in its run directory, as in Ray Train 2."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .checkpoint import Checkpoint
from .errors import TrainingFailedError, TrainingStoppedError
from hpctrain._internal.rundir.layout import (CheckpointRecord, RunDir, best_checkpoints,
                                              existing_run, read_results)
from hpctrain._internal.base.trust import load_own_pickle


@dataclass
class Result:
    """``metrics``: the last report of rank 0 (with the autofilled fields).
    ``checkpoint``: the latest committed checkpoint. ``best_checkpoints``: as in Ray, the
    ``num_to_keep`` best checkpoints by ``checkpoint_score_attribute`` (all of them when
    ``num_to_keep`` is None; by recency without a score attribute), with their metrics,
    ordered worst to best. The latest checkpoint, which retention always keeps (a restart
    resumes from it), is listed there only when it is one of the best. ``error``: a
    :class:`TrainingFailedError` when the run failed. ``path``: the run directory."""

    metrics: Optional[Dict[str, Any]]
    checkpoint: Optional[Checkpoint]
    error: Optional[BaseException]
    path: str
    best_checkpoints: List[Tuple[Checkpoint, Dict[str, Any]]] = field(default_factory=list)
    status: str = "UNKNOWN"

    @property
    def metrics_dataframe(self):
        """Every report of rank 0 as a pandas DataFrame (one row per report)."""
        import pandas as pd

        return pd.DataFrame(read_results(RunDir(self.path).result_file))

    @property
    def config(self) -> Optional[Dict[str, Any]]:
        """The train_loop_config the run was started with, as its ``spec.toml`` records it
        (a value TOML cannot hold shows as its repr, a credential-looking key as
        ``<redacted…>``). Read as data, never unpickled: a Result of someone else's run
        runs none of their code. None when the run directory has no readable
        ``spec.toml``."""
        try:
            data = RunDir(self.path).read_spec(to_show=True) or {}
        except (OSError, ValueError):  # refused (UnsafePathError), damaged (ConfigError)
            return None
        config = data.get("config")
        return dict(config) if isinstance(config, dict) else None

    @classmethod
    def from_path(cls, path: str | os.PathLike) -> "Result":
        """Rebuild the Result of a run from its directory (finished, failed or running).
        A missing path, or one that is not a run directory, raises
        :class:`~hpctrain.errors.RunNotFoundError` (a RuntimeError as in Ray, a ValueError
        and a FileNotFoundError). A run stopped before its first result line still
        gives its committed checkpoints with their metrics; ``metrics`` is then the
        latest checkpoint's."""

        run = existing_run(path, "Result.from_path")
        rows = read_results(run.result_file)
        records = run.list_checkpoints()
        state = run.read_state()
        error = None
        if state.get("status") == "FAILED" and os.path.exists(run.error_file):
            with open(run.error_file) as f:
                text = f.read()
            failed = [a for a in state.get("attempts", []) if a.get("failed_rank") is not None]
            rank = failed[-1]["failed_rank"] if failed else None
            tb = text.split("\n\n", 1)[1] if "\n\n" in text else text
            cause = _worker_exception(run, failed[-1]) if failed else None
            error = TrainingFailedError.for_cause(text, cause, rank=rank, worker_traceback=tb)
        result = cls(
            metrics=rows[-1] if rows else (dict(records[-1].metrics) if records else None),
            checkpoint=records[-1].checkpoint() if records else None,
            error=error,
            path=run.path,
            best_checkpoints=[(r.checkpoint(), r.metrics) for r in _best(run, records)],
            status=state.get("status", "UNKNOWN"),
        )
        if error is not None:
            error.result = result
        return result

    def __repr__(self) -> str:
        shown = {k: v for k, v in (self.metrics or {}).items() if not k.startswith("_")}
        return (f"Result(metrics={shown}, path={self.path!r}, checkpoint={self.checkpoint!r}, "
                f"status={self.status!r}{', error=' + repr(type(self.error).__name__) if self.error else ''})")


def _best(run: RunDir, records: List[CheckpointRecord]) -> List[CheckpointRecord]:
    """:func:`best_checkpoints` by the run's ``[checkpoint]`` settings (``spec.toml``);
    every checkpoint, oldest first, when the spec cannot be read."""
    try:
        ck = (run.read_spec(to_show=True) or {}).get("checkpoint") or {}
    except (OSError, ValueError):  # refused (UnsafePathError), damaged (ConfigError)
        ck = {}
    return best_checkpoints(records, ck.get("num_to_keep"), ck.get("checkpoint_score_attribute"),
                            ck.get("checkpoint_score_order", "max"))


def _worker_exception(run: RunDir, attempt: Dict[str, Any]) -> Optional[BaseException]:
    """The exception object the failed rank of ``attempt`` raised, when it left one
    (``error.rank-R.pickle``, see the worker) that unpickles here."""
    from ._internal.worker.entry import ERROR_PICKLE, MAX_ERROR_PICKLE_BYTES

    number, rank = attempt.get("attempt"), attempt.get("failed_rank")
    if not isinstance(number, int) or not isinstance(rank, int):
        return None
    exc = load_own_pickle(os.path.join(run.attempt_dir(number), ERROR_PICKLE.format(rank=rank)),
                          MAX_ERROR_PICKLE_BYTES)
    return exc if isinstance(exc, BaseException) else None


def result_or_raise(path: str, status: str) -> Result:
    """The Result of a run that ended with ``status``; raises its TrainingFailedError
    (carrying the Result) when it FAILED."""
    result = Result.from_path(path)
    if status == "STOPPED":
        state = RunDir(path).read_state()
        raise TrainingStoppedError(
            f"the run stopped cleanly after the scheduler's warning and was not requeued: "
            f"{state.get('stopped_because')}; its latest checkpoint is "
            f"{result.checkpoint.path if result.checkpoint else None}"
            f"\nHINT: continue it with Trainer.restore({path!r}).fit(), or run or submit "
            "the job again", result=result)
    if status == "FAILED":
        err = result.error or TrainingFailedError("training failed", result=result)
        err.result = result
        raise err
    return result
