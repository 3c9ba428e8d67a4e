"""XGBoostTrainer and LightGBMTrainer across the two nodes of the real test Slurm cluster
(n1, n2), one rank per node, from a job file: the HDF5 rows are split over the nodes
(XGBoost's tracker runs on n1; LightGBM's machines are n1's and n2's addresses), rank 1
crashes after round 5 in the first attempt and the same allocation resumes from the
round-4 checkpoint; the final model is the one a single process trains on all rows."""
import json
import os

import numpy as np
import pytest

from gbdt_workloads import FEATURES, LGB_PARAMS, XGB_PARAMS, frame
from helpers import ROOT, SUPPORT, run_state, cli as hpctrain_cli

xgboost = pytest.importorskip("xgboost")
h5py = pytest.importorskip("h5py")

pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm")]



@pytest.mark.parametrize("backend", ["xgboost", "lightgbm"])
def test_two_nodes_resume_after_a_crash_and_equal_one_process(tmp_path, storage, backend):
    if backend == "lightgbm":
        pytest.importorskip("lightgbm")
    df = frame(discrete=backend == "lightgbm")
    data = tmp_path / "train.h5"
    with h5py.File(data, "w") as f:
        for column in df.columns:
            f[column] = df[column].to_numpy()
    keys = ", ".join(f'"{c}"' for c in df.columns)
    job = tmp_path / "xgb.toml"
    job.write_text(f"""
site = "test-cluster"
[job]
entrypoint = "{SUPPORT}/gbdt_workloads.py:{backend[0]}gb_train"
backend = "{backend}"
[run]
name = "{backend}2"
storage_path = "{storage}"
[scaling]
num_nodes = 2
workers_per_node = 1
[failure]
max_failures = 1
[scheduler]
time = "00:05:00"
[datasets]
train = {{ path = "{data}", keys = [{keys}], shuffle = false }}
[config]
rounds = 8
frequency = 2
crash_at = 5
crash_rank = 1
""")
    p = hpctrain_cli("submit", str(job), "--follow", timeout=400)
    assert "run FINISHED" in p.stdout, p.stdout + p.stderr
    run = os.path.join(storage, f"{backend}2")
    state = run_state(run)
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "FINISHED"]
    assert len({a["job_id"] for a in state["attempts"]}) == 1  # the same allocation
    with open(os.path.join(run, "test-out", "starts.jsonl")) as f:
        starts = [json.loads(line) for line in f]
    assert [(s["attempt"], s["start"], s["rows"]) for s in starts] == [(1, 0, 1000), (2, 4, 1000)]
    assert all(s["hosts"] == ["n1", "n2"] and s["node"] == "n1" for s in starts)
    from hpctrain import Result

    checkpoint = Result.from_path(run).checkpoint
    if backend == "xgboost":
        from hpctrain.xgboost import XGBoostTrainer

        model = XGBoostTrainer.get_model(checkpoint)
        assert model.num_boosted_rounds() == 8
        x = xgboost.DMatrix(df[FEATURES])
        alone = xgboost.train(XGB_PARAMS, xgboost.DMatrix(df[FEATURES], label=df["y"]),
                              num_boost_round=8)
    else:
        import lightgbm

        from hpctrain.lightgbm import LightGBMTrainer

        model = LightGBMTrainer.get_model(checkpoint)
        assert model.current_iteration() == 8
        x = df[FEATURES]
        alone = lightgbm.train(LGB_PARAMS, lightgbm.Dataset(x, label=df["y"]), num_boost_round=8)
    np.testing.assert_allclose(model.predict(x), alone.predict(x), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("example,rounds,metric", [
    ("xgboost_quickstart.py", 10, "validation-rmse"),
    ("lightgbm_quickstart.py", 100, "eval-multi_error")])
def test_the_ray_quick_starts_on_two_nodes(tmp_path, example, rounds, metric):
    """examples/*_quickstart.py with, besides their imports, only the trainer sent to the
    cluster: ``num_nodes=2`` and ``scheduler="slurm", site="test-cluster"``."""
    import glob
    import shutil
    import subprocess
    import sys

    pytest.importorskip(example.split("_")[0])
    examples = os.path.join(ROOT, "examples")
    shutil.copy(os.path.join(examples, "gbdt_quickstart_data.py"), tmp_path)
    source = open(os.path.join(examples, example)).read()
    for old, new in [
            ('ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2})',
             'ScalingConfig(num_workers=2, num_nodes=2, resources_per_worker={"CPU": 2})'),
            ("    scaling_config=scaling_config,\n",
             "    scaling_config=scaling_config,\n    scheduler=\"slurm\", site=\"test-cluster\",\n"
             f"    run_config=ray_train.RunConfig(storage_path={str(tmp_path / 'runs')!r}),\n")]:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    (tmp_path / example).write_text(source)
    # both "nodes" share this machine's 2 cores: one thread per rank, not 2 each
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, example], cwd=str(tmp_path), env=env,
                       capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert f"rounds: {rounds}, {metric}: " in p.stdout
    (launcher,) = glob.glob(str(tmp_path / "runs" / "*" / "logs" / "*" / "launcher.out"))
    assert "srun --kill-on-bad-exit=1 --nodes=2 --ntasks=2 --ntasks-per-node=1" in open(launcher).read()
