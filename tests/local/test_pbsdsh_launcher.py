"""The pbsdsh launcher (hpctrain.launchers.pbsdsh) on this machine, with a stand-in for
OpenPBS's pbsdsh on PATH that behaves as the real one does (src/cmds/pbsdsh.c): it runs
the task after ``--`` with the job's environment from MoM, not its own; it exits 0
whatever the task did and prints ``pbsdsh: task 0x… exit status N`` when N is not 0; a
task it cannot spawn is ``pbsdsh: spawn failed on node I err …``, still exit 0. The real
pbsdsh on the real server's two MoMs: tests/cluster/test_pbs_server.py."""
from __future__ import annotations

import doctest
import os
import sys
import uuid

import pytest

import workloads
from helpers import assert_same_state, final_state, run_state
from hpctrain import FailureConfig, RunConfig, ScalingConfig, TrainingFailedError
from hpctrain.allocation.supervisor import AttemptPlan, Supervisor
from hpctrain.errors import ConfigError
from hpctrain.launchers import pbsdsh as tm
from hpctrain.launchers.pbsdsh import PbsdshLauncher
from hpctrain.result import result_or_raise
from hpctrain.run import Run, driver_pythonpath

FAKE_PBSDSH = f"""#!{sys.executable}
import os, subprocess, sys
args = sys.argv[1:]
node, cmd = args[args.index("-n") + 1], args[args.index("--") + 1:]
with open(os.environ["FAKE_PBSDSH_LOG"], "a") as f:
    f.write(" ".join(args) + "\\n")
if node == os.environ.get("FAKE_PBSDSH_REFUSE"):
    print(f"pbsdsh: spawn failed on node {{node}} err System error", flush=True)
    sys.exit(0)
# MoM's environment for a task of the job, none of pbsdsh's own
job_env = {{"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/"),
           "PBS_JOBID": "7.server", "PBS_NODENUM": node, "PBS_ENVIRONMENT": "PBS_BATCH"}}
rc = subprocess.call(cmd, env=job_env, cwd=job_env["HOME"])
if rc:
    print(f"pbsdsh: task 0x00000000 exit status {{rc}}", flush=True)
"""


def test_module_doctests():
    assert doctest.testmod(tm).failed == 0


@pytest.fixture
def pbsdsh(tmp_path, monkeypatch):
    """A PBS job's view: PBS_NODEFILE of two hosts (localhost twice, spelled two ways),
    the stand-in pbsdsh first on PATH; returns its log of invocations."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pbsdsh").write_text(FAKE_PBSDSH)
    (bin_dir / "pbsdsh").chmod(0o755)
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("localhost\n127.0.0.1\n")
    log = tmp_path / "pbsdsh.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PBS_NODEFILE", str(nodefile))
    monkeypatch.setenv("FAKE_PBSDSH_LOG", str(log))
    monkeypatch.setenv("HPCTRAIN_SECRET_PROBE", "not-on-any-command-line")
    return log


def fit_with_pbsdsh(func, storage, *, config, name, max_failures=0):
    """What the batch step does with a spec whose launcher is pbsdsh: the supervisor
    drives 2 ranks, 1 per node."""
    from hpctrain.torch import TorchTrainer

    trainer = TorchTrainer(func, train_loop_config=config,
                           scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(name=name, storage_path=storage, verbose=0,
                                                failure_config=FailureConfig(
                                                    max_failures=max_failures)))
    prepared = Run.for_trainer(trainer)
    run = prepared.run_dir
    os.makedirs(run.internal_dir, exist_ok=True)
    with run.exclusive():
        prepared.prepare()
        plan = AttemptPlan(2, f"tm-{uuid.uuid4().hex[:8]}",
                           failure=FailureConfig(max_failures=max_failures),
                           extra_env=driver_pythonpath())
        sup = Supervisor(run, plan, launcher=PbsdshLauncher(workers_per_node=1))
        status = sup.run_to_end()
    return result_or_raise(run.path, status)


def test_one_task_per_node_trains_like_the_local_launcher(tmp_path, storage, pbsdsh):
    result = fit_with_pbsdsh(workloads.deterministic_with_info, storage,
                             config={"epochs": 2}, name="tm")
    assert sorted(pbsdsh.read_text().splitlines()) == [  # both start at once
        f"-n {i} -- /bin/sh -c . \"$0\" && exec \"$@\" {result.path}/logs/"
        f"{run_state(result.path)['job_ids'][0]}/.tm-env.rank-{i} {sys.executable} -m "
        f"hpctrain.worker {result.path}" for i in (0, 1)]
    import json

    infos = [json.load(open(os.path.join(result.path, "test-out", f"info-rank-{r}.json")))
             for r in (0, 1)]
    assert [(i["rank"], i["local_rank"], i["node_rank"], i["world_size"],
             i["local_world_size"], i["master_addr"]) for i in infos] == [
        (0, 0, 0, 2, 1, "localhost"), (1, 0, 1, 2, 1, "localhost")]
    assert infos[0]["cwd"] == os.getcwd()  # the batch step's directory, not MoM's $HOME
    logs = os.path.join(result.path, "logs", run_state(result.path)["job_ids"][0])
    # the environment files are gone
    assert sorted(os.listdir(logs)) == ["launcher.out", "rank-0.out", "rank-1.out"]
    assert "rank 1 runs on" in open(os.path.join(logs, "rank-1.out")).read()
    assert "not-on-any-command-line" not in open(os.path.join(logs, "launcher.out")).read()
    local = fit_with_local(storage)
    assert_same_state(final_state(result.path), final_state(local.path))


def fit_with_local(storage):
    from hpctrain.torch import TorchTrainer

    return TorchTrainer(workloads.deterministic, train_loop_config={"epochs": 2},
                        scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(name="local", storage_path=storage,
                                             verbose=0)).fit()


def test_a_rank_failure_reported_by_pbsdsh_is_that_rank(storage, pbsdsh):
    """pbsdsh exits 0 after its task failed: the rank's exit code is the one it prints."""
    with pytest.raises(TrainingFailedError) as info:
        fit_with_pbsdsh(workloads.fail_on_rank, storage, config={"rank": 1}, name="fails")
    assert info.value.rank == 1 and "ValueError: boom on rank 1" in info.value.worker_traceback


