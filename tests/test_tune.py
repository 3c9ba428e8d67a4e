"""Sweeps (hpctrain.tune, `hpctrain sweep`, `hpctrain results SWEEP_DIR`) without a cluster:
trials run here as real 1-worker runs; job array scripts are rendered, run by bash the way
an array task runs (the task's index in its environment), and handed to the fake qsub."""
import json
import os
import subprocess
import sys

import pytest

import tune_workloads
from helpers import cli
from hpctrain import RunConfig, ScalingConfig, TrainingFailedError, tune
from hpctrain.errors import ConfigError
from hpctrain.spec import load_job_spec
from hpctrain.torch import TorchTrainer

pytestmark = pytest.mark.slow
HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "tune_workloads.py")
sys.path.insert(0, os.path.join(HERE, "fake_pbs"))
import _fakepbs as fakepbs  # noqa: E402

DOCS_SPACE = {"train_loop_config": {"num_epochs": 2, "input": tune.grid_search([1, 2, 3])}}


def attempts(run_path):
    with open(os.path.join(run_path, "state.json")) as f:
        return json.load(f)["attempts"]


def test_ray_docs_example_locally_gives_the_best_config_and_a_rerun_runs_nothing(storage):
    trainer = TorchTrainer(tune_workloads.docs_example,
                           scaling_config=ScalingConfig(num_workers=1),
                           run_config=RunConfig(name="docs", storage_path=storage,
                                                callbacks=[tune_workloads.SetupRecorder()]))
    tuner = tune.Tuner(trainer, param_space=DOCS_SPACE,
                       tune_config=tune.TuneConfig(metric="output", mode="max"))
    grid = tuner.fit()
    best = grid.get_best_result()
    assert best.config == {"train_loop_config": {"num_epochs": 2, "input": 3}}
    assert best.metrics["output"] == 3 and best.metrics["_training_iteration"] == 2
    assert grid.get_best_result("output", "min").config["train_loop_config"]["input"] == 1
    assert len(grid) == 3 and grid.num_errors == 0 and grid.errors == []
    sweep = os.path.join(storage, "docs")
    for i, r in enumerate(grid):  # each trial is a normal run with its own directory
        assert r.path == os.path.join(sweep, f"trial_0000{i}") and r.status == "FINISHED"
        assert r.metrics["output"] == r.config["train_loop_config"]["input"] == i + 1
        assert TorchTrainer.can_restore(r.path)
        # with callbacks of its own, not shared with the trials beside it
        assert json.load(open(os.path.join(r.path, "setups.json"))) == [r.path]
    df = grid.get_dataframe()
    assert list(df["config/train_loop_config/input"]) == list(df["output"]) == [1, 2, 3]
    assert list(df["trial_id"]) == ["trial_00000", "trial_00001", "trial_00002"]
    manifest = json.load(open(os.path.join(sweep, "sweep.json")))
    assert [(t["trial_id"], t["config"]["train_loop_config"]["input"], t["status"])
            for t in manifest["trials"]] == [("trial_00000", 1, "FINISHED"),
                                             ("trial_00001", 2, "FINISHED"),
                                             ("trial_00002", 3, "FINISHED")]
    # the same sweep again: every trial finished, none runs again
    again = tune.Tuner(trainer, param_space=DOCS_SPACE,
                       tune_config=tune.TuneConfig(metric="output", mode="max")).fit()
    assert again.get_best_result().path == best.path
    assert [len(attempts(r.path)) for r in again] == [1, 1, 1]
    assert tune.Tuner.can_restore(sweep) and not tune.Tuner.can_restore(best.path)
    restored = tune.Tuner.restore(sweep, trainer).fit()
    assert restored.get_best_result().config == best.config
    assert [len(attempts(r.path)) for r in restored] == [1, 1, 1]
    # another space under the same name is refused, and changes nothing
    with pytest.raises(ConfigError, match="another search space"):
        tune.Tuner(trainer, param_space={"train_loop_config": {"input": tune.grid_search([7])}}
                   ).fit()
    assert json.load(open(os.path.join(sweep, "sweep.json")))["trials"] == manifest["trials"]


def test_seed_era_to_tune_trainable_runs_its_documented_example(tmp_path):
    # Ray Train 1.x docs, "Hyperparameter tuning", with `from ray import ...` changed
    from hpctrain import train
    from hpctrain.train import Trainer

    def train_func(config):
        # In this example, nothing is expected to change over epochs,
        # and the output metric is equivalent to the input value.
        for _ in range(config["num_epochs"]):
            train.report(output=config["input"])

    trainer = Trainer(backend="torch", num_workers=2, logdir=str(tmp_path / "legacy"))
    trainable = trainer.to_tune_trainable(train_func)
    analysis = tune.run(trainable, config={
        "num_epochs": 2,
        "input": tune.grid_search([1, 2, 3])
    }, local_dir=str(tmp_path / "tune"), name="legacy")
    assert analysis.get_best_config(metric="output", mode="max") == {"num_epochs": 2, "input": 3}
    assert [t.status for t in analysis.trials] == ["TERMINATED"] * 3
    assert [t.last_result["output"] for t in analysis.trials] == [1, 2, 3]
    assert analysis.get_best_logdir("output", "min").endswith("legacy/trial_00000")


