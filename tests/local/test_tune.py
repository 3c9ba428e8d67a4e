"""Sweeps (hpctrain.tune, `hpctrain sweep`, `hpctrain results SWEEP_DIR`) without a cluster:
trials run here as real 1-worker runs; job array scripts are rendered, run by bash the way
an array task runs (the task's index in its environment), and handed to the fake qsub."""
import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest

import tune_workloads
from helpers import SUPPORT, cli, needs_mpirun, run_state, wait_for
from hpctrain import RunConfig, ScalingConfig, TrainingFailedError, tune
from hpctrain.errors import ConfigError
from hpctrain.spec import load_job_spec
from hpctrain.torch import TorchTrainer

pytestmark = pytest.mark.slow
WORKLOADS = os.path.join(SUPPORT, "tune_workloads.py")
sys.path.insert(0, os.path.join(SUPPORT, "fake_pbs"))
import _fakepbs as fakepbs  # noqa: E402

DOCS_SPACE = {"train_loop_config": {"num_epochs": 2, "input": tune.grid_search([1, 2, 3])}}


def attempts(run_path):
    return run_state(run_path)["attempts"]


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


def test_a_training_function_runs_with_no_framework_and_no_process_group(storage):
    """Ray runs a function trainable in a plain actor: here its worker is the framework-free
    ``function`` backend's (it used to be a 1-worker TorchTrainer's: torch imported and a
    Gloo group formed for every trial)."""
    grid = tune.Tuner(tune_workloads.frameworks_loaded,
                      param_space={"a": tune.grid_search([1, 2])},
                      run_config=RunConfig(name="plain", storage_path=storage,
                                           verbose=0)).fit()
    assert [(r.metrics["score"], r.metrics["loaded"]) for r in grid] == [(2, "none"),
                                                                          (3, "none")]
    for r in grid:  # the trial's resolved spec names the backend
        assert '[job]\nbackend = "function"\n' in open(os.path.join(r.path, "spec.toml")).read()


def test_a_training_function_given_two_workers_runs_them_without_a_framework_too(storage):
    """``with_resources(f, ScalingConfig(num_workers=2))``: both ranks run the function and
    agree on each report over hpctrain's TCP group (no process group: a function that
    wants DDP is given to a TorchTrainer)."""
    fn = tune.with_resources(tune_workloads.frameworks_loaded, ScalingConfig(num_workers=2))
    grid = tune.Tuner(fn, param_space={"a": 1},
                      run_config=RunConfig(name="two", storage_path=storage, verbose=0)).fit()
    assert not grid.errors, grid.errors
    (r,) = grid
    assert (r.metrics["world_size"], r.metrics["loaded"], r.metrics["_training_iteration"]) \
        == (2, "none", 2)


