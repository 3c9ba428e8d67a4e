"""XGBoost time to model: ``xgboost.train`` alone in one process vs XGBoostTrainer with 2
workers on this machine (the same rows, the same rounds, tree_method="hist").

Each side is a fresh Python process timed from its start to a trained Booster in hand
(imports, synthetic data, DMatrix, training; for hpctrain also the worker processes, the
tracker, the per-round reports and the end checkpoint, and loading the model back from
it). Prints both times and hpctrain / alone as a ratio (median of --repeats).

Threads: with OMP_NUM_THREADS unset, xgboost alone uses every core and each hpctrain rank
its share (cores / ranks on the node); OMP_NUM_THREADS=1 gives every process one thread.

    python bench/bench_xgboost.py [--rows 200000] [--features 20] [--rounds 50] [--repeats 3]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMMON = """
import numpy as np, pandas as pd, xgboost
rng = np.random.default_rng(0)
x = rng.normal(size=({rows}, {features}))
df = pd.DataFrame(x, columns=[f"x{{i}}" for i in range({features})])
df["y"] = (x[:, 0] + x[:, 1] ** 2 + rng.normal(size={rows}) * 0.3 > 1).astype(float)
params = {{"tree_method": "hist", "objective": "binary:logistic", "max_depth": 6}}
"""

ALONE = COMMON + """
dtrain = xgboost.DMatrix(df.drop("y", axis=1), label=df["y"])
bst = xgboost.train(params, dtrain, num_boost_round={rounds})
assert bst.num_boosted_rounds() == {rounds}
"""

HPCTRAIN = COMMON + """
import hpctrain
from hpctrain import RunConfig, ScalingConfig
from hpctrain.xgboost import RayTrainReportCallback, XGBoostTrainer

def train_func():
    part = hpctrain.get_dataset_shard("train").materialize().to_pandas()
    dtrain = xgboost.DMatrix(part.drop("y", axis=1), label=part["y"])
    xgboost.train(params, dtrain, num_boost_round={rounds}, callbacks=[RayTrainReportCallback()])

result = XGBoostTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
                        datasets={{"train": df}},
                        run_config=RunConfig(storage_path={storage!r}, verbose=0)).fit()
bst = XGBoostTrainer.get_model(result.checkpoint)
assert bst.num_boosted_rounds() == {rounds}
"""


def timed(code: str) -> float:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    started = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if p.returncode != 0:
        raise SystemExit(p.stderr[-3000:])
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    alone, under = [], []
    with tempfile.TemporaryDirectory() as storage:
        for _ in range(a.repeats):
            kw = dict(rows=a.rows, features=a.features, rounds=a.rounds, storage=storage)
            alone.append(timed(ALONE.format(**kw)))
            under.append(timed(HPCTRAIN.format(**kw)))
    a_s, h_s = statistics.median(alone), statistics.median(under)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"XGBoost, {a.rows} rows x {a.features} features, {a.rounds} rounds, hist, "
          f"{cpus} CPUs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
          f"median of {a.repeats}")
    print(f"{'xgboost alone (1 process)':<34} {a_s:8.2f} s")
    print(f"{'hpctrain XGBoostTrainer, 2 workers':<34} {h_s:8.2f} s")
    print(f"{'ratio hpctrain / alone':<34} {h_s / a_s:8.2f}x")


if __name__ == "__main__":
    main()
