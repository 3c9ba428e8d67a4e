"""Sweeps as job arrays on the real test Slurm cluster (scripts/slurm-cluster.sh: nodes n1,
n2): the Ray Train docs example from Python, and a sweep whose array is requeued and
cancelled midway, then resumed without running its finished trials again."""
import json
import os
import subprocess

import pytest

import tune_workloads
from helpers import SUPPORT, cli, run_state, wait_for
from hpctrain import RunConfig, ScalingConfig, tune
from hpctrain.torch import TorchTrainer
from slurm import HoldReleaser, wait_gone

pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm")]
WORKLOADS = os.path.join(SUPPORT, "tune_workloads.py")



def state(run_path):
    return run_state(run_path)


def test_ray_docs_example_as_a_slurm_array(storage):
    trainer = TorchTrainer(tune_workloads.docs_example,
                           scaling_config=ScalingConfig(num_workers=1),
                           run_config=RunConfig(name="docs", storage_path=storage, verbose=0),
                           scheduler="slurm", site="test-cluster")
    grid = tune.Tuner(trainer, param_space={"train_loop_config": {
        "num_epochs": 2, "input": tune.grid_search([1, 2, 3])}},
        tune_config=tune.TuneConfig(metric="output", mode="max",
                                    max_concurrent_trials=2)).fit()
    assert grid.get_best_result().config == {"train_loop_config": {"num_epochs": 2, "input": 3}}
    assert [r.metrics["output"] for r in grid] == [1, 2, 3]
    sweep = os.path.join(storage, "docs")
    manifest = json.load(open(os.path.join(sweep, "sweep.json")))
    (array,) = manifest["arrays"]
    script = open(os.path.join(sweep, array["script"])).read()
    assert "\n#SBATCH --array=0-2%2\n" in script
    for i, r in enumerate(grid):  # one array task per trial, each its own run
        s = state(r.path)
        assert s["status"] == "FINISHED" and s["job_ids"] == [f"{array['job_id']}_{i}"]
        assert os.path.exists(os.path.join(r.path, "logs", f"slurm-{array['job_id']}_{i}.out"))
        assert manifest["trials"][i]["status"] == "FINISHED"


def test_trials_of_a_slurm_array_know_their_names(storage):
    """get_context() in an array task: the sweep's name, the trial's id and directory,
    and (scaling_config fixed) the trainer's world size over srun."""
    import ray_names_workloads

    trainer = TorchTrainer(ray_names_workloads.report_context,
                           scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(name="names", storage_path=storage, verbose=0),
                           scheduler="slurm", site="test-cluster")
    grid = tune.Tuner(trainer, param_space={"train_loop_config": {
        "x": tune.grid_search([1, 2])}}).fit()
    assert grid.num_errors == 0
    assert sorted((r.metrics["x"], r.metrics["trial_id"], r.metrics["trial_name"],
                   r.metrics["experiment_name"], r.metrics["trial_dir"] == r.path,
                   r.metrics["world_size"]) for r in grid) == [
        (1, "trial_00000", "trial_00000", "names", True, 2),
        (2, "trial_00001", "trial_00001", "names", True, 2)]


def starts(run_path):
    try:
        return open(os.path.join(run_path, "starts.log")).read().split("\n")[:-1]
    except FileNotFoundError:
        return []


