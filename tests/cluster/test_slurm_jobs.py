"""Batch runs on the real test Slurm cluster (scripts/slurm-cluster.sh: Debian's
slurm-wlm, nodes n1 and n2 on this machine): `hpctrain submit`, `hpctrain render` +
`sbatch` by hand, the Python API with scheduler="slurm", two jobs at once, cancel, and
bad input that must submit nothing."""
import json
import os
import subprocess
import sys

import pytest

import hpctrain
import workloads
from hpctrain import FailureConfig, RunConfig, ScalingConfig
from hpctrain.torch import TorchTrainer
from helpers import (ROOT, SUPPORT, assert_quickstart_checkpoints, assert_same_state,
                     final_state, workload, write_job)
from helpers import run_state, cli as hpctrain_cli
from slurm import sbatch

pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm")]
WORKLOADS = os.path.join(SUPPORT, "workloads.py")
EPOCHS = 4



def job_file(tmp_path, storage, name, *, function="deterministic_with_info", config=None,
             failure=None, entrypoint=None):
    return write_job(
        tmp_path, name, site="test-cluster",
        entrypoint=entrypoint or workload(f"workloads:{function}"), storage=storage,
        scaling={"num_nodes": 2, "workers_per_node": 2}, scheduler={"time": "00:05:00"},
        **({"failure": failure} if failure else {}), config={"epochs": EPOCHS, **(config or {})})


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory):
    """The same training run locally with 4 workers and the same seed."""
    storage = str(tmp_path_factory.mktemp("local"))
    result = TorchTrainer(workloads.deterministic, train_loop_config={"epochs": EPOCHS},
                          scaling_config=ScalingConfig(num_workers=4),
                          run_config=RunConfig(name="local", storage_path=storage,
                                               verbose=0)).fit()
    return final_state(result.path)


def read_info(run_path):
    out = {}
    for r in range(4):
        with open(os.path.join(run_path, "test-out", f"info-rank-{r}.json")) as f:
            out[r] = json.load(f)
    return out


def test_submit_2x2_ddp_matches_local_run_and_ranks_are_right(tmp_path, storage,
                                                              local_reference):
    job = job_file(tmp_path, storage, "ddp2x2")
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    p = hpctrain_cli("submit", job, "--follow", cwd=str(workdir))
    assert "submitted slurm job" in p.stdout and "run FINISHED" in p.stdout
    assert "(rank 0) rank 0 runs on n1" in p.stdout  # rank 0's output, echoed as locally
    run = os.path.join(storage, "ddp2x2")
    assert_same_state(final_state(run), local_reference)

    info = read_info(run)
    # block distribution: ranks 0,1 on n1 and 2,3 on n2
    expected = {0: (0, 0, "n1"), 1: (1, 0, "n1"), 2: (0, 1, "n2"), 3: (1, 1, "n2")}
    for r, (local, node, host) in expected.items():
        i = info[r]
        assert (i["rank"], i["local_rank"], i["node_rank"], i["node"]) == (r, local, node, host)
        assert (i["world_size"], i["local_world_size"]) == (4, 2)
        # Ray's TorchTrainer environment, NODE_RANK included
        assert i["env"] == {"RANK": str(r), "LOCAL_RANK": str(local), "WORLD_SIZE": "4",
                            "LOCAL_WORLD_SIZE": "2", "NODE_RANK": str(node)}
        assert i["master_addr"] == info[0]["node"] == "n1"  # where rank 0 runs
        assert i["cwd"] == str(workdir)  # the job runs where it was submitted from
    assert len({i["master_port"] for i in info.values()}) == 1

    state = run_state(run)
    assert state["status"] == "FINISHED"
    job_id = state["submissions"][0]["job_id"]
    assert sorted(os.listdir(os.path.join(run, "logs", job_id))) == [
        "launcher.out", "rank-0.out", "rank-1.out", "rank-2.out", "rank-3.out"]
    assert "srun --kill-on-bad-exit=1 --nodes=2 --ntasks=4" in open(
        os.path.join(run, "logs", job_id, "launcher.out")).read()

    # what `hpctrain render` prints is byte for byte what was submitted
    rendered = hpctrain_cli("render", job).stdout
    with open(os.path.join(run, "job.sh")) as f:
        assert f.read() == rendered

    status = hpctrain_cli("status", run).stdout
    assert "FINISHED" in status and f"slurm job {job_id}: COMPLETED" in status
    # each rank's own output, by run directory or by run name under the storage path
    assert hpctrain_cli("logs", run, "--rank", "2").stdout == "rank 2 runs on n2\n"
    by_name = hpctrain_cli("logs", "ddp2x2", "--rank", "1", "--follow",
                           env={**os.environ, "HPCTRAIN_STORAGE_PATH": storage})
    assert by_name.stdout == "rank 1 runs on n1\n"
    missing = hpctrain_cli("logs", run, "--rank", "9", check=False)
    assert missing.returncode == 2 and "no output of rank 9" in missing.stderr


