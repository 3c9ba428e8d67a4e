"""What the XGBoost and LightGBM integrations share: the report callbacks' rules (Ray's
``RayTrainReportCallback``: metric names, ``frequency``, ``checkpoint_at_end``, rank 0's
model file in the checkpoint) and the ``params``/``label_column`` trainers' data and
arguments. Imports neither library."""
from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import hpctrain
from hpctrain.checkpoint import Checkpoint
from hpctrain.errors import ConfigError

Metrics = Optional[Union[str, List[str], Dict[str, str]]]


class ReportRules:
    """Ray's ``RayReportCallback`` arguments, checked, and what follows from them."""

    def __init__(self, metrics: Metrics = None, filename: str = "", frequency: int = 0,
                 checkpoint_at_end: bool = True,
                 results_postprocessing_fn: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None):
        if isinstance(metrics, str):
            metrics = [metrics]
        if metrics is not None and not isinstance(metrics, (list, tuple, dict)):
            raise ConfigError(f"metrics: expected a metric name, a list of names or a dict "
                              f"of reported name → library name, got {type(metrics).__name__}",
                              hint='e.g. metrics={"loss": "valid-logloss"}')
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 0:
            raise ConfigError(f"frequency: expected an integer >= 0 (0: no checkpoints "
                              f"during training), got {frequency!r}", hint="e.g. frequency=5")
        if not isinstance(filename, str) or not filename or os.sep in filename:
            raise ConfigError(f"filename: expected a file name, got {filename!r}",
                              hint="e.g. filename=\"model.ubj\"")
        self.metrics = metrics
        self.filename = filename
        self.frequency = frequency
        self.checkpoint_at_end = bool(checkpoint_at_end)
        self.postprocess = results_postprocessing_fn

    def report_dict(self, evals: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
        """``{"train": {"logloss": [...]}}`` → ``{"train-logloss": <last value>}``, then
        ``metrics``' selection and renaming, then ``results_postprocessing_fn``."""
        flat: Dict[str, Any] = {}
        for data, by_metric in evals.items():
            for metric, values in by_metric.items():
                flat[f"{data}-{metric}"] = values[-1] if isinstance(values, (list, tuple)) else values
        if self.metrics:
            pairs = self.metrics.items() if isinstance(self.metrics, dict) else \
                ((m, m) for m in self.metrics)
            out = {}
            for key, metric in pairs:
                if metric not in flat:
                    raise ConfigError(f"metrics: no metric {metric!r} in this round's results "
                                      f"(they are: {', '.join(sorted(flat)) or 'none'})",
                                      hint="name metrics as <eval set name>-<metric>, e.g. "
                                           "\"valid-logloss\"")
                out[key] = flat[metric]
            flat = out
        return self.postprocess(flat) if self.postprocess else flat

    def checkpoints_at(self, iteration: int) -> bool:
        """Round ``iteration`` (from 0) is a checkpoint round: ``(iteration + 1) %
        frequency == 0``."""
        return self.frequency != 0 and (iteration + 1) % self.frequency == 0


def report(metrics: Dict[str, Any], save: Optional[Callable[[str], None]] = None) -> None:
    """``hpctrain.report(metrics)``; with ``save``, rank 0 writes its model with
    ``save(path)`` into a temporary directory handed in as the checkpoint (every rank holds
    the same model: the others hand in none)."""

    if save is None or hpctrain.get_context().get_world_rank() != 0:
        hpctrain.report(metrics)
        return
    with tempfile.TemporaryDirectory(prefix="hpctrain-gbdt-") as d:
        save(d)
        hpctrain.report(metrics, checkpoint=hpctrain.Checkpoint.from_directory(d))


def model_path(checkpoint: Any, filename: str) -> str:
    """The model file of a checkpoint; a clear error when it has none."""

    if not isinstance(checkpoint, Checkpoint):
        raise ConfigError(f"get_model: expected a hpctrain.Checkpoint, got {type(checkpoint).__name__}",
                          hint="e.g. get_model(result.checkpoint)")
    path = os.path.join(checkpoint.path, filename)
    if not os.path.isfile(path):
        present = sorted(os.listdir(checkpoint.path)) if os.path.isdir(checkpoint.path) else []
        raise ConfigError(f"get_model: no {filename!r} in checkpoint {checkpoint.path} (it holds: "
                          f"{', '.join(present) or 'nothing'})",
                          hint="pass filename= as given to RayTrainReportCallback(filename=...)")
    return path


# -- the params/label_column/num_boost_round trainers ----------------------------------------
def check_legacy(name: str, params: Any, label_column: Any, num_boost_round: Any,
                 datasets: Any, checkpoint_frequency: Any = 0) -> None:
    """The arguments of ``XGBoostTrainer(params=..., label_column=..., datasets=...)``."""
    if isinstance(checkpoint_frequency, bool) or not isinstance(checkpoint_frequency, int) \
            or checkpoint_frequency < 0:
        raise ConfigError(f"{name}: checkpoint_frequency: expected an integer >= 0 (0: a "
                          f"checkpoint at the end only), got {checkpoint_frequency!r}",
                          hint="e.g. checkpoint_frequency=10")
    if not isinstance(params, dict):
        raise ConfigError(f"{name}: params: expected a dict of the library's parameters, got "
                          f"{type(params).__name__}", hint='e.g. params={"objective": "binary:logistic"}')
    if not isinstance(label_column, str) or not label_column:
        raise ConfigError(f"{name}: label_column: expected a column name, got {label_column!r}",
                          hint='e.g. label_column="target"')
    if isinstance(num_boost_round, bool) or not isinstance(num_boost_round, int) or num_boost_round < 1:
        raise ConfigError(f"{name}: num_boost_round: expected an integer >= 1, got {num_boost_round!r}",
                          hint="e.g. num_boost_round=10")
    if not isinstance(datasets, dict) or "train" not in datasets:
        got = sorted(datasets) if isinstance(datasets, dict) else type(datasets).__name__
        raise ConfigError(f"{name}: datasets: expected a dict with a \"train\" dataset, got {got}",
                          hint='e.g. datasets={"train": train_df, "valid": valid_df}')


def features_and_label(dataset: str, label_column: str) -> Tuple[Any, Any]:
    """This rank's rows of ``dataset`` as (features DataFrame, label Series)."""

    df = hpctrain.get_dataset_shard(dataset).to_pandas()
    if label_column not in df.columns:
        raise ConfigError(f"label_column: no column {label_column!r} in dataset {dataset!r} "
                          f"(its columns: {', '.join(map(str, df.columns))})",
                          hint="give label_column= one of the dataset's columns (HDF5: one "
                               "1-D dataset per column, e.g. \"train.h5:x0,x1,y\")")
    return df.drop(columns=[label_column]), df[label_column]
