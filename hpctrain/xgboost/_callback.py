"""``RayTrainReportCallback`` for ``xgboost.train`` (imports XGBoost)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Optional

import xgboost
from xgboost.callback import TrainingCallback

from hpctrain import gbdt
from . import CHECKPOINT_NAME


class RayTrainReportCallback(TrainingCallback):
    """Reports the round's eval metrics (``<eval name>-<metric>``, e.g.
    ``valid-logloss``) after every round and, every ``frequency`` rounds
    (``(round + 1) % frequency == 0``; 0: never) and at the end
    (``checkpoint_at_end``), a checkpoint of rank 0's model as ``model.ubj``
    (``filename``). ``metrics``: a name, a list, or ``{reported name: xgboost name}``;
    ``results_postprocessing_fn``: applied to the dict last. As Ray's."""

    CHECKPOINT_NAME = CHECKPOINT_NAME

    def __init__(self, metrics: gbdt.Metrics = None, filename: str = CHECKPOINT_NAME,
                 frequency: int = 0, checkpoint_at_end: bool = True,
                 results_postprocessing_fn: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None):
        super().__init__()
        self._rules = gbdt.ReportRules(metrics, filename, frequency, checkpoint_at_end,
                                       results_postprocessing_fn)
        self._evals_log: Dict[str, Any] = {}
        self._last_checkpoint_iteration: Optional[int] = None

    @classmethod
    def get_model(cls, checkpoint, filename: str = CHECKPOINT_NAME) -> xgboost.Booster:
        """The booster saved in ``checkpoint`` by this callback."""
        booster = xgboost.Booster()
        booster.load_model(gbdt.model_path(checkpoint, filename))
        return booster

    def _save(self, model: xgboost.Booster) -> Callable[[str], None]:
        return lambda d: model.save_model(Path(d, self._rules.filename).as_posix())

    def after_iteration(self, model, epoch: int, evals_log) -> bool:
        self._evals_log = evals_log
        metrics = self._rules.report_dict(evals_log)
        if self._rules.checkpoints_at(epoch):
            self._last_checkpoint_iteration = epoch
            gbdt.report(metrics, self._save(model))
        else:
            gbdt.report(metrics)
        return False

    def after_training(self, model):
        if not self._rules.checkpoint_at_end:
            return model
        if self._last_checkpoint_iteration is not None and \
                model.num_boosted_rounds() - 1 == self._last_checkpoint_iteration:
            return model  # this round's checkpoint is already the last one
        metrics = self._rules.report_dict(self._evals_log) if self._evals_log else {}
        gbdt.report(metrics, self._save(model))
        return model