def test_a_training_function_that_uses_torch_prepares_its_model_and_loader_alone(storage):
    grid = tune.Tuner(tune_workloads.torch_regression,
                      param_space={"lr": tune.grid_search([0.1]), "epochs": 30},
                      run_config=RunConfig(name="torchfn", storage_path=storage,
                                           verbose=0)).fit()
    assert not grid.errors, grid.errors
    (r,) = grid
    # one rank: the model is not wrapped in DDP, the loader keeps its own sampler (all
    # 4 batches of 16), and no process group was formed
    assert (r.metrics["model"], r.metrics["process_group"], r.metrics["batches"]) == \
        ("Linear", False, 4)
    assert r.metrics["loss"] < 0.05


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
    from hpctrain.tune.jobfile import manifest_from_spec
    from hpctrain.tune.sweepdir import SweepDir

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
    state = run_state(os.path.join(sweep, "trial_00003"))
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
        state = run_state(os.path.join(sweep, f"trial_0000{i}"))
        assert state["status"] == "PENDING"
        assert state["submissions"][-1]["job_id"] == f"1[{i}].pbshost"
    # subjob 2, as MoM starts it (PBS_ARRAY_INDEX=2): trial 2 runs
    proc = pbs.run("1[].pbshost", hosts=[os.uname().nodename],
                   extra_env={"PBS_ARRAY_INDEX": "2", "PBS_JOBID": "1[2].pbshost"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    grid = tune.ResultGrid.from_path(sweep)
    assert [r.status for r in grid] == ["PENDING", "PENDING", "FINISHED"]
    assert grid.get_best_result().config == {"train_loop_config": {"input": 3}}


@pytest.mark.parametrize("name", ["hpctrain.search_space", "hpctrain.tune._sweep",
                                  "hpctrain.tune.sweepdir"])
def test_docstring_examples_of_the_sweep_helpers(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


# --------------------------------------------------------------------------- review fixes
def trial_state(sweep, i):
    return run_state(os.path.join(sweep, f"trial_{i:05d}"))


def starts(sweep, i):
    path = os.path.join(sweep, f"trial_{i:05d}", "starts.log")
    return open(path).read().splitlines() if os.path.exists(path) else []


def _record_mpi_flake(storage, proc):
    """The open flake below: keep what the failing worker process had, for the next look
    (/tmp/hpctrain-mpi-flake-*.txt: this process's environment, limits and open files, a
    bare mpiexec run with the same environment, and each trial's launcher.out)."""
    import glob
    import resource

    out = [f"sweep exit {proc.returncode}\n--- stderr\n{proc.stderr}\n--- stdout\n{proc.stdout}"]
    out.append("--- environment\n" + "\n".join(f"{k}={v}" for k, v in sorted(os.environ.items())))
    out.append("--- limits\n" + "\n".join(
        f"{n} {resource.getrlimit(getattr(resource, n))}" for n in dir(resource)
        if n.startswith("RLIMIT_")))
    try:
        out.append("--- open fds: " + " ".join(
            f"{fd}->{os.readlink(f'/proc/self/fd/{fd}')}" for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")))
    except OSError as exc:
        out.append(f"--- open fds: {exc}")
    bare = subprocess.run(["mpiexec", "-n", "2", "--oversubscribe", sys.executable, "-c",
                           "print('rank ok')"], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env=dict(
                              os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
                              OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
    out.append(f"--- bare mpiexec: exit {bare.returncode}\n{bare.stdout}\n{bare.stderr}")
    for path in sorted(glob.glob(os.path.join(storage, "mpisweep", "trial_*", "logs", "*"))):
        with contextlib.suppress(OSError):
            out.append(f"--- {path}\n" + open(path, errors="replace").read()[-4000:])
    with open(f"/tmp/hpctrain-mpi-flake-{os.getpid()}.txt", "w") as f:
        f.write("\n".join(out))


@needs_mpirun
@pytest.mark.xfail(strict=False, reason=(
    "open flake, seen in 3 of 4 full-suite runs on 2026-11-24 and never alone (20+ runs, "
    "also beside the MPI, PBS and DeepSpeed tests): each trial's local mpiexec exits 1 "
    "within 15 ms, printing nothing (launcher.out holds only hpctrain's command line); "
    "something the full suite leaves in the xdist worker's process is suspected; see the "
    "closing note of issue 13"))
def test_hpctrain_sweep_runs_the_other_backends_too(tmp_path, storage):
    job = sweep_file(tmp_path, storage, "mpisweep", function="mpi_size")
    text = open(job).read().replace("[job]\n", '[job]\nbackend = "mpi"\n')
    open(job, "w").write(text.replace("num_workers = 1", "num_workers = 2")
                         .replace("[1, 2, 3]", "[1, 2]"))
    p = cli("sweep", job, check=False)
    if "trial_00001 FINISHED" not in p.stderr:
        _record_mpi_flake(storage, p)
    assert "trial_00001 FINISHED" in p.stderr, p.stderr
    grid = tune.ResultGrid.from_path(os.path.join(storage, "mpisweep"))
    assert [(r.metrics["output"], r.metrics["size"]) for r in grid] == [(1, 2), (2, 2)]
    assert grid.get_best_result().config == {"train_loop_config": {"input": 2}}


def test_the_warning_signal_stops_a_local_sweep_cleanly_and_a_rerun_continues_it(
        tmp_path, storage):
    """`hpctrain sweep` inside a batch job (--signal=B:USR1@120): SIGUSR1 stops the running
    trials at a checkpoint (exit 75, like `hpctrain run`) instead of killing the sweep."""
    from hpctrain.rundir.commit import verify_checkpoint
    from hpctrain.rundir.layout import RunDir

    gate = tmp_path / "gate"
    job = sweep_file(tmp_path, storage, "warned", function="gated",
                     extra_config=f'gated = [2, 3]\ngate = "{gate}"',
                     sweep="max_concurrent_trials = 2")
    sweep = os.path.join(storage, "warned")
    proc = subprocess.Popen([sys.executable, "-m", "hpctrain.cli", "sweep", job],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # trial 0 (input 1) finishes; trials 1 and 2 wait for the gate, side by side
        wait_for(lambda: starts(sweep, 1) and starts(sweep, 2) and os.path.exists(
                     os.path.join(sweep, "trial_00000", "state.json"))
                 and trial_state(sweep, 0)["status"] == "FINISHED", 90,
                 "trial 0 to finish and trials 1 and 2 to start", proc=proc, poll_s=0.2)
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 75, out + err
    assert "stopped (signal SIGUSR1): 2 trial(s) did not finish" in err
    for i in (1, 2):
        state = trial_state(sweep, i)
        assert state["status"] == "STOPPED", state
        latest = RunDir(os.path.join(sweep, f"trial_0000{i}")).latest_checkpoint()
        assert latest is not None and verify_checkpoint(latest.path) == []
        assert open(os.path.join(latest.path, "waited")).read() == "1"
    manifest = json.load(open(os.path.join(sweep, "sweep.json")))
    assert [t["status"] for t in manifest["trials"]] == ["FINISHED", "STOPPED", "STOPPED"]
    # again, the gate open: the stopped trials resume from their checkpoints, the finished
    # one is not run again
    gate.write_text("open")
    again = cli("sweep", job)
    assert "2 of 3 trials to run here" in again.stdout
    grid = tune.ResultGrid.from_path(sweep)
    assert [r.status for r in grid] == ["FINISHED"] * 3
    assert [r.metrics["output"] for r in grid] == [1, 2, 3]
    assert [len(starts(sweep, i)) for i in range(3)] == [1, 2, 2]
    for i in (1, 2):
        second = attempts(os.path.join(sweep, f"trial_0000{i}"))[-1]
        assert second["resumed_from"] and os.path.basename(second["resumed_from"]) \
            .startswith("checkpoint_")


def test_search_space_values_json_cannot_hold_are_refused_before_anything_is_made(
        tmp_path, storage):
    trainer = TorchTrainer(tune_workloads.docs_example,
                           scaling_config=ScalingConfig(num_workers=1),
                           run_config=RunConfig(name="objects", storage_path=storage))
    space = {"train_loop_config": {"num_epochs": 1, "act": tune.grid_search([max, min])}}
    with pytest.raises(ConfigError) as info:
        tune.Tuner(trainer, param_space=space).fit()
    assert str(info.value).startswith(
        "param_space.train_loop_config.act.grid_search[0]: expected a JSON value (number, "
        "string, boolean, list or table of those), got builtin_function_or_method "
        "<built-in function max>")
    assert 'HINT: sweep.json records every trial\'s config' in str(info.value)
    with pytest.raises(ConfigError, match=r"param_space.train_loop_config.model: expected a "
                                          r"JSON value .* got object <object object"):
        tune.Tuner(trainer, param_space={"train_loop_config": {"model": object()}}).fit()
    # a TOML date is not JSON either
    job = tmp_path / "dated.toml"
    job.write_text(f'[job]\nentrypoint = "{WORKLOADS}:docs_example"\n[run]\n'
                   f'storage_path = "{storage}"\n[sweep.param_space]\nday = 2024-05-01\n')
    p = cli("sweep", str(job), check=False)
    assert p.returncode == 2 and f"{job}: sweep.param_space.day: expected a JSON value" \
        in p.stderr, p.stderr
    assert os.listdir(storage) == []


def test_pbs_rerun_runs_only_its_trials_and_a_trial_in_its_own_job_is_not_submitted_twice(
        tmp_path, storage, monkeypatch):
    from hpctrain.allocation.recovery import requeue
    from hpctrain.rundir.layout import RunDir
    from hpctrain.schedulers import get_scheduler

    pbs = fakepbs.FakePbs.install(tmp_path / "pbs_state", monkeypatch,
                                  clear=("PBS_", "SLURM_", "OMPI_", "PMI_", "PALS_"))
    job = sweep_file(tmp_path, storage, "gaps", site="generic-pbs", function="fails_on",
                     extra_config="bad = 2", sweep="seed = 5",
                     scheduler='[scheduler]\nqueue = "workq"\nlauncher = "local"\n')
    sweep = os.path.join(storage, "gaps")
    assert "submitted pbs job array 1[].pbshost (trials 0-2)" in cli("sweep", job).stdout
    # subjob 1: trial 1 (input 2) fails
    pbs.run("1[].pbshost", hosts=[os.uname().nodename],
            extra_env={"PBS_ARRAY_INDEX": "1", "PBS_JOBID": "1[1].pbshost"})
    assert trial_state(sweep, 1)["status"] == "FAILED"
    # again: trials 0 and 2 only, but `-J` takes no list, so the array is 0-2 and its
    # subjob 1 ends at once: the failed trial is not run again without --retry-failed
    out = cli("sweep", job).stdout
    assert "submitted pbs job array 2[].pbshost (trials 0,2)" in out
    script = pbs.submission("2[].pbshost")["script"].decode()
    assert "\n#PBS -J 0-2\n" in script and '\ncase " 0 2 " in *" $HPCTRAIN_TRIAL_INDEX "' \
        in script
    gap = pbs.run("2[].pbshost", hosts=[os.uname().nodename],
                  extra_env={"PBS_ARRAY_INDEX": "1", "PBS_JOBID": "2[1].pbshost"})
    assert gap.returncode == 0 and "trial 1 is not run by this array" in gap.stdout
    assert trial_state(sweep, 1)["status"] == "FAILED"
    assert len(trial_state(sweep, 1)["attempts"]) == 1
    assert not any("2[1]" in f for f in os.listdir(os.path.join(sweep, "trial_00001", "logs")))
    # trial 0 stopped in subjob 2[0] and resubmits itself (what the batch step does after
    # a clean stop): PBS takes no dependency on one subjob, so its job.sh goes without one
    run = RunDir(os.path.join(sweep, "trial_00000"))
    with run.update_state() as s:
        s["status"] = "REQUEUED"
    assert requeue(run, get_scheduler("pbs"), "2[0].pbshost") == "3.pbshost"
    assert pbs.jobs()["3.pbshost"]["job_state"] == "Q"
    assert "depend" not in pbs.jobs()["3.pbshost"]
    assert trial_state(sweep, 0)["submissions"][-1]["job_id"] == "3.pbshost"
    # while that job is queued the sweep is not submitted again (trial 0 would run twice)
    arrays = json.load(open(os.path.join(sweep, "sweep.json")))["arrays"]
    p = cli("sweep", job, check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "still has trial_00000's own job 3.pbshost queued or running" in p.stderr
    assert "HINT: wait for it (hpctrain sweep ... --follow), cancel it (qdel 3.pbshost)" \
        in p.stderr
    assert sorted(pbs.jobs()) == ["1[].pbshost", "2[].pbshost", "3.pbshost"]
    assert json.load(open(os.path.join(sweep, "sweep.json")))["arrays"] == arrays
    # the trial's own job runs it to the end
    done = pbs.run("3.pbshost", hosts=[os.uname().nodename])
    assert done.returncode == 0, done.stdout + done.stderr
    grid = tune.ResultGrid.from_path(sweep)
    assert [r.status for r in grid] == ["FINISHED", "FAILED", "PENDING"]
    assert grid[0].metrics["output"] == 1


def test_a_failed_second_array_keeps_the_sweep_the_first_one_needs(tmp_path, storage,
                                                                  monkeypatch):
    pbs = fakepbs.FakePbs.install(tmp_path / "pbs_state", monkeypatch,
                                  clear=("PBS_", "SLURM_", "OMPI_", "PMI_", "PALS_"))
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "small-pbs.toml").write_text('[site]\nscheduler = "pbs"\n[limits]\n'
                                          'max_array_size = 2\n[scheduler]\nlauncher = "local"\n')
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(sites))
    # qsub takes the first array and refuses the next job (the user's queue limit)
    refusing = tmp_path / "refusing-bin"
    refusing.mkdir()
    (refusing / "qsub").write_text(
        f'#!/bin/sh\nif [ -e "{tmp_path}/one" ]; then\n'
        "  echo 'qsub: would exceed the queue per-user limit' >&2; exit 38\nfi\n"
        f'touch "{tmp_path}/one"\nexec {SUPPORT}/fake_pbs/qsub "$@"\n')
    (refusing / "qsub").chmod(0o755)
    monkeypatch.setenv("PATH", f"{refusing}{os.pathsep}{os.environ['PATH']}")
    job = sweep_file(tmp_path, storage, "half", site="small-pbs", sweep="seed = 5",
                     scheduler='[scheduler]\nqueue = "workq"\n')
    p = cli("sweep", job, check=False)
    assert p.returncode == 2 and "qsub refused the job" in p.stderr, p.stdout + p.stderr
    assert "the submission failed after 1 job array(s) (1[].pbshost, trials 0-1) were " \
           "submitted; they run. The sweep directory is kept" in p.stderr
    assert list(pbs.jobs()) == ["1[].pbshost"]
    sweep = os.path.join(storage, "half")
    manifest = json.load(open(os.path.join(sweep, "sweep.json")))
    assert [a["job_id"] for a in manifest["arrays"]] == ["1[].pbshost"]
    assert [t.get("job_id") for t in manifest["trials"]] == ["1[0].pbshost", "1[1].pbshost",
                                                             None]
    # a queued task of the array finds its trial's payload and runs it
    proc = pbs.run("1[].pbshost", hosts=[os.uname().nodename],
                   extra_env={"PBS_ARRAY_INDEX": "1", "PBS_JOBID": "1[1].pbshost"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert trial_state(sweep, 1)["status"] == "FINISHED"


def test_array_tasks_run_their_trial_when_the_manifest_lock_is_busy(tmp_path, storage,
                                                                   monkeypatch):
    """A thousand tasks starting at once on a slow file system: a task that cannot have
    sweep.json's lock in time still runs its trial (its state.json is the truth)."""
    from filelock import FileLock

    from hpctrain.cli.batch import run_allocation
    from hpctrain.allocation.recovery import PendingStop
    from hpctrain.rundir.layout import RunDir
    from hpctrain.tune import array_task as _batch
    from hpctrain.tune.jobfile import manifest_from_spec
    from hpctrain.tune.sweepdir import SweepDir

    job = sweep_file(tmp_path, storage, "busy", site="test-cluster", sweep="seed = 5",
                     scheduler='[scheduler]\nlauncher = "local"\n')
    spec = load_job_spec(job)
    sweep = SweepDir(os.path.join(storage, "busy"))
    manifest_from_spec(sweep, spec)
    monkeypatch.setattr(_batch, "MANIFEST_WAIT_S", 0.2)
    run = RunDir(sweep.trial_path(2))
    with FileLock(sweep.manifest_file + ".lock"):  # another task holds it throughout
        code = _batch.run_trial(run, spec, 2, lambda one, script: run_allocation(
            run, one, PendingStop(), script))
    assert code == 0
    assert run.read_state()["status"] == "FINISHED"
    assert [r.status for r in tune.ResultGrid.from_path(sweep.path)] == \
        ["PENDING", "PENDING", "FINISHED"]
    assert sweep.read()["trials"][2]["status"] == "PENDING"  # not recorded there: no harm
    assert sweep.refresh()[2] == "FINISHED"  # the driver's next look records it