def test_rendered_script_submitted_by_hand_runs_the_same_training(tmp_path, storage,
                                                                  local_reference):
    # a "module:function" entry point next to the job file; sbatch run from elsewhere
    (tmp_path / "mytrain.py").write_text(
        f"import sys\nsys.path.insert(0, {SUPPORT!r})\n"
        "from workloads import deterministic_with_info  # noqa\n")
    job = job_file(tmp_path, storage, "byhand", entrypoint="mytrain:deterministic_with_info")
    script = hpctrain_cli("render", job).stdout
    assert not os.path.exists(os.path.join(storage, "byhand"))  # render creates nothing
    job_id = sbatch(script, timeout=240)
    run = os.path.join(storage, "byhand")
    state = run_state(run)
    assert state["status"] == "FINISHED", open(
        os.path.join(run, "logs", f"slurm-{job_id}.out")).read()
    assert state["job_ids"] == [job_id]
    # the job recorded itself: `hpctrain status` shows it, `hpctrain cancel` finds it
    assert [(s["job_id"], s["recorded_by"]) for s in state["submissions"]] == [(job_id, "job")]
    assert f"slurm job {job_id}: " in hpctrain_cli("status", run).stdout
    assert_same_state(final_state(run), local_reference)
    with open(os.path.join(run, "job.sh")) as f:  # the batch step kept its own script
        assert f.read() == script


def test_two_jobs_share_the_nodes_at_once_and_both_finish(tmp_path, storage):
    runs = []
    for name in ("twin-a", "twin-b"):
        job = job_file(tmp_path, storage, name, function="deterministic")
        hpctrain_cli("submit", job)
        runs.append(os.path.join(storage, name))
    for run in runs:
        status = hpctrain_cli("status", run, "--follow").returncode
        assert status == 0
    attempts = [run_state(r)["attempts"][0] for r in runs]
    assert all(a["outcome"] == "FINISHED" for a in attempts)
    a, b = attempts
    assert a["started"] < b["ended"] and b["started"] < a["ended"], \
        "the two jobs did not run at the same time"
    assert_same_state(final_state(runs[0]), final_state(runs[1]))


def test_python_api_submits_follows_and_returns_the_result(storage, local_reference):
    result = TorchTrainer(
        workloads.deterministic, train_loop_config={"epochs": EPOCHS},
        scaling_config=ScalingConfig(num_workers=4, num_nodes=2),
        run_config=RunConfig(name="from-python", storage_path=storage, verbose=0),
        scheduler="slurm", site="test-cluster").fit()
    assert result.status == "FINISHED"
    assert result.metrics["epoch"] == EPOCHS - 1
    assert result.checkpoint is not None
    assert_same_state(final_state(result.path), local_reference)
    script = open(os.path.join(result.path, "job.sh")).read()
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=2\n" in script
    assert "#SBATCH --partition=debug\n" in script  # from the site config


def test_failed_rank_reaches_the_caller_with_its_traceback(storage):
    # the worker's ValueError, read back from the run directory by the driver that
    # follows the job: `except ValueError` around fit() catches it (as Ray's
    # RayTaskError(ValueError)), and it is a TrainingFailedError
    with pytest.raises(ValueError) as info:
        TorchTrainer(workloads.fail_on_rank, train_loop_config={"rank": 3},
                     scaling_config=ScalingConfig(num_workers=4, workers_per_node=2),
                     run_config=RunConfig(name="fails", storage_path=storage, verbose=0,
                                          failure_config=FailureConfig(max_failures=0)),
                     scheduler="slurm", site="test-cluster").fit()
    assert isinstance(info.value, hpctrain.TrainingFailedError) and info.value.rank == 3
    assert type(info.value.__cause__) is ValueError
    assert info.value.__cause__.args == ("boom on rank 3",)
    assert "rank 3" in open(os.path.join(storage, "fails", "error.txt")).read()


