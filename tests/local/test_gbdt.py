"""XGBoostTrainer and LightGBMTrainer: real XGBoost/LightGBM collectives over 2 local
worker processes, models compared with one process trained on the same rows."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gbdt_workloads import (LGB_PARAMS, XGB_PARAMS, crash_callback, frame, lgb_train,
                            xgb_train)
from helpers import ROOT, run_state

xgboost = pytest.importorskip("xgboost")
lightgbm = pytest.importorskip("lightgbm")

from hpctrain import (Checkpoint, ConfigError, FailureConfig, Result,  # noqa: E402
                      RunConfig, ScalingConfig)
from hpctrain.lightgbm import LightGBMTrainer  # noqa: E402
from hpctrain.xgboost import XGBoostTrainer  # noqa: E402


def _run(storage, max_failures=0, name=None):
    return RunConfig(name=name, storage_path=storage, verbose=0,
                     failure_config=FailureConfig(max_failures=max_failures))


def _files(checkpoint):
    """The checkpoint's files, hpctrain's own (dot files) left out."""
    return sorted(f for f in os.listdir(checkpoint.path) if not f.startswith("."))


def assert_single_process_xgboost_model(model, df, rounds):
    """``model`` has ``rounds`` trees and predicts what ``xgboost.train`` in one process on
    all of ``df`` predicts (XGB_PARAMS, label "y")."""
    assert model.num_boosted_rounds() == rounds
    x = xgboost.DMatrix(df.drop("y", axis=1))
    alone = xgboost.train(XGB_PARAMS, xgboost.DMatrix(df.drop("y", axis=1), label=df["y"]),
                          num_boost_round=rounds)
    np.testing.assert_allclose(model.predict(x), alone.predict(x), rtol=1e-6, atol=1e-7)


def _starts(result):
    with open(os.path.join(result.path, "test-out", "starts.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_xgboost_on_two_workers_is_the_single_process_model(storage):
    """hist over row shards: the quantile sketch and the gradient histograms are
    all-reduced, so the trees are those of one process on all rows."""
    df = frame()
    result = XGBoostTrainer(xgb_train, train_loop_config={"rounds": 6, "frequency": 3},
                            scaling_config=ScalingConfig(num_workers=2),
                            datasets={"train": df}, run_config=_run(storage)).fit()
    assert [s["rows"] for s in _starts(result)] == [1000]  # rank 0 saw its half only
    assert _files(result.checkpoint) == ["model.ubj"]
    assert result.checkpoint.path.endswith("checkpoint_000001")  # rounds 3 and 6 only
    assert_single_process_xgboost_model(XGBoostTrainer.get_model(result.checkpoint), df, 6)
    evals, labelled = {}, xgboost.DMatrix(df.drop("y", axis=1), label=df["y"])
    xgboost.train(XGB_PARAMS, labelled, num_boost_round=6, evals=[(labelled, "train")],
                  evals_result=evals)
    # the reported metric is over all rows (all-reduced), as one process computes it
    assert result.metrics["train-logloss"] == pytest.approx(evals["train"]["logloss"][-1], rel=1e-5)


@pytest.mark.parametrize("how", [None, "sigkill"], ids=["exception", "sigkill"])
def test_xgboost_resumes_from_the_last_checkpoint_after_a_crash(storage, how):
    """Rank 1 dies after round 5 (an exception, or SIGKILL in the middle of XGBoost's
    collective); checkpoints were committed after rounds 2 and 4: the restart loads the
    4-tree model and trains trees 5..8, never from 0, and ends with the model of an
    uninterrupted run."""
    df = frame()
    result = XGBoostTrainer(xgb_train, train_loop_config={"rounds": 8, "frequency": 2,
                                                          "crash_at": 5, "crash_rank": 1,
                                                          "crash_how": how},
                            scaling_config=ScalingConfig(num_workers=2),
                            datasets={"train": df}, run_config=_run(storage, 1)).fit()
    assert [(s["attempt"], s["start"]) for s in _starts(result)] == [(1, 0), (2, 4)]
    first = run_state(result.path)["attempts"][0]
    assert first["outcome"] == "FAILED" and first["failed_rank"] == 1
    assert ("signal 9" in first["error"]) is (how == "sigkill"), first["error"]
    model = XGBoostTrainer.get_model(result.checkpoint)
    assert_single_process_xgboost_model(model, df, 8)


def test_lightgbm_on_two_workers_is_the_single_process_model(storage):
    df = frame(discrete=True)
    result = LightGBMTrainer(lgb_train, train_loop_config={"rounds": 5},
                             scaling_config=ScalingConfig(num_workers=2),
                             datasets={"train": df}, run_config=_run(storage)).fit()
    assert _files(result.checkpoint) == ["model.txt"]
    distributed = LightGBMTrainer.get_model(result.checkpoint)
    x = df.drop("y", axis=1)
    alone = lightgbm.train(LGB_PARAMS, lightgbm.Dataset(x, label=df["y"]), num_boost_round=5)
    assert distributed.current_iteration() == 5
    np.testing.assert_allclose(distributed.predict(x), alone.predict(x), rtol=1e-6, atol=1e-7)
    # unlike XGBoost's, LightGBM's eval metrics are each rank's own rows': rank 0's is reported
    p, y = distributed.predict(x[:1000]), df["y"].to_numpy()[:1000]
    rank0_logloss = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    assert result.metrics["train-binary_logloss"] == pytest.approx(rank0_logloss, rel=1e-6)


def test_lightgbm_resumes_from_the_last_checkpoint_after_a_crash(storage):
    """As for XGBoost: checkpoints after rounds 2 and 4, rank 1 dies after round 5 (rank 0
    is then blocked in LightGBM's network and ended by the supervisor); the restart trains
    rounds 5..8 from the 4-round model."""
    df = frame(discrete=True)
    result = LightGBMTrainer(lgb_train, train_loop_config={"rounds": 8, "frequency": 2,
                                                           "crash_at": 5, "crash_rank": 1},
                             scaling_config=ScalingConfig(num_workers=2),
                             datasets={"train": df}, run_config=_run(storage, 1)).fit()
    assert [(s["attempt"], s["start"]) for s in _starts(result)] == [(1, 0), (2, 4)]
    model = LightGBMTrainer.get_model(result.checkpoint)
    assert model.current_iteration() == 8
    x = df.drop("y", axis=1)
    alone = lightgbm.train(LGB_PARAMS, lightgbm.Dataset(x, label=df["y"]), num_boost_round=8)
    np.testing.assert_allclose(model.predict(x), alone.predict(x), rtol=1e-6, atol=1e-7)


def test_params_style_trainers_report_eval_sets_and_resume_to_num_boost_round(storage):
    """XGBoostTrainer(params=, label_column=, num_boost_round=): every dataset but "train"
    is an eval set; resume_from_checkpoint continues to num_boost_round trees in all."""
    df, valid = frame(), frame(400, seed=1)
    kw = dict(params=XGB_PARAMS, label_column="y", scaling_config=ScalingConfig(num_workers=2),
              datasets={"train": df, "valid": valid})
    first = XGBoostTrainer(num_boost_round=3, run_config=_run(storage, name="first"), **kw).fit()
    assert {"train-logloss", "valid-logloss"} <= set(first.metrics)
    assert XGBoostTrainer.get_model(first.checkpoint).num_boosted_rounds() == 3
    second = XGBoostTrainer(num_boost_round=5, resume_from_checkpoint=first.checkpoint,
                            run_config=_run(storage, name="second"), **kw).fit()
    model = XGBoostTrainer.get_model(second.checkpoint)
    assert_single_process_xgboost_model(model, df, 5)

    lgb = LightGBMTrainer(params=LGB_PARAMS, label_column="y", num_boost_round=4,
                          scaling_config=ScalingConfig(num_workers=2),
                          datasets={"train": frame(discrete=True), "valid": frame(400, 1, True)},
                          run_config=_run(storage, name="lightgbm")).fit()
    assert {"train-binary_logloss", "valid-binary_logloss"} <= set(lgb.metrics)
    assert LightGBMTrainer.get_model(lgb.checkpoint).current_iteration() == 4


def test_params_style_checkpoints_every_n_rounds_and_resumes_after_a_crash(storage):
    """checkpoint_frequency=2, a callback (xgboost.train's keyword, passed through) that
    crashes rank 1 after round 5: the restart starts from the 4-round checkpoint."""
    df = frame()
    result = XGBoostTrainer(params=XGB_PARAMS, label_column="y", num_boost_round=8,
                            checkpoint_frequency=2, callbacks=[crash_callback(5, 1, record=True)],
                            scaling_config=ScalingConfig(num_workers=2), datasets={"train": df},
                            run_config=_run(storage, 1)).fit()
    assert [(s["attempt"], s["start"]) for s in _starts(result)] == [(1, 0), (2, 4)]
    model = XGBoostTrainer.get_model(result.checkpoint)
    assert_single_process_xgboost_model(model, df, 8)


def test_bad_gbdt_input_is_refused_with_a_hint(storage, tmp_path):
    with pytest.raises(ConfigError, match=r'datasets: expected a dict with a "train" dataset, '
                                          r"got \['valid'\]\nHINT: "):
        XGBoostTrainer(params={}, label_column="y", datasets={"valid": frame(10)})
    with pytest.raises(ConfigError, match=r"label_column: expected a column name, got None"):
        LightGBMTrainer(params={}, datasets={"train": frame(10)})
    with pytest.raises(TypeError, match="unexpected keyword 'num_boost_rounds'"):
        XGBoostTrainer(xgb_train, num_boost_rounds=3)
    with pytest.raises(ConfigError, match=r"checkpoint_frequency: expected an integer >= 0 "):
        XGBoostTrainer(params={}, label_column="y", datasets={"train": frame(10)},
                       checkpoint_frequency=-1)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "weights.bin").write_bytes(b"x")
    with pytest.raises(ConfigError, match=r"get_model: no 'model.ubj' in checkpoint .*ckpt "
                                          r"\(it holds: weights.bin\)\nHINT: pass filename="):
        XGBoostTrainer.get_model(Checkpoint.from_directory(str(tmp_path / "ckpt")))
    # a label column the data lacks: the workers' error names it and the columns
    from hpctrain.errors import TrainingFailedError

    with pytest.raises(TrainingFailedError) as e:
        XGBoostTrainer(params=XGB_PARAMS, label_column="label", num_boost_round=2,
                       datasets={"train": frame(100)}, run_config=_run(storage)).fit()
    assert ("label_column: no column 'label' in dataset 'train' (its columns: x0, x1, x2, x3, "
            "x4, y)\nHINT: ") in str(e.value.worker_traceback)


@pytest.mark.parametrize("example,rounds,reports,metric", [
    ("xgboost_quickstart.py", 10, 11, "validation-rmse"),
    ("lightgbm_quickstart.py", 100, 100, "eval-multi_error")])
def test_the_ray_quick_starts_run_with_only_their_imports_changed(tmp_path, example, rounds,
                                                                   reports, metric):
    """examples/{xgboost,lightgbm}_quickstart.py: 2 workers, one report per round, the
    model of the last round in the run's checkpoint. As in Ray, XGBoost's callback hands
    the end checkpoint in one more report (``after_training``), LightGBM's with the last
    round's."""
    env = dict(os.environ, HPCTRAIN_STORAGE_PATH=str(tmp_path))
    env.pop("OMP_NUM_THREADS", None)  # the backends' share of the cores, as for a user
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", example)], env=env,
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    (run,) = os.listdir(tmp_path)
    result = Result.from_path(os.path.join(tmp_path, run))
    assert f"checkpoint: {result.checkpoint.path}\nrounds: {rounds}, {metric}: " in p.stdout
    assert len(result.metrics_dataframe) == reports
    assert metric in result.metrics


def test_to_pandas_gives_each_rank_its_rows_with_the_columns(tmp_path):
    """A DataFrame in datasets=: every row once, in order, its columns and dtypes; an HDF5
    file: one column per 1-D dataset, key_0.. for a 2-D one."""
    import h5py
    import pandas as pd

    from hpctrain.data import as_dataset

    df = pd.DataFrame({"a": np.arange(5, dtype=np.int64), "b": np.linspace(0, 1, 5),
                       "name": list("vwxyz")})
    parts = [as_dataset(df).shard(r, 2).materialize().to_pandas() for r in range(2)]
    pd.testing.assert_frame_equal(pd.concat(parts, ignore_index=True), df)
    assert len(parts[0]) == 3
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["x"] = np.arange(12, dtype=np.float32).reshape(4, 3)
        f["y"] = np.array([0, 1, 0, 1])
    shard = as_dataset({"path": str(tmp_path / "d.h5"), "keys": ["x", "y"],
                        "shuffle": False}).shard(1, 2)
    got = shard.to_pandas()
    assert list(got.columns) == ["x_0", "x_1", "x_2", "y"]
    assert got.to_numpy().tolist() == [[6, 7, 8, 0], [9, 10, 11, 1]]


def test_xgboost_trains_on_parquet_files_to_the_single_process_model(storage, tmp_path):
    """datasets= a directory of Parquet files (two, row groups of 300 rows): each worker
    reads its rows from the files, and the model is one process's on the whole frame."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    df = frame()
    os.makedirs(tmp_path / "train")
    for n, part in enumerate((df.iloc[:1200], df.iloc[1200:])):
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False),
                       str(tmp_path / "train" / f"part-{n}.parquet"), row_group_size=300)
    result = XGBoostTrainer(params=XGB_PARAMS, label_column="y", num_boost_round=4,
                            scaling_config=ScalingConfig(num_workers=2),
                            datasets={"train": {"path": str(tmp_path / "train"),
                                                "shuffle": False}},
                            run_config=_run(storage)).fit()
    model = XGBoostTrainer.get_model(result.checkpoint)
    assert_single_process_xgboost_model(model, df, 4)


def test_ray_train_import_paths_give_hpctrains_objects():
    """``from ray.train.xgboost import ...`` -> ``from hpctrain.train.xgboost import ...``."""
    import hpctrain.lightgbm
    import hpctrain.xgboost
    from hpctrain.train.lightgbm import LightGBMTrainer as L, RayTrainReportCallback as LC
    from hpctrain.train.lightgbm import get_network_params
    from hpctrain.train.xgboost import RayTrainReportCallback as XC, XGBoostTrainer as X

    assert (X, XC) == (hpctrain.xgboost.XGBoostTrainer, hpctrain.xgboost.RayTrainReportCallback)
    assert (L, LC) == (hpctrain.lightgbm.LightGBMTrainer, hpctrain.lightgbm.RayTrainReportCallback)
    assert XC.CHECKPOINT_NAME == "model.ubj" and LC.CHECKPOINT_NAME == "model.txt"
    assert get_network_params() == {}  # outside a LightGBMTrainer's worker, as in Ray


@pytest.mark.parametrize("trainer,module", [("hpctrain.xgboost:XGBoostTrainer", "xgboost"),
                                            ("hpctrain.lightgbm:LightGBMTrainer", "lightgbm")])
def test_a_missing_library_says_what_to_install_and_writes_nothing(storage, trainer, module):
    mod, cls = trainer.split(":")
    code = f"""
import sys
sys.modules[{module!r}] = None
import importlib, hpctrain
from hpctrain.errors import MissingFrameworkError
Trainer = getattr(importlib.import_module({mod!r}), {cls!r})
t = Trainer(params={{}}, label_column="y", datasets={{"train": [1, 2]}},
            run_config=hpctrain.RunConfig(name="missing", storage_path={storage!r}))
try:
    t.fit()
except MissingFrameworkError as e:
    print(e)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert (f"the {module!r} backend needs {module!r}, which is not importable here.\n"
            f"HINT: {sys.executable} -m pip install {module} pandas") in p.stdout
    assert not os.path.exists(os.path.join(storage, "missing"))
