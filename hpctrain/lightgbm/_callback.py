"""``RayTrainReportCallback`` for ``lightgbm.train`` (imports LightGBM)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Optional

import lightgbm

from hpctrain import gbdt
from . import CHECKPOINT_NAME


class RayTrainReportCallback:
    """Reports the round's eval metrics (``<valid name>-<metric>``, e.g.
    ``eval-multi_logloss``; ``-mean``/``-stdv`` under ``lightgbm.cv``) after every round
    and, every ``frequency`` rounds and at the last round (``checkpoint_at_end``), a
    checkpoint of rank 0's model as ``model.txt`` (``filename``). As Ray's."""

    CHECKPOINT_NAME = CHECKPOINT_NAME

    def __init__(self, metrics: gbdt.Metrics = None, filename: str = CHECKPOINT_NAME,
                 frequency: int = 0, checkpoint_at_end: bool = True,
                 results_postprocessing_fn: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None):
        self._rules = gbdt.ReportRules(metrics, filename, frequency, checkpoint_at_end,
                                       results_postprocessing_fn)

    @classmethod
    def get_model(cls, checkpoint, filename: str = CHECKPOINT_NAME) -> lightgbm.Booster:
        """The booster saved in ``checkpoint`` by this callback."""
        return lightgbm.Booster(model_file=gbdt.model_path(checkpoint, filename))

    @staticmethod
    def _eval_result(env) -> Dict[str, Dict[str, Any]]:
        out: Dict[str, Dict[str, Any]] = {}
        for entry in env.evaluation_result_list:
            data, metric, value = entry[:3]
            suffix = "-mean" if len(entry) > 4 else ""
            out.setdefault(data, {})[metric + suffix] = value
            if len(entry) > 4:
                out[data][metric + "-stdv"] = entry[4]
        return out

    def __call__(self, env) -> None:
        metrics = self._rules.report_dict(self._eval_result(env))
        last = env.iteration == env.end_iteration - 1
        if (last and self._rules.checkpoint_at_end) or self._rules.checkpoints_at(env.iteration):
            model = env.model
            gbdt.report(metrics, lambda d: model.save_model(Path(d, self._rules.filename).as_posix()))
        else:
            gbdt.report(metrics)