def test_cancel_stops_the_job_and_keeps_committed_checkpoints(tmp_path, storage):
    job = job_file(tmp_path, storage, "cancelme", function="slow_checkpointing")
    hpctrain_cli("submit", job)
    run = os.path.join(storage, "cancelme")
    # wait (bounded) until a checkpoint is committed
    for _ in range(240):
        if os.path.isdir(os.path.join(run, "checkpoints")) and any(
                n.startswith("checkpoint_") for n in os.listdir(os.path.join(run, "checkpoints"))):
            break
        subprocess.run(["sleep", "0.5"])
    else:
        pytest.fail("no checkpoint was committed")
    out = hpctrain_cli("cancel", run).stdout
    assert "cancelled slurm job" in out
    p = hpctrain_cli("status", run, "--follow", check=False)
    assert p.returncode == 1  # the run did not finish
    state = hpctrain_cli("status", run).stdout
    assert "CANCELLED" in state
    from hpctrain.result import Result

    assert Result.from_path(run).checkpoint is not None


BAD = [
    ("malformed", "[job\n", "invalid TOML at line"),
    ("unknown-site", 'site = "nowhere"\n', "unknown site 'nowhere'"),
    ("gpu-on-cpu", "[scaling]\nuse_gpu = true\n", "CPU-only nodes"),
    ("walltime", '[scheduler]\ntime = "03:00:00"\n', "over the limit of 02:00:00"),
    ("dotdot", '[run]\nname = "../escape"\n', "run.name"),
    ("semicolon", '[run]\nname = "a;b"\n', "run.name"),
    ("bare-walltime", "[scheduler]\ntime = 60\n", '"01:00:00"'),
]


@pytest.mark.parametrize("name,text,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_gets_a_clear_error_and_submits_nothing(tmp_path, storage, name, text,
                                                          message):
    before = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True,
                            text=True).stdout.split()
    path = tmp_path / "bad.toml"
    base = (f'site = "test-cluster"\n[job]\nentrypoint = "{WORKLOADS}:deterministic"\n'
            f'[run]\nstorage_path = "{storage}"\n')
    # later tables of the same name would be a TOML error: put the bad part in place
    if text.startswith("[run]"):
        base = base.replace(f'[run]\nstorage_path = "{storage}"\n',
                            f'[run]\nstorage_path = "{storage}"\n' + text.split("\n", 1)[1])
        text = ""
    if text.startswith("site ="):
        base = base.replace('site = "test-cluster"\n', "")
    path.write_text(text + base if text.startswith(("site", "[job")) else base + text)
    p = hpctrain_cli("submit", str(path), check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "error:" in p.stderr and message in p.stderr
    assert p.stdout == ""
    assert os.listdir(storage) == []  # no run directory
    after = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True,
                           text=True).stdout.split()
    assert set(after) <= set(before)  # nothing submitted


DRIVER = """
import sys
sys.path.insert(0, {here!r})
import workloads
from hpctrain import RunConfig, ScalingConfig
from hpctrain.torch import TorchTrainer
TorchTrainer(workloads.slow_checkpointing, scaling_config=ScalingConfig(num_workers=2),
             run_config=RunConfig(name="detach", storage_path={storage!r}),
             scheduler="slurm", site="test-cluster").fit()
"""


def test_ctrl_c_detaches_without_cancelling_and_says_how_to_reattach(storage):
    import signal

    def as_a_terminal_would_start_it():
        # Ctrl-C must reach the driver. In full-suite runs the pytest worker has been
        # seen to hand SIGINT down blocked (the source is not found yet), which the child
        # inherits: the SIGINT then stays pending and the driver never detaches. Blocking
        # SIGINT in pytest reproduces that exact timeout; this resets it as a shell does.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    p = subprocess.Popen([sys.executable, "-c", DRIVER.format(here=SUPPORT, storage=storage)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         preexec_fn=as_a_terminal_would_start_it)
    run = os.path.join(storage, "detach")
    try:
        for _ in range(240):  # bounded wait until the job runs
            state = os.path.join(run, "state.json")
            if os.path.exists(state) and json.load(open(state)).get("status") == "RUNNING":
                break
            subprocess.run(["sleep", "0.5"])
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
        assert "detached; job" in out and "keeps running" in out
        assert f"hpctrain status {run} --follow" in out
        job_id = run_state(run)["submissions"][0]["job_id"]
        queued = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"],
                                capture_output=True, text=True).stdout.strip()
        assert queued == "RUNNING"
    finally:
        if p.poll() is None:
            p.kill()
        hpctrain_cli("cancel", run, check=False)


