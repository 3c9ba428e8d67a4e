"""Data and training functions for the XGBoost/LightGBM tests (imported by the workers;
the libraries are imported inside the functions)."""
import json
import os

import numpy as np

import hpctrain

FEATURES = [f"x{i}" for i in range(5)]
XGB_PARAMS = {"tree_method": "hist", "objective": "binary:logistic", "max_depth": 3,
              "eval_metric": "logloss", "nthread": 1}
# LightGBM finds each feature's bins from the rows of one rank when distributed: with
# 16 distinct values per feature every value is a bin of its own on every rank, as in one
# process, so the two models must be the same
LGB_PARAMS = {"objective": "binary", "num_leaves": 7, "verbosity": -1,
              "metric": "binary_logloss", "num_threads": 1, "deterministic": True}


def frame(rows=2000, seed=0, discrete=False):
    """A pandas DataFrame: features x0..x4 and a 0/1 label y."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    if discrete:
        x = rng.integers(0, 16, size=(rows, 5)).astype(float)
        y = (x[:, 0] + rng.normal(size=rows) * 4 > x[:, 1]).astype(float)
    else:
        x = rng.normal(size=(rows, 5))
        y = (x[:, 0] + x[:, 1] ** 2 + rng.normal(size=rows) * 0.3 > 1).astype(float)
    df = pd.DataFrame(x, columns=FEATURES)
    df["y"] = y
    return df


def _append(name, record):
    d = os.path.join(hpctrain.get_context().get_run_dir(), "test-out")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "a") as f:
        f.write(json.dumps(record) + "\n")


def _record_start(ctx, start, df):
    """Rank 0: the round this attempt starts from, its rows, the hosts, its node."""
    if ctx.get_world_rank() == 0:
        _append("starts.jsonl", {"attempt": ctx.get_attempt(), "start": start,
                                 "rows": int(len(df)), "hosts": ctx.get_hosts(),
                                 "node": os.environ.get("SLURMD_NODENAME")})


def xgb_train(config):
    """Ray 2.x style: resume from the last checkpoint, train up to config["rounds"] trees
    with a checkpoint every config["frequency"]; on the first attempt, rank
    config["crash_rank"] raises after round config["crash_at"] (counted from 1), or kills
    itself with SIGKILL when config["crash_how"] is "sigkill"."""
    import xgboost

    from hpctrain.xgboost import RayTrainReportCallback

    ctx = hpctrain.get_context()
    df = hpctrain.get_dataset_shard("train").materialize().to_pandas()
    dtrain = xgboost.DMatrix(df.drop("y", axis=1), label=df["y"])
    checkpoint = hpctrain.get_checkpoint()
    model = RayTrainReportCallback.get_model(checkpoint) if checkpoint else None
    start = model.num_boosted_rounds() if model else 0
    _record_start(ctx, start, df)
    callbacks = [RayTrainReportCallback(frequency=config.get("frequency", 0))]
    if config.get("crash_at") and ctx.get_restart_count() == 0:
        callbacks.append(crash_callback(config["crash_at"], config.get("crash_rank", 1),
                                        how=config.get("crash_how")))
    xgboost.train(XGB_PARAMS, dtrain, num_boost_round=config["rounds"] - start,
                  evals=[(dtrain, "train")], xgb_model=model, callbacks=callbacks,
                  verbose_eval=False)


def crash_callback(at, rank, record=False, how=None):
    import xgboost

    class Crash(xgboost.callback.TrainingCallback):
        """With ``record``, rank 0 records the round each attempt starts from; on the
        first attempt, ``rank`` raises after round ``at`` (``how="sigkill"``: kills itself,
        no Python left to report anything)."""

        def before_training(self, model):
            ctx = hpctrain.get_context()
            if record and ctx.get_world_rank() == 0:
                _append("starts.jsonl", {"attempt": ctx.get_attempt(),
                                         "start": model.num_boosted_rounds()})
            return model

        def after_iteration(self, model, epoch, evals_log):
            ctx = hpctrain.get_context()
            if model.num_boosted_rounds() == at and ctx.get_world_rank() == rank and \
                    ctx.get_restart_count() == 0:
                if how == "sigkill":
                    import signal

                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError(f"injected crash after round {at}")
            return False

    return Crash()


def lgb_train(config):
    """Ray 2.x style, Ray's quick start's shape: no network parameters in params; resumes
    from the last checkpoint (``init_model``); on the first attempt, rank
    config["crash_rank"] raises after round config["crash_at"] when that is set."""
    import lightgbm

    from hpctrain.lightgbm import RayTrainReportCallback

    ctx = hpctrain.get_context()
    df = hpctrain.get_dataset_shard("train").materialize().to_pandas()
    train_set = lightgbm.Dataset(df.drop("y", axis=1), label=df["y"])
    checkpoint = hpctrain.get_checkpoint()
    model = RayTrainReportCallback.get_model(checkpoint) if checkpoint else None
    start = model.current_iteration() if model else 0
    _record_start(ctx, start, df)
    callbacks = [RayTrainReportCallback(frequency=config.get("frequency", 0))]
    if config.get("crash_at") and ctx.get_restart_count() == 0:
        def crash(env):
            if env.iteration + 1 == config["crash_at"] and \
                    ctx.get_world_rank() == config.get("crash_rank", 1):
                raise RuntimeError(f"injected crash after round {config['crash_at']}")
        callbacks.append(crash)
    lightgbm.train(LGB_PARAMS, train_set, num_boost_round=config["rounds"] - start,
                   valid_sets=[train_set], valid_names=["train"], init_model=model,
                   callbacks=callbacks)
