"""``XGBoostTrainer`` and ``LightGBMTrainer``'s shared constructor: a Ray 2.x training
function, or Ray's older ``params``/``label_column``/``num_boost_round`` style (a built-in
training function, :mod:`hpctrain.xgboost._legacy` / :mod:`hpctrain.lightgbm._legacy`)."""
from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, Optional

from ..trainer import DataParallelTrainer
from . import check_legacy

class GBDTTrainer(DataParallelTrainer):
    """The constructor both trainers share; a subclass names its library (``_library``:
    "xgboost"), which gives its backend, its ``<library>_config`` keyword and its
    ``hpctrain.<library>._legacy.train_loop``."""

    _library = ""

    def _setup(self, train_loop_per_worker: Optional[Callable],
               train_loop_config: Optional[Dict[str, Any]], backend_config: Any,
               params: Optional[Dict[str, Any]], label_column: Optional[str],
               num_boost_round: int, dmatrix_params: Optional[Dict[str, Dict[str, Any]]],
               checkpoint_frequency: int, common: Dict[str, Any],
               train_kwargs: Dict[str, Any]) -> None:
        """``common``: the keywords every trainer has (``scaling_config``…, ``site``);
        ``train_kwargs``: the other keywords, for ``xgboost.train``/``lightgbm.train``."""
        name, lib = type(self).__name__, self._library
        if train_loop_per_worker is None:

            check_legacy(name, params, label_column, num_boost_round, common.get("datasets"),
                         checkpoint_frequency)
            train_loop_per_worker = importlib.import_module(
                f"hpctrain.{lib}._legacy").train_loop
            train_loop_config = {"params": params, "label_column": label_column,
                                 "num_boost_round": num_boost_round,
                                 "dmatrix_params": dmatrix_params or {},
                                 "evals": [n for n in common["datasets"] if n != "train"],
                                 "checkpoint_frequency": checkpoint_frequency,
                                 "train_kwargs": train_kwargs}
        elif checkpoint_frequency:
            raise TypeError(f"{name}: checkpoint_frequency= is for the params= style; in a "
                            "training function, pass RayTrainReportCallback(frequency=N)")
        elif train_kwargs:
            raise TypeError(f"{name}: unexpected keyword {sorted(train_kwargs)[0]!r} "
                            f"({lib}.train's keywords go with params=..., not with a "
                            "training function)")
        DataParallelTrainer.__init__(
            self, train_loop_per_worker, train_loop_config=train_loop_config,
            backend_config=self._backend_config(backend_config, f"{lib}_config"), **common)