def test_a_task_pbsdsh_cannot_spawn_is_the_launchers_failure(storage, pbsdsh, monkeypatch):
    monkeypatch.setenv("FAKE_PBSDSH_REFUSE", "1")
    with pytest.raises(TrainingFailedError) as info:
        fit_with_pbsdsh(workloads.deterministic, storage, config={"epochs": 2},
                        name="refused")
    run = info.value.result.path
    (attempt,) = run_state(run)["attempts"]
    assert (attempt["failed_rank"], attempt["error"]) == (
        -1, "the launcher pbsdsh could not start the ranks: pbsdsh: spawn failed on node 1 "
            "err System error")
    assert open(os.path.join(run, "error.txt")).read().startswith(
        "Training failed: the launcher, attempt 1")
    logs = os.path.join(run, "logs", run_state(run)["job_ids"][0])
    assert not [f for f in os.listdir(logs) if f.startswith(".tm-env")]


def test_too_few_nodes_and_no_pbsdsh_are_clear_errors(tmp_path, pbsdsh, monkeypatch):
    launcher = PbsdshLauncher(workers_per_node=1)
    with pytest.raises(ConfigError, match=r"pbsdsh: 3 ranks at 1 per node need 3 nodes; "
                                          r"PBS_NODEFILE lists 2 \(localhost, 127.0.0.1\)"):
        launcher.launch(command=["true"], env=dict(os.environ), num_workers=3,
                        log_dir=str(tmp_path / "logs"))
    env = {"PBS_NODEFILE": os.environ["PBS_NODEFILE"], "PATH": "/nonexistent",
           "PBS_CONF_FILE": str(tmp_path / "none.conf")}
    with pytest.raises(ConfigError, match=r"pbsdsh was not found on PATH nor in "
                                          r"\$PBS_EXEC/bin \(PBS_EXEC unknown\)"):
        launcher.launch(command=["true"], env=env, num_workers=2,
                        log_dir=str(tmp_path / "logs"))
    env["PBS_NODEFILE"] = str(tmp_path / "gone")
    with pytest.raises(ConfigError, match=r"cannot read PBS_NODEFILE .*gone \(No such file or "
                                          r"directory\); expected the job's host list"):
        launcher.launch(command=["true"], env=env, num_workers=2,
                        log_dir=str(tmp_path / "logs"))
