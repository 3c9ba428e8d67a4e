"""The training function of ``XGBoostTrainer(params=..., label_column=...)``."""
from __future__ import annotations

from typing import Any, Dict

import hpctrain
from hpctrain.gbdt import features_and_label, report


def train_loop(config: Dict[str, Any]) -> None:
    import xgboost


    from ._callback import RayTrainReportCallback

    label = config["label_column"]

    def dmatrix(name: str) -> Any:
        x, y = features_and_label(name, label)
        return xgboost.DMatrix(x, label=y, **config["dmatrix_params"].get(name, {}))

    dtrain = dmatrix("train")
    evals = [(dtrain, "train")] + [(dmatrix(n), n) for n in config["evals"]]
    checkpoint = hpctrain.get_checkpoint()
    model = RayTrainReportCallback.get_model(checkpoint) if checkpoint else None
    remaining = config["num_boost_round"] - (model.num_boosted_rounds() if model else 0)
    if remaining <= 0:  # already trained in full: hand the model in again
        report({}, lambda d: model.save_model(f"{d}/{RayTrainReportCallback.CHECKPOINT_NAME}"))
        return
    kwargs = dict(config["train_kwargs"])
    callback = RayTrainReportCallback(frequency=config["checkpoint_frequency"])
    kwargs.setdefault("verbose_eval", False)
    xgboost.train(config["params"], dtrain, num_boost_round=remaining, evals=evals,
                  xgb_model=model, callbacks=[callback] + list(kwargs.pop("callbacks", [])),
                  **kwargs)
