"""The training function of ``LightGBMTrainer(params=..., label_column=...)``."""
from __future__ import annotations

from typing import Any, Dict

import hpctrain
from ..backends.lightgbm import with_network
from hpctrain.gbdt import features_and_label, report


def train_loop(config: Dict[str, Any]) -> None:
    import lightgbm


    from ._callback import RayTrainReportCallback

    label = config["label_column"]

    def dataset(name: str, reference: Any = None) -> Any:
        x, y = features_and_label(name, label)
        return lightgbm.Dataset(x, label=y, reference=reference,
                                **config["dmatrix_params"].get(name, {}))

    train_set = dataset("train")
    valid = [dataset(n, train_set) for n in config["evals"]]
    checkpoint = hpctrain.get_checkpoint()
    model = RayTrainReportCallback.get_model(checkpoint) if checkpoint else None
    remaining = config["num_boost_round"] - (model.current_iteration() if model else 0)
    if remaining <= 0:
        report({}, lambda d: model.save_model(f"{d}/{RayTrainReportCallback.CHECKPOINT_NAME}"))
        return
    kwargs = dict(config["train_kwargs"])
    callback = RayTrainReportCallback(frequency=config["checkpoint_frequency"])
    lightgbm.train(with_network(config["params"]), train_set, num_boost_round=remaining,
                   valid_sets=[train_set] + valid, valid_names=["train"] + config["evals"],
                   init_model=model,
                   callbacks=[callback] + list(kwargs.pop("callbacks", [])),
                   **kwargs)
