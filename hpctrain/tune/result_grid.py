"""``ResultGrid``: the results of a sweep's trials, as in Ray Tune 2."""
from __future__ import annotations

import math
import os
from typing import Any, Dict, Iterator, List, Optional

from ..errors import RunNotFoundError
from ..result import Result
from .sweepdir import FAILED, FINISHED, PENDING, SweepDir
from hpctrain.common.install import pip_install
from hpctrain.common.metrics import flatten
from hpctrain.rundir.layout import read_results


class TrialResult(Result):
    """A trial's :class:`~hpctrain.Result` with Ray Tune's ``config`` (the trial's sampled
    config, shaped as the param space: ``{"train_loop_config": {...}}`` for a trainer) and
    ``trial_id``."""

    _config: Optional[Dict[str, Any]] = None
    trial_id: str = ""

    @property
    def config(self) -> Optional[Dict[str, Any]]:  # type: ignore[override]
        return self._config

    @classmethod
    def for_trial(cls, sweep: SweepDir, trial: Dict[str, Any], status: str) -> "TrialResult":
        path = sweep.trial_path(trial["index"])
        if os.path.exists(os.path.join(path, "state.json")):
            base = Result.from_path(path)
            result = cls(metrics=base.metrics, checkpoint=base.checkpoint, error=base.error,
                         path=base.path, best_checkpoints=base.best_checkpoints,
                         status=base.status)
            if result.error is not None:
                result.error.result = result
        else:
            result = cls(metrics=None, checkpoint=None, error=None, path=path, status=status)
        result._config = trial["config"]
        result.trial_id = trial["trial_id"]
        return result

    def __repr__(self) -> str:
        return f"{self.trial_id}: {super().__repr__()}"


def _score(result: Result, metric: str, scope: str) -> Optional[List[float]]:
    """The trial's values of ``metric`` (finite numbers): its last report's
    (``scope="last"``), or all its reports' (``"all"``; the caller picks the best)."""
    if scope == "last":
        values = [(result.metrics or {}).get(metric)]
    else:

        values = [row.get(metric) for row in read_results(os.path.join(result.path,
                                                                       "result.json"))]
    numbers = [float(v) for v in values if isinstance(v, (int, float))
               and not isinstance(v, bool) and math.isfinite(float(v))]
    return numbers or None


