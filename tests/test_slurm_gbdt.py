"""XGBoostTrainer across the two nodes of the real test Slurm cluster (n1, n2), one rank
per node, from a job file: the HDF5 rows are split over the nodes, XGBoost's tracker runs
on n1, rank 1 crashes after round 5 in the first attempt and the same allocation resumes
from the round-4 checkpoint; the final model is the one a single process trains on all
rows."""
import json
import os

import numpy as np
import pytest

from gbdt_workloads import FEATURES, XGB_PARAMS, frame
from helpers import cli as hpctrain_cli
from slurm import start_cluster

xgboost = pytest.importorskip("xgboost")
h5py = pytest.importorskip("h5py")

pytestmark = pytest.mark.slow
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module", autouse=True)
def cluster():
    start_cluster()


def test_xgboost_on_two_nodes_resumes_and_equals_one_process(tmp_path, storage):
    df = frame()
    data = tmp_path / "train.h5"
    with h5py.File(data, "w") as f:
        for column in df.columns:
            f[column] = df[column].to_numpy()
    keys = ", ".join(f'"{c}"' for c in df.columns)
    job = tmp_path / "xgb.toml"
    job.write_text(f"""
site = "test-cluster"
[job]
entrypoint = "{HERE}/gbdt_workloads.py:xgb_train"
backend = "xgboost"
[run]
name = "xgb2"
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
    run = os.path.join(storage, "xgb2")
    state = json.load(open(os.path.join(run, "state.json")))
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "FINISHED"]
    assert len({a["job_id"] for a in state["attempts"]}) == 1  # the same allocation
    with open(os.path.join(run, "test-out", "starts.jsonl")) as f:
        starts = [json.loads(line) for line in f]
    assert [(s["attempt"], s["start"], s["rows"]) for s in starts] == [(1, 0, 1000), (2, 4, 1000)]
    assert all(s["hosts"] == ["n1", "n2"] and s["node"] == "n1" for s in starts)
    from hpctrain import Result
    from hpctrain.xgboost import XGBoostTrainer

    model = XGBoostTrainer.get_model(Result.from_path(run).checkpoint)
    assert model.num_boosted_rounds() == 8
    x = xgboost.DMatrix(df[FEATURES])
    alone = xgboost.train(XGB_PARAMS, xgboost.DMatrix(df[FEATURES], label=df["y"]),
                          num_boost_round=8)
    np.testing.assert_allclose(model.predict(x), alone.predict(x), rtol=1e-6, atol=1e-7)