def test_a_training_function_is_a_trainable_too(storage):
    grid = tune.Tuner(tune_workloads.tune_function,
                      param_space={"a": tune.grid_search([1, 2]), "b": 5},
                      tune_config=tune.TuneConfig(metric="score", mode="max"),
                      run_config=RunConfig(name="fn", storage_path=storage, verbose=0)).fit()
    assert [r.config for r in grid] == [{"a": 1, "b": 5}, {"a": 2, "b": 5}]
    assert [r.metrics["score"] for r in grid] == [15, 25]
    assert grid.get_best_result().config == {"a": 2, "b": 5}
    assert grid.get_best_result(mode="min", scope="all").metrics["score"] == 15


def sweep_file(tmp_path, storage, name, *, function="docs_example", extra_config="",
               sweep="", site=None, scheduler=""):
    path = tmp_path / f"{name}.toml"
    path.write_text((f'site = "{site}"\n' if site else "") + f"""
[job]
entrypoint = "{WORKLOADS}:{function}"
[run]
name = "{name}"
storage_path = "{storage}"
[scaling]
num_workers = 1
{scheduler}
[config]
num_epochs = 2
{extra_config}
[sweep]
metric = "output"
mode = "max"
{sweep}
[sweep.param_space]
input = {{grid_search = [1, 2, 3]}}
""")
    return str(path)


def test_toml_sweep_ranks_trials_records_a_failed_one_and_reruns_only_on_request(
        tmp_path, storage):
    job = sweep_file(tmp_path, storage, "tomlsweep", function="fails_on",
                     extra_config="bad = 2")
    p = cli("sweep", job, check=False)
    assert p.returncode == 1, p.stderr  # a trial failed
    assert "trial_00001 FAILED" in p.stderr
    sweep = os.path.join(storage, "tomlsweep")
    ranking = cli("results", sweep).stdout
    rows = [line.replace("│", " ").split() for line in ranking.splitlines()
            if line.startswith("│")]
    assert [row[:4] for row in rows] == [
        ["1", "trial_00002", "FINISHED", "3"], ["2", "trial_00000", "FINISHED", "1"],
        ["-", "trial_00001", "FAILED", "-"]]
    assert "best: trial_00002" in ranking and "trial_00001 failed" in ranking
    grid = tune.ResultGrid.from_path(sweep)
    assert grid.num_errors == 1
    assert isinstance(grid[1].error, TrainingFailedError)
    assert "ValueError: input 2 is bad" in grid[1].error.worker_traceback
    assert grid.get_best_result().config == {"train_loop_config": {"input": 3}}
    # again: the finished trials and (by default) the failed one are not run
    again = cli("sweep", job, check=False)
    assert "0 of 3 trials to run here" in again.stdout
    assert [len(attempts(r.path)) for r in grid] == [1, 1, 1]
    retry = cli("sweep", job, "--retry-failed", check=False)
    assert "1 of 3 trials to run here" in retry.stdout and retry.returncode == 1
    assert [len(attempts(r.path)) for r in grid] == [1, 2, 1]


def test_sampled_configs_are_seeded_recorded_and_kept_for_a_rerun(tmp_path, storage):
    from hpctrain.tune._sweep import SweepDir
    from hpctrain.tune.tuner import manifest_from_spec

    space = {"lr": tune.loguniform(1e-4, 1e-1), "batch": tune.choice([16, 32, 64]),
             "p": tune.uniform(0.0, 0.5), "layers": tune.randint(1, 4),
             "width": tune.grid_search([8, 16])}
    a = tune.search.expand(space, num_samples=3, seed=42)
    assert a == tune.search.expand(space, num_samples=3, seed=42) != tune.search.expand(
        space, num_samples=3, seed=43)
    assert [c["width"] for c in a] == [8, 16] * 3  # num_samples repeats the grid
    assert all(1e-4 <= c["lr"] < 1e-1 and c["batch"] in (16, 32, 64) and 0 <= c["p"] < 0.5
               and c["layers"] in (1, 2, 3) for c in a)
    # TOML: a sweep without a seed records the one it drew; a re-run keeps its configs
    job = tmp_path / "s.toml"
    job.write_text(f"""[job]
entrypoint = "{WORKLOADS}:docs_example"
[run]
name = "seeded"
storage_path = "{storage}"
[sweep]
num_samples = 2
[sweep.param_space]
lr = {{loguniform = [1e-4, 1e-1]}}
layers = {{randint = [1, 4]}}
""")
    sweep = SweepDir(os.path.join(storage, "seeded"))
    first = manifest_from_spec(sweep, load_job_spec(str(job)))
    second = manifest_from_spec(sweep, load_job_spec(str(job)))
    assert first["trials"] == second["trials"] and first["seed"] == second["seed"]
    assert tune.search.expand({"train_loop_config": {"lr": tune.loguniform(1e-4, 1e-1),
                                                     "layers": tune.randint(1, 4)}},
                              2, first["seed"]) == [t["config"] for t in first["trials"]]


