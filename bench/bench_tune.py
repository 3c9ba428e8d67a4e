#!/usr/bin/env python
"""What a sweep costs per trial on top of the trials' own work, here and as a Slurm array.

    python bench/bench_tune.py                 # local and Slurm figures
    python bench/bench_tune.py --no-slurm      # local figures only
    python bench/bench_tune.py --trials 8 --work 2.0 --json out.json

Every trial's work is the same: ``import torch``, sleep ``--work`` seconds, report one
number (what a trial of a real sweep does besides training: start Python, import the
framework, report). Each figure is the wall time of the whole sweep, sequential trials
(``max_concurrent_trials = 1``) so that per-trial costs add up, medians over ``--repeats``
(default 3; the Slurm pair alternates its order, after one untimed warm-up job).

Local (this machine):
  * anchor "direct, one process": the trials' work called one after another in one
    Python process (torch imported once): the floor;
  * anchor "direct, a process per trial": ``python -c "import torch; sleep(work)"`` once
    per trial, one after another: what a shell loop over the configs costs;
  * hpctrain: ``Tuner(TorchTrainer(f, 1 worker), param_space=grid_search(N values)).fit()``
    (each trial a run directory, a supervisor, a worker process, a checkpoint-free report).
  Overhead per trial = (hpctrain - anchor) / N.

Slurm (the test cluster, ``bash scripts/slurm-cluster.sh start``):
  * anchor: ``sbatch --array=0-(N-1)%1`` of a bare script whose task runs
    ``srun python -c "import torch; sleep(work)"``, from submission until every task
    left the queue (``squeue -r`` polled every 0.2 s);
  * hpctrain: the same sweep as above with ``scheduler="slurm", site="test-cluster"``:
    ``fit()`` from the call until it returned the ResultGrid (render, N trial directories,
    ``sbatch``, each task's batch step and worker, following at 2 s polls).
  Information rows: the submission alone (``submit_arrays`` for 200 trials: render,
  trial directories, ``job.sh`` per trial; not submitted) per trial.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
os.environ.setdefault("OMP_NUM_THREADS", "1")


def work(config):
    """One trial's work (also what the anchors run)."""
    import time as _time

    import torch  # noqa: F401

    import hpctrain

    _time.sleep(config["work"])
    hpctrain.report({"score": config["i"]})


def _tuner(storage: str, name: str, n: int, work_s: float, slurm: bool):
    from hpctrain import RunConfig, ScalingConfig, tune
    from hpctrain.torch import TorchTrainer

    kw: Dict[str, Any] = {"scheduler": "slurm", "site": "test-cluster"} if slurm else {}
    trainer = TorchTrainer(work, scaling_config=ScalingConfig(num_workers=1),
                           run_config=RunConfig(name=name, storage_path=storage, verbose=0),
                           **kw)
    return tune.Tuner(trainer, param_space={"train_loop_config": {
        "work": work_s, "i": tune.grid_search(list(range(n)))}},
        tune_config=tune.TuneConfig(metric="score", mode="max", max_concurrent_trials=1))


def local_figures(n: int, work_s: float, storage: str, rep: int) -> Dict[str, float]:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c",
                    f"import time, torch\nfor _ in range({n}): time.sleep({work_s})"],
                   check=True)
    one_process = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(n):
        subprocess.run([sys.executable, "-c", f"import time, torch; time.sleep({work_s})"],
                       check=True)
    per_process = time.perf_counter() - t
    t = time.perf_counter()
    grid = _tuner(storage, f"local-{rep}", n, work_s, slurm=False).fit()
    tuner = time.perf_counter() - t
    assert grid.num_terminated == n, grid
    return {"one_process": one_process, "per_process": per_process, "hpctrain": tuner}


BARE = """#!/bin/bash
#SBATCH --job-name=bench-tune-anchor
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --partition=debug
#SBATCH --time=00:10:00
#SBATCH --output=/dev/null
#SBATCH --array=0-{last}%1
srun {python} -c "import time, torch; time.sleep({work})"
"""


def _bare_array(storage: str, n: int, work_s: float) -> float:
    script = os.path.join(storage, "bare.sh")
    with open(script, "w") as f:
        f.write(BARE.format(last=n - 1, python=sys.executable, work=work_s))
    t = time.perf_counter()
    job = subprocess.run(["sbatch", "--parsable", script], capture_output=True, text=True,
                         check=True).stdout.strip().split(";")[0]
    while subprocess.run(["squeue", "-h", "-r", "-j", job], capture_output=True,
                         text=True).stdout.strip():
        time.sleep(0.2)
    return time.perf_counter() - t


