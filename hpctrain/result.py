"""``Result``: what a run left in its run directory, as in Ray Train 2."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .checkpoint import Checkpoint
from .errors import (ControllerError, RunNotFoundError, TrainingStoppedError,
                     WorkerGroupError, WorkerTraceback)
from hpctrain.rundir.layout import (CheckpointRecord, RunDir, best_checkpoints,
                                              existing_run, read_results)
from hpctrain.common.registry import is_local_path
from hpctrain.common.trust import MAX_CONTROL_BYTES, load_own_pickle, load_trusted_pickle
from .worker.entry import ERROR_PICKLE, MAX_ERROR_PICKLE_BYTES, RETURN_FILE


@dataclass
class Result:
    """``metrics``: the last report of rank 0 (with the autofilled fields).
    ``checkpoint``: the latest committed checkpoint. ``best_checkpoints``: as in Ray, the
    ``num_to_keep`` best checkpoints by ``checkpoint_score_attribute`` (all of them when
    ``num_to_keep`` is None; by recency without a score attribute), with their metrics,
    ordered worst to best. The latest checkpoint, which retention always keeps (a restart
    resumes from it), is listed there only when it is one of the best. ``error``: a
    :class:`TrainingFailedError` when the run failed. ``path``: the run directory (for a run
    on an object store: its URI, ``s3://bucket/prefix/name``)."""

    metrics: Optional[Dict[str, Any]]
    checkpoint: Optional[Checkpoint]
    error: Optional[BaseException]
    path: str
    best_checkpoints: List[Tuple[Checkpoint, Dict[str, Any]]] = field(default_factory=list)
    status: str = "UNKNOWN"
    #: where the last attempt's rank 0 left its return value (see ``return_value``)
    _return_file: Optional[str] = field(default=None, repr=False, compare=False)

    @property
    def return_value(self) -> Any:
        """What rank 0's training function returned, in the run's last attempt (None
        when it returned None, failed, or its value could not be pickled). Unpickled on
        first access, and only from a file of your own (someone else's run raises
        :class:`~hpctrain.errors.UnsafePathError` rather than run their code)."""
        if self._return_file is None or not os.path.exists(self._return_file):
            return None
        return load_trusted_pickle(self._return_file, what="rank 0's return value",
                                   max_bytes=MAX_CONTROL_BYTES)

    def get_best_checkpoint(self, metric: str, mode: str) -> Optional[Checkpoint]:
        """The checkpoint of ``best_checkpoints`` whose ``metric`` is the highest
        (``mode="max"``) or lowest (``"min"``), as Ray's ``Result.get_best_checkpoint``:
        RuntimeError when the run kept no checkpoint or none has ``metric``, ValueError
        for another mode."""
        if not self.best_checkpoints:
            raise RuntimeError("No checkpoint exists in the trial directory!")
        if mode not in ("max", "min"):
            raise ValueError(f'Unsupported mode: {mode}. Please choose from ["min", "max"]!')
        valid = [(ckpt, m) for ckpt, m in self.best_checkpoints if metric in m]
        if not valid:
            raise RuntimeError(
                f"Invalid metric name {metric}! You may choose from the following metrics: "
                f"{(self.metrics or {}).keys()}.")
        op = max if mode == "max" else min
        return op(valid, key=lambda pair: pair[1][metric])[0]

    @property
    def filesystem(self) -> Any:
        """The ``pyarrow.fs`` filesystem holding the run (Ray's attribute):
        ``LocalFileSystem`` for a run on a shared filesystem, ``S3FileSystem`` for a run
        under ``s3://`` (whose :attr:`path` is then its URI)."""
        import pyarrow.fs as pafs

        storage = RunDir(self.path).storage
        if storage.local:
            return pafs.LocalFileSystem()
        return storage.filesystem(self.path)

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

        try:
            run = existing_run(path, "Result.from_path")
        except RunNotFoundError:
            found = _from_data_alone(os.fspath(path))
            if found is None:
                raise
            return found
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
            if isinstance(rank, int) and rank >= 0:
                failures = _worker_failures(run, failed[-1])
                if rank not in failures:
                    failures[rank] = WorkerTraceback(tb)
                cause = failures[rank]
                error = WorkerGroupError.for_cause(
                    text, None if isinstance(cause, WorkerTraceback) else cause, rank=rank,
                    worker_traceback=tb, worker_failures=dict(sorted(failures.items())))
                if error.__cause__ is not None:  # the same object in both places
                    error.worker_failures[rank] = error.__cause__
            else:  # the launcher (rank -1) or the batch step: no rank's exception
                error = ControllerError(RuntimeError(text))
                error.rank, error.worker_traceback = rank, tb
                error.__cause__ = WorkerTraceback(tb) if tb else None
        result = cls(
            metrics=rows[-1] if rows else (dict(records[-1].metrics) if records else None),
            checkpoint=records[-1].checkpoint() if records else None,
            error=error,
            path=run.path if run.storage.local else run.location,
            best_checkpoints=[(r.checkpoint(), r.metrics) for r in _best(run, records)],
            status=state.get("status", "UNKNOWN"),
            _return_file=(os.path.join(run.attempt_dir(len(state["attempts"])),
                                       RETURN_FILE.format(rank=0))
                          if state.get("attempts") else None),
        )
        if error is not None:
            error.result = result
        return result

    def __repr__(self) -> str:
        shown = {k: v for k, v in (self.metrics or {}).items() if not k.startswith("_")}
        return (f"Result(metrics={shown}, path={self.path!r}, checkpoint={self.checkpoint!r}, "
                f"status={self.status!r}{', error=' + repr(type(self.error).__name__) if self.error else ''})")


def _from_data_alone(path: str) -> Optional[Result]:
    """The Result of a run on an object store read where its control directory is not
    (another machine): its committed checkpoints and their metrics, from the store alone
    (status ``UNKNOWN``); None when ``path`` is no such location or holds none."""
    if is_local_path(path):
        return None
    run = RunDir(path)
    records = [] if run.storage.local else run.list_checkpoints()
    if not records:
        return None
    return Result(metrics=dict(records[-1].metrics), checkpoint=records[-1].checkpoint(),
                  error=None, path=run.location,
                  best_checkpoints=[(r.checkpoint(), r.metrics) for r in records])


def _best(run: RunDir, records: List[CheckpointRecord]) -> List[CheckpointRecord]:
    """:func:`best_checkpoints` by the run's ``[checkpoint]`` settings (``spec.toml``);
    every checkpoint, oldest first, when the spec cannot be read."""
    try:
        ck = (run.read_spec(to_show=True) or {}).get("checkpoint") or {}
    except (OSError, ValueError):  # refused (UnsafePathError), damaged (ConfigError)
        ck = {}
    return best_checkpoints(records, ck.get("num_to_keep"), ck.get("checkpoint_score_attribute"),
                            ck.get("checkpoint_score_order", "max"))


def _worker_failures(run: RunDir, attempt: Dict[str, Any]) -> Dict[int, BaseException]:
    """``{rank: exception}`` of every rank of ``attempt`` that failed of its own fault
    and left its exception (``error.rank-R.pickle``, see the worker) that loads here."""
    number = attempt.get("attempt")
    if not isinstance(number, int):
        return {}
    adir = run.attempt_dir(number)
    pattern = re.compile(re.escape(ERROR_PICKLE).replace(r"\{rank\}", r"(\d+)") + "$")
    try:
        names = os.listdir(adir)
    except OSError:
        return {}
    # the ranks that failed of their own fault (the supervisor leaves out a rank that
    # only lost its peer); a run of an earlier hpctrain has no such list: every rank
    own = attempt.get("failed_ranks")
    failures: Dict[int, BaseException] = {}
    for name in names:
        m = pattern.match(name)
        if m and (not isinstance(own, list) or int(m.group(1)) in own):
            exc = load_own_pickle(os.path.join(adir, name), MAX_ERROR_PICKLE_BYTES)
            if isinstance(exc, BaseException):
                failures[int(m.group(1))] = exc
    return failures


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
        err = result.error or ControllerError(RuntimeError("training failed"), result=result)
        err.result = result
        raise err
    return result