class ResultGrid:
    """One :class:`TrialResult` per trial, in trial order: ``grid[i]``, ``len(grid)``,
    ``for result in grid``; ``get_best_result()``, ``get_dataframe()``, ``errors``,
    ``num_errors``, ``num_terminated``, ``experiment_path``."""

    def __init__(self, results: List[TrialResult], experiment_path: str,
                 metric: Optional[str] = None, mode: Optional[str] = None):
        self._results = results
        self.experiment_path = experiment_path
        self._metric = metric
        self._mode = mode

    @classmethod
    def from_path(cls, path: str | os.PathLike) -> "ResultGrid":
        """The results of the sweep at ``path`` as they are now (trials still running or
        never started included, with their status)."""
        sweep = SweepDir(path)
        if not sweep.exists():
            raise not_a_sweep(sweep.path, "ResultGrid.from_path")
        m = sweep.read()
        results = [TrialResult.for_trial(sweep, t, sweep.trial_status(t["index"], m))
                   for t in m.get("trials", [])]
        return cls(results, sweep.path, m.get("metric"), m.get("mode"))

    def __len__(self) -> int:
        return len(self._results)

    def __getitem__(self, i: int) -> TrialResult:
        return self._results[i]

    def __iter__(self) -> Iterator[TrialResult]:
        return iter(self._results)

    @property
    def errors(self) -> List[BaseException]:
        """The error of every trial that failed."""
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self) -> int:
        return sum(1 for r in self._results if r.status == FAILED)

    @property
    def num_terminated(self) -> int:
        """Trials that finished without an error."""
        return sum(1 for r in self._results if r.status == FINISHED)

    @property
    def unfinished(self) -> List[TrialResult]:
        """Trials that neither finished nor failed (not started, interrupted, stopped)."""
        return [r for r in self._results if r.status not in (FINISHED, FAILED)]

    def ranked(self, metric: Optional[str] = None, mode: Optional[str] = None,
               scope: str = "last") -> List[TrialResult]:
        """The trials that reported ``metric``, best first (ties: lower trial index)."""
        metric, mode = self._metric_mode(metric, mode)
        if scope not in ("last", "all"):
            raise ValueError(f'scope: expected "last" or "all", got {scope!r}')
        scored = []
        for i, r in enumerate(self._results):
            values = _score(r, metric, scope)
            if values:
                best = max(values) if mode == "max" else min(values)
                scored.append((best if mode == "min" else -best, i, r))
        return [r for _, _, r in sorted(scored, key=lambda t: (t[0], t[1]))]

    def _metric_mode(self, metric: Optional[str], mode: Optional[str]):
        metric = metric or self._metric
        mode = mode or self._mode
        if not metric or not mode:
            raise ValueError("No metric and/or mode is provided in get_best_result(), nor in "
                             "the TuneConfig of the Tuner: give metric= and mode= "
                             "(\"min\" or \"max\").")
        if mode not in ("min", "max"):
            raise ValueError(f'mode: expected "min" or "max", got {mode!r}')
        return metric, mode

    def get_best_result(self, metric: Optional[str] = None, mode: Optional[str] = None,
                        scope: str = "last", filter_nan_and_inf: bool = True) -> TrialResult:
        """The trial with the best ``metric`` (default: the TuneConfig's): its last report
        (``scope="last"``) or its best report (``"all"``). NaN and infinities never win."""
        ranked = self.ranked(metric, mode, scope)
        if not ranked:
            m, _ = self._metric_mode(metric, mode)
            raise RuntimeError(f"No trial reported the metric {m!r} "
                               f"({len(self._results)} trials, {self.num_errors} failed).")
        return ranked[0]

    def get_dataframe(self, filter_metric: Optional[str] = None,
                      filter_mode: Optional[str] = None):
        """One row per trial: its last report (or, with ``filter_metric``/``filter_mode``,
        its best report by that metric), ``config/...`` columns, ``trial_id``, ``status``
        and ``path``. Needs pandas."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("ResultGrid.get_dataframe() needs pandas.\nHINT: "
                              + pip_install("pandas")) from None

        rows = []
        for r in self._results:
            row: Dict[str, Any] = dict(r.metrics or {})
            if filter_metric and filter_mode:
                reports = [x for x in read_results(os.path.join(r.path, "result.json"))
                           if isinstance(x.get(filter_metric), (int, float))]
                if reports:
                    pick = max if filter_mode == "max" else min
                    row = dict(pick(reports, key=lambda x: x[filter_metric]))
            row.update(flatten(r.config or {}, "config/"))
            row.update(trial_id=r.trial_id, status=r.status, path=r.path)
            rows.append(row)
        return pd.DataFrame(rows)

    def __repr__(self) -> str:
        return (f"ResultGrid({len(self)} trials: {self.num_terminated} finished, "
                f"{self.num_errors} failed, {len(self.unfinished)} unfinished; "
                f"{self.experiment_path})")


__all__ = ["ResultGrid", "TrialResult", "PENDING"]


def not_a_sweep(path: str, caller: str) -> Exception:
    """The error for a path that is not a sweep directory (a ValueError and a
    FileNotFoundError, as for a run directory)."""

    why = ("it does not exist" if not os.path.exists(path) else
           "it is not a sweep directory (no sweep.json)")
    return RunNotFoundError(f"{caller}: {path}: {why}",
                            hint="give a sweep directory, <storage_path>/<name> (what "
                                 "ResultGrid.experiment_path shows)")