BAD = [
    ("lr = {loguniform = [0, 1]}", "sweep.param_space.lr.loguniform: expected 0 < lower < upper"),
    ("lr = {uniform = [1, 1]}", "sweep.param_space.lr.uniform: expected lower < upper"),
    ("n = {randint = [1.5, 4]}", "sweep.param_space.n.randint: expected two integers"),
    ("x = {grid_search = []}", "sweep.param_space.x.grid_search: expected a non-empty array"),
    ("x = {choice = 3}", "sweep.param_space.x.choice: expected a non-empty array"),
]


@pytest.mark.parametrize("line,message", BAD, ids=[b[0].split(" ")[0] + b[0].split("{")[1][:5]
                                                   for b in BAD])
def test_a_bad_search_space_names_the_file_and_key_and_creates_nothing(tmp_path, storage, line,
                                                                       message):
    job = tmp_path / "bad.toml"
    job.write_text(f'[job]\nentrypoint = "{WORKLOADS}:docs_example"\n[run]\n'
                   f'storage_path = "{storage}"\n[sweep.param_space]\n{line}\n')
    with pytest.raises(ConfigError) as info:
        load_job_spec(str(job))
    assert str(info.value).startswith(f"{job}: {message}")
    assert "HINT: e.g." in str(info.value)


def test_bad_sweep_settings_are_refused_before_anything_is_made(tmp_path, storage):
    base = f'[job]\nentrypoint = "{WORKLOADS}:docs_example"\n[run]\nstorage_path = "{storage}"\n'
    cases = [("[sweep]\nmetric = \"output\"\nmode = \"best\"\n",
              'sweep.mode: expected one of "min", "max", got "best"'),
             ("[sweep]\nmetric = \"output\"\n", "sweep.mode: expected sweep.mode too"),
             ("[sweep]\nnum_samples = 0\n", "sweep.num_samples: expected an integer ≥ 1"),
             ("[sweep]\nsamples = 2\n", "sweep.samples: unknown key in [sweep]")]
    for text, message in cases:
        job = tmp_path / "bad.toml"
        job.write_text(base + text)
        p = cli("sweep", str(job), check=False)
        assert p.returncode == 2 and message in p.stderr, p.stderr
    assert os.listdir(storage) == []
    # a job file with a [sweep] is not run as one run by mistake
    job.write_text(base + "[sweep]\nnum_samples = 2\n")
    p = cli("run", str(job), check=False)
    assert p.returncode == 2 and "has a [sweep] section" in p.stderr
    assert "HINT: run its trials with `hpctrain sweep`" in p.stderr
    assert os.listdir(storage) == []


