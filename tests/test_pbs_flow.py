"""`hpctrain submit | status | cancel` against PBS, up to the line we can reach here.

No PBS server can be installed on these machines, so qsub/qstat/qdel are the fakes in
tests/fake_pbs/ (they reproduce the outputs and exit codes recorded from a live OpenPBS
23.06 server in shared/notes/pbs-facts.md). Everything on our side is real: the rendered
script, the exact bytes qsub receives, the job's batch step run by bash as MoM would
(from $HOME, with the PBS_* variables and a PBS_NODEFILE), Debian's Open MPI `mpirun`
starting the ranks from that node file, a real 2-rank Gloo training, and job state read
back through `qstat -f -F json`.
"""
import json
import os
import sys

import pytest

import workloads
from helpers import assert_same_state, cli, final_state, needs_mpirun
from hpctrain import RunConfig, ScalingConfig
from hpctrain.torch import TorchTrainer

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_DIR = os.path.join(HERE, "fake_pbs")
sys.path.insert(0, FAKE_DIR)
import _fakepbs as fakepbs  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def pbs(tmp_path, monkeypatch):
    return fakepbs.FakePbs.install(tmp_path / "pbs_state", monkeypatch,
                                   clear=("PBS_", "SLURM_", "OMPI_", "PMI_", "PALS_"))


def job_file(tmp_path, storage, name):
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""
site = "generic-pbs"
[job]
entrypoint = "{os.path.join(HERE, 'workloads.py')}:deterministic"
[run]
name = "{name}"
storage_path = "{storage}"
[scaling]
num_workers = 2
workers_per_node = 2
[scheduler]
queue = "workq"
time = "00:10:00"
launcher = "mpirun"
launcher_args = ["--oversubscribe", "--bind-to", "none"]
[env]
OMPI_ALLOW_RUN_AS_ROOT = "1"
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = "1"
[config]
epochs = 3
""")
    return str(path)


@needs_mpirun
def test_submit_runs_as_mom_would_and_trains_like_a_local_run(tmp_path, storage, pbs):
    job = job_file(tmp_path, storage, "pbsrun")
    out = cli("submit", job).stdout
    assert "submitted pbs job 1.pbshost" in out
    run = os.path.join(storage, "pbsrun")
    # qsub got exactly job.sh, and job.sh is what `hpctrain render` prints
    with open(os.path.join(run, "job.sh"), "rb") as f:
        submitted = f.read()
    assert (tmp_path / "pbs_state" / "scripts" / "1.sh").read_bytes() == submitted
    assert cli("render", job).stdout.encode() == submitted
    assert b"#PBS -l select=1:ncpus=2:mpiprocs=2\n" in submitted
    assert b"#PBS -q workq\n#PBS -r y\n" in submitted
    assert "Q" in cli("status", run).stdout or "PENDING" in cli("status", run).stdout

    host = os.uname().nodename
    proc = pbs.run("1.pbshost", hosts=[host], mpiprocs=2, timeout=240)
    log = os.path.join(run, "logs", "pbs-1.pbshost.out")
    assert proc.returncode == 0, proc.stdout + proc.stderr + open(log).read()
    state = json.load(open(os.path.join(run, "state.json")))
    assert state["status"] == "FINISHED" and state["job_ids"] == ["1.pbshost"]
    assert "mpirun -np 2" in open(os.path.join(run, "logs", "1.pbshost", "launcher.out")).read()
    status = cli("status", run).stdout
    assert "pbs job 1.pbshost: COMPLETED" in status

    local = TorchTrainer(workloads.deterministic, train_loop_config={"epochs": 3},
                         scaling_config=ScalingConfig(num_workers=2),
                         run_config=RunConfig(name="local", storage_path=storage,
                                              verbose=0)).fit()
    assert_same_state(final_state(run), final_state(local.path))


def test_cancel_of_a_queued_job_and_refusal_to_submit_twice(tmp_path, storage, pbs):
    job = job_file(tmp_path, storage, "pbscancel")
    cli("submit", job)
    run = os.path.join(storage, "pbscancel")
    again = cli("submit", job, check=False)
    assert again.returncode == 2 and "already has job 1.pbshost (PENDING)" in again.stderr
    assert "cancelled pbs job 1.pbshost" in cli("cancel", run).stdout
    assert "pbs job 1.pbshost: CANCELLED" in cli("status", run).stdout
    assert pbs.jobs()["1.pbshost"]["job_state"] == "F"


def test_qsub_refusal_leaves_no_run_directory(tmp_path, storage, pbs, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "qsub").write_text("#!/bin/sh\necho 'qsub: Unknown queue' >&2\nexit 170\n")
    (fake / "qsub").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    p = cli("submit", job_file(tmp_path, storage, "refused"), check=False)
    assert p.returncode != 0 and "Unknown queue" in p.stderr
    assert os.listdir(storage) == []