def slurm_figures(n: int, work_s: float, storage: str, rep: int) -> Dict[str, float]:
    """Both kinds, in alternating order from one repeat to the next."""
    def hp() -> float:
        t = time.perf_counter()
        grid = _tuner(storage, f"slurm-{rep}", n, work_s, slurm=True).fit()
        assert grid.num_terminated == n, grid
        return time.perf_counter() - t

    if rep % 2:
        tuner, bare = hp(), _bare_array(storage, n, work_s)
    else:
        bare, tuner = _bare_array(storage, n, work_s), hp()
    return {"bare_array": bare, "hpctrain": tuner}


def submission_cost(storage: str, n: int = 200) -> float:
    """Seconds per trial to render and prepare a Slurm sweep of ``n`` trials (no sbatch)."""
    from hpctrain.run import spec_of_trainer
    from hpctrain.tune import _sweep
    from hpctrain.tune.sweepdir import SweepDir

    tuner = _tuner(storage, "prep", n, 0.0, slurm=True)
    sweep = SweepDir(tuner.experiment_path)
    m = tuner._manifest(sweep)
    configs = {t["index"]: t["config"] for t in m["trials"]}
    spec = spec_of_trainer(tuner._trainer)
    t = time.perf_counter()
    for offset, tasks in _sweep.split_arrays(range(n), _sweep.max_array_size(spec)):
        _sweep.render_array(spec, sweep.path, offset, tasks, max_concurrent=1, rerender="",
                            label="bench")
    for i in range(n):
        _sweep.prepare_batch_trial(tuner._trial_run(sweep, i, configs[i]), sweep)
    return (time.perf_counter() - t) / n


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=4)
    p.add_argument("--work", type=float, default=1.0, help="seconds of work per trial")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-slurm", action="store_true")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    n, w = args.trials, args.work
    root = tempfile.mkdtemp(prefix="bench-tune-")
    results: Dict[str, List[float]] = {}
    try:
        for rep in range(args.repeats):
            for k, v in local_figures(n, w, root, rep).items():
                results.setdefault(f"local_{k}", []).append(v)
        slurm = not args.no_slurm and shutil.which("sbatch") is not None and \
            subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0
        if slurm:
            _bare_array(root, 1, 0.0)  # warm-up (untimed): page cache, the nodes' first srun
            for rep in range(args.repeats):
                for k, v in slurm_figures(n, w, root, rep).items():
                    results.setdefault(f"slurm_{k}", []).append(v)
        prep = submission_cost(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in results.items()}
    rows = [
        ("local: direct, one process (floor)", med["local_one_process"], None),
        ("local: direct, a process per trial", med["local_per_process"], None),
        ("local: hpctrain Tuner.fit()", med["local_hpctrain"], None),
    ]
    print(f"bench_tune: {n} trials × {w:.1f} s of work, sequential, medians of "
          f"{args.repeats}; {os.cpu_count()} cores")
    print(f"{'figure':48} {'total s':>8} {'per trial s':>11}")
    for label, total, _ in rows:
        print(f"{label:48} {total:8.2f} {total / n:11.2f}")
    lines = []
    for anchor in ("one_process", "per_process"):
        over = (med["local_hpctrain"] - med[f"local_{anchor}"]) / n
        lines.append(f"local overhead per trial vs direct, {anchor.replace('_', ' ')}: "
                     f"{over:.2f} s (ratio {med['local_hpctrain'] / med[f'local_{anchor}']:.2f}×)")
    if "slurm_hpctrain" in med:
        print(f"{'slurm: bare sbatch --array (anchor)':48} {med['slurm_bare_array']:8.2f} "
              f"{med['slurm_bare_array'] / n:11.2f}")
        print(f"{'slurm: hpctrain Tuner.fit() (job array)':48} {med['slurm_hpctrain']:8.2f} "
              f"{med['slurm_hpctrain'] / n:11.2f}")
        over = (med["slurm_hpctrain"] - med["slurm_bare_array"]) / n
        lines.append(f"slurm overhead per trial vs a bare array: {over:.2f} s (ratio "
                     f"{med['slurm_hpctrain'] / med['slurm_bare_array']:.2f}×)")
    else:
        lines.append("slurm: skipped (no sbatch or no reachable cluster)")
    lines.append(f"submission, per trial (render + run directory + job.sh, 200 trials, not "
                 f"submitted): {prep * 1000:.1f} ms")
    for line in lines:
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"trials": n, "work_s": w, "raw": results, "median": med,
                       "submission_per_trial_s": prep}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