def test_slurm_array_script_lines_and_a_split_array_running_its_own_trial(tmp_path, storage,
                                                                         monkeypatch):
    job = sweep_file(tmp_path, storage, "arr", site="test-cluster",
                     sweep="max_concurrent_trials = 2\nseed = 5")
    script = cli("sweep", job, "--dry-run").stdout
    assert "\n#SBATCH --array=0-2%2\n" in script
    assert "\nHPCTRAIN_TRIAL_INDEX=$(( 0 + SLURM_ARRAY_TASK_ID ))\n" in script
    assert f"printf -v HPCTRAIN_TRIAL_DIR '%s/trial_%05d' {storage}/arr" in script
    assert os.listdir(storage) == []  # a dry run makes nothing
    # a site whose arrays hold 2 tasks: 5 trials → arrays of trials 0-1, 2-3, 4
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "tiny-arrays.toml").write_text(
        '[site]\nscheduler = "slurm"\n[limits]\nmax_array_size = 2\n'
        '[scheduler]\nlauncher = "local"\n')
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(sites))
    job = sweep_file(tmp_path, storage, "split", site="tiny-arrays",
                     sweep="max_concurrent_trials = 2\nseed = 5")
    job_text = open(job).read().replace("[1, 2, 3]", "[1, 2, 3, 4, 5]")
    open(job, "w").write(job_text)
    out = cli("sweep", job, "--dry-run").stdout
    scripts = out.split("#!/bin/bash\n")[1:]
    assert [[line for line in s.splitlines() if line.startswith(("#SBATCH --array",
                                                                 "HPCTRAIN_TRIAL_INDEX"))]
            for s in scripts] == [
        ["#SBATCH --array=0-1%2", "HPCTRAIN_TRIAL_INDEX=$(( 0 + SLURM_ARRAY_TASK_ID ))"],
        ["#SBATCH --array=0-1%2", "HPCTRAIN_TRIAL_INDEX=$(( 2 + SLURM_ARRAY_TASK_ID ))"],
        ["#SBATCH --array=0%2", "HPCTRAIN_TRIAL_INDEX=$(( 4 + SLURM_ARRAY_TASK_ID ))"]]
    assert "trials 2-3, array 2 of 3" in scripts[1]
    # task 1 of the second array, as Slurm starts it (the script submitted by hand): it
    # makes the sweep's manifest from the spec it carries and runs trial 3, input 4
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_"))}
    env.update(SLURM_ARRAY_JOB_ID="99", SLURM_ARRAY_TASK_ID="1", SLURM_JOB_ID="101")
    (tmp_path / "array-2.sh").write_text("#!/bin/bash\n" + scripts[1])
    p = subprocess.run(["bash", str(tmp_path / "array-2.sh")], env=env,
                       capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    sweep = os.path.join(storage, "split")
    log = os.path.join(sweep, "trial_00003", "logs", "slurm-99_1.out")
    assert p.returncode == 0, p.stdout + p.stderr + (open(log).read() if os.path.exists(log)
                                                     else "")
    manifest = json.load(open(os.path.join(sweep, "sweep.json")))
    assert manifest["seed"] == 5 and len(manifest["trials"]) == 5
    assert [t["status"] for t in manifest["trials"]] == ["PENDING"] * 3 + ["FINISHED", "PENDING"]
    assert manifest["trials"][3]["job_id"] == "99_1"
    state = json.load(open(os.path.join(sweep, "trial_00003", "state.json")))
    assert state["status"] == "FINISHED" and state["job_ids"] == ["99_1"]
    rows = [json.loads(line) for line in open(os.path.join(sweep, "trial_00003",
                                                           "result.json"))]
    assert [r["output"] for r in rows] == [4, 4]
    # the trial's own job.sh runs the trial alone (what a resubmission submits)
    own = open(os.path.join(sweep, "trial_00003", "job.sh")).read()
    assert "--array" not in own and f"batch {sweep}/trial_00003 --script" in own


def test_pbs_array_script_and_the_fake_qsub(tmp_path, storage, monkeypatch):
    pbs = fakepbs.FakePbs.install(tmp_path / "pbs_state", monkeypatch,
                                  clear=("PBS_", "SLURM_", "OMPI_", "PMI_", "PALS_"))
    job = sweep_file(tmp_path, storage, "pbsweep", site="generic-pbs",
                     sweep="max_concurrent_trials = 2\nseed = 5",
                     scheduler='[scheduler]\nqueue = "workq"\nlauncher = "local"\n')
    rendered = cli("sweep", job, "--dry-run").stdout
    assert "\n#PBS -J 0-2\n#PBS -W max_run_subjobs=2\n" in rendered
    assert "\nHPCTRAIN_TRIAL_INDEX=$(( 0 + PBS_ARRAY_INDEX ))\n" in rendered
    out = cli("sweep", job).stdout
    assert "submitted pbs job array 1[].pbshost (trials 0-2)" in out
    sweep = os.path.join(storage, "pbsweep")
    submitted = pbs.submission("1[].pbshost")["script"]
    assert submitted == open(os.path.join(sweep, "arrays", "array-000-000.sh"), "rb").read()
    assert submitted.decode() == rendered  # what --dry-run printed is what qsub got
    assert pbs.jobs()["1[].pbshost"]["array_indices_submitted"] == "0-2"
    for i in range(3):
        state = json.load(open(os.path.join(sweep, f"trial_0000{i}", "state.json")))
        assert state["status"] == "PENDING"
        assert state["submissions"][-1]["job_id"] == f"1[{i}].pbshost"
    # subjob 2, as MoM starts it (PBS_ARRAY_INDEX=2): trial 2 runs
    proc = pbs.run("1[].pbshost", hosts=[os.uname().nodename],
                   extra_env={"PBS_ARRAY_INDEX": "2", "PBS_JOBID": "1[2].pbshost"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    grid = tune.ResultGrid.from_path(sweep)
    assert [r.status for r in grid] == ["PENDING", "PENDING", "FINISHED"]
    assert grid.get_best_result().config == {"train_loop_config": {"input": 3}}


@pytest.mark.parametrize("name", ["hpctrain.tune.search", "hpctrain.tune._sweep"])
def test_docstring_examples_of_the_sweep_helpers(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