def test_a_cancelled_sweep_resumes_only_its_unfinished_trials_and_a_requeued_task_its_own(
        tmp_path, storage):
    gate = tmp_path / "gate"
    job = tmp_path / "gated.toml"
    job.write_text(f"""site = "test-cluster"
[job]
entrypoint = "{WORKLOADS}:gated"
[run]
name = "gated"
storage_path = "{storage}"
[scaling]
num_workers = 1
[config]
num_epochs = 2
gated = [2, 3]
gate = "{gate}"
[sweep]
metric = "output"
mode = "max"
max_concurrent_trials = 2
[sweep.param_space]
input = {{grid_search = [1, 2, 3]}}
""")
    out = cli("sweep", str(job)).stdout
    sweep = os.path.join(storage, "gated")
    trial = [os.path.join(sweep, f"trial_0000{i}") for i in range(3)]
    array_id = json.load(open(os.path.join(sweep, "sweep.json")))["arrays"][0]["job_id"]
    assert f"submitted slurm job array {array_id} (trials 0-2)" in out
    # trial 0 finishes; trials 1 and 2 wait at the gate
    wait_for(lambda: state(trial[0])["status"] == "FINISHED" and len(starts(trial[1])) == 1
             and len(starts(trial[2])) == 1, 120, "trial 0 to finish and trials 1, 2 to start")

    # the scheduler's warning to task 2 (whose SLURM_JOB_ID is the array's own id): trial 2
    # checkpoints and its batch step requeues that task alone, which resumes trial 2
    releaser = HoldReleaser(f"{array_id}_2")
    try:
        subprocess.run(["scancel", "--signal=USR1", "--batch", f"{array_id}_2"], check=True)
        wait_for(lambda: len(starts(trial[2])) == 2, 120, "trial 2 to start again")
    finally:
        releaser.stop()
    assert [line.split()[0] for line in starts(trial[2])] == [f"{array_id}_2"] * 2
    s2 = state(trial[2])
    assert s2["attempts"][0]["outcome"] == "PREEMPTED" and s2["requeues"] == 1
    assert s2["attempts"][1]["resumed_from"].endswith("checkpoint_000000")
    assert len(starts(trial[0])) == 1 and len(starts(trial[1])) == 1  # nothing else re-ran

    # the whole array is cancelled midway: trials 1 and 2 are interrupted
    subprocess.run(["scancel", array_id], check=True)
    wait_gone(array_id, 60)
    assert [state(t)["status"] for t in trial] == ["FINISHED", "INTERRUPTED", "INTERRUPTED"]
    first_done = state(trial[0])

    # run the sweep again: only trials 1 and 2 are submitted, and both finish
    gate.write_text("open")
    out = cli("sweep", str(job), "--follow").stdout
    manifest = json.load(open(os.path.join(sweep, "sweep.json")))
    second = manifest["arrays"][1]
    assert second["trials"] == [1, 2]
    assert "\n#SBATCH --array=1-2%2\n" in open(os.path.join(sweep, second["script"])).read()
    assert f"submitted slurm job array {second['job_id']} (trials 1-2)" in out
    assert "best: trial_00002" in out
    assert [t["status"] for t in manifest["trials"]] == ["FINISHED"] * 3
    # trial 0 was not run again: one start, its state untouched
    assert len(starts(trial[0])) == 1 and state(trial[0]) == first_done
    assert [line.split()[0] for line in starts(trial[1])] == [f"{array_id}_1",
                                                             f"{second['job_id']}_1"]
    assert [line.split()[0] for line in starts(trial[2])] == [f"{array_id}_2"] * 2 + [
        f"{second['job_id']}_2"]
    grid = tune.ResultGrid.from_path(sweep)
    assert grid.get_best_result().config == {"train_loop_config": {"input": 3}}
    assert [r.metrics["output"] for r in grid] == [1, 2, 3]


def test_a_function_backend_sweep_runs_its_trials_with_no_framework_as_an_array(
        tmp_path, storage):
    """`job.backend = "function"` (what a Tune function trainable runs as) as a Slurm job
    array: each task's rank imports no framework and reports as usual."""
    job = tmp_path / "plain.toml"
    job.write_text(f"""site = "test-cluster"
[job]
entrypoint = "{WORKLOADS}:frameworks_loaded"
backend = "function"
[run]
name = "plain"
storage_path = "{storage}"
[scaling]
num_workers = 1
[sweep]
metric = "score"
mode = "max"
[sweep.param_space]
a = {{grid_search = [1, 2]}}
""")
    out = cli("sweep", str(job), "--follow").stdout
    assert "best: trial_00001" in out, out
    grid = tune.ResultGrid.from_path(os.path.join(storage, "plain"))
    assert [(r.metrics["score"], r.metrics["loaded"], r.metrics["world_size"]) for r in grid] \
        == [(2, "none", 1), (3, "none", 1)]
    for r in grid:
        assert state(r.path)["status"] == "FINISHED"
        assert '\nbackend = "function"\n' in open(os.path.join(r.path, "spec.toml")).read()