def test_a_rank_killed_under_srun_is_blamed_and_the_group_restarts_in_the_allocation(
        tmp_path, storage, local_reference):
    job = job_file(tmp_path, storage, "killed", function="deterministic",
                   config={"crash_at": 2, "crash_rank": 2, "crash_how": "sigkill"},
                   failure={"max_failures": 1})
    hpctrain_cli("submit", job, "--follow")
    run = os.path.join(storage, "killed")
    state = run_state(run)
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "FINISHED"]
    assert state["attempts"][0]["failed_rank"] == 2          # srun: "task 2: Killed"
    assert "signal 9" in state["attempts"][0]["error"]
    assert len(set(state["job_ids"])) == 1                    # same allocation
    assert state["attempts"][1]["resumed_from"].endswith("checkpoint_000001")
    assert_same_state(final_state(run), local_reference)


def test_restore_of_a_failed_batch_run_resubmits_it_and_resumes(storage, local_reference):
    config = {"epochs": EPOCHS, "crash_at": 2, "crash_rank": 1}
    with pytest.raises(hpctrain.TrainingFailedError):
        TorchTrainer(workloads.deterministic, train_loop_config=config,
                     scaling_config=ScalingConfig(num_workers=4, num_nodes=2),
                     run_config=RunConfig(name="restored", storage_path=storage, verbose=0),
                     scheduler="slurm", site="test-cluster").fit()
    run = os.path.join(storage, "restored")
    assert TorchTrainer.can_restore(run)
    trainer = TorchTrainer.restore(run)
    assert trainer.scheduler.kind == "slurm" and trainer.site == "test-cluster"
    result = trainer.fit()
    state = run_state(run)
    assert len(state["submissions"]) == 2                      # a second job
    assert state["attempts"][-1]["resumed_from"].endswith("checkpoint_000001")
    assert result.status == "FINISHED"
    assert_same_state(final_state(run), local_reference)


def test_the_submit_from_python_example_runs_as_printed_on_the_test_cluster(tmp_path, storage):
    """examples/submit_from_python.py as the Slurm getting-started page says: run from a
    login-node shell, fit() submits a 2-node job, follows it and prints its Result."""
    example = os.path.join(ROOT, "examples", "submit_from_python.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_"))}
    env.update(HPCTRAIN_STORAGE_PATH=storage, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, example], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "final metrics: {" in p.stdout and "checkpoint: Checkpoint(" in p.stdout, p.stdout
    run = os.path.join(storage, "from-python")
    state = run_state(run)
    assert state["status"] == "FINISHED" and len(state["job_ids"]) == 1
    script = open(os.path.join(run, "job.sh")).read()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --time=00:10:00" in script


def test_ray_pytorch_quickstart_on_2_nodes_keeps_one_model_pt_from_rank_0(tmp_path, storage):
    """examples/pytorch_quickstart.py's train_func (every rank saves model.pt and reports
    it) as a 2-node job: each checkpoint holds one model.pt, rank 0's, written once."""
    example = os.path.join(ROOT, "examples", "pytorch_quickstart.py")
    job = tmp_path / "quickstart.toml"
    job.write_text(f"""
site = "test-cluster"
[job]
entrypoint = "{example}:train_func"
[run]
name = "quickstart"
storage_path = "{storage}"
[scaling]
num_nodes = 2
workers_per_node = 1
[scheduler]
time = "00:05:00"
[env]
QUICKSTART_WIDTH = "8"
QUICKSTART_SAMPLES = "128"
QUICKSTART_EPOCHS = "2"
""")
    p = hpctrain_cli("submit", str(job), "--follow", cwd=str(tmp_path))
    assert "run FINISHED" in p.stdout, p.stdout + p.stderr
    run = os.path.join(storage, "quickstart")
    assert_quickstart_checkpoints(run, epochs=2, world_size=2, width=8)


def test_a_batch_run_from_python_starts_from_resume_from_checkpoint(storage, local_reference):
    # half the epochs here, then the batch job continues from that checkpoint: the run
    # directory's payload carries resume_from_checkpoint to the batch step (which ran
    # from scratch before) and the model ends as the 4-epoch local run's
    half = TorchTrainer(workloads.deterministic, train_loop_config={"epochs": EPOCHS // 2},
                        scaling_config=ScalingConfig(num_workers=4),
                        run_config=RunConfig(name="first-half", storage_path=storage,
                                             verbose=0)).fit()
    result = TorchTrainer(
        workloads.deterministic, train_loop_config={"epochs": EPOCHS},
        scaling_config=ScalingConfig(num_workers=4, num_nodes=2),
        run_config=RunConfig(name="second-half", storage_path=storage, verbose=0),
        resume_from_checkpoint=half.checkpoint,
        scheduler="slurm", site="test-cluster").fit()
    assert result.status == "FINISHED" and result.metrics["epoch"] == EPOCHS - 1
    first = run_state(result.path)["attempts"][0]
    assert first["resumed_from"] == half.checkpoint.path
    assert_same_state(final_state(result.path), local_reference)
