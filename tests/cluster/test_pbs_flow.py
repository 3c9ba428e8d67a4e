"""`hpctrain submit | status | cancel` against PBS, up to the line we can reach here.

No PBS server can be installed on these machines, so qsub/qstat/qdel are the fakes in
tests/support/fake_pbs/ (they reproduce the outputs and exit codes recorded from a live OpenPBS
23.06 server in shared/notes/pbs-facts.md). Everything on our side is real: the rendered
script, the exact bytes qsub receives, the job's batch step run by bash as MoM would
(from $HOME, with the PBS_* variables and a PBS_NODEFILE), Debian's Open MPI `mpirun`
starting the ranks from that node file, a real 2-rank Gloo training, and job state read
back through `qstat -f -F json`.
"""
import os
import sys

import pytest

import workloads
from helpers import (SUPPORT, assert_same_state, cli, final_state, needs_mpirun, pbs_job_file,
                     run_state)
from hpctrain import RunConfig, ScalingConfig
from hpctrain.torch import TorchTrainer

FAKE_DIR = os.path.join(SUPPORT, "fake_pbs")
sys.path.insert(0, FAKE_DIR)
import _fakepbs as fakepbs  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def pbs(tmp_path, monkeypatch):
    return fakepbs.FakePbs.install(tmp_path / "pbs_state", monkeypatch,
                                   clear=("PBS_", "SLURM_", "OMPI_", "PMI_", "PALS_"))


def job_file(tmp_path, storage, name):
    return pbs_job_file(tmp_path, storage, name)


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
    state = run_state(run)
    assert state["status"] == "FINISHED" and state["job_ids"] == ["1.pbshost"]
    # PBS's own output file went to the run's logs (-o DIR/), not where qsub ran
    assert open(os.path.join(run, "logs", "1.pbshost.OU")).read().startswith(
        "hpctrain: output of this job: ")
    assert not [f for f in os.listdir(pbs.submission("1.pbshost")["cwd"]) if ".o1" in f]
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


def test_hand_submitted_job_records_itself_in_the_run(tmp_path, storage, pbs):
    """`hpctrain render` + qsub by hand: the job joins the run's submissions, so that
    `hpctrain status` shows it and `hpctrain cancel` finds it."""
    job = job_file(tmp_path, storage, "byhand")
    script = tmp_path / "byhand.sh"
    script.write_text(cli("render", job).stdout)
    import subprocess

    assert subprocess.run(["qsub", str(script)], capture_output=True, text=True,
                          check=True).stdout == "1.pbshost\n"
    proc = pbs.run("1.pbshost", hosts=[os.uname().nodename], mpiprocs=2, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = os.path.join(storage, "byhand")
    state = run_state(run)
    assert state["status"] == "FINISHED"
    assert [(s["job_id"], s["scheduler"], s["recorded_by"]) for s in state["submissions"]] == [
        ("1.pbshost", "pbs", "job")]
    assert "pbs job 1.pbshost: COMPLETED" in cli("status", run).stdout


def test_launcher_failure_in_the_job_ends_the_run_failed(tmp_path, storage, pbs):
    """An mpiexec whose flavour cannot be told (OpenPBS's own /opt/pbs/bin/mpiexec first
    on PATH, as on the live server): the run ends FAILED with the reason, not RUNNING."""
    bin_dir = tmp_path / "pbsbin"
    bin_dir.mkdir()
    (bin_dir / "mpiexec").write_text("#!/bin/sh\necho 'pbs_version = 23.06.06'\n")
    (bin_dir / "mpiexec").chmod(0o755)
    job = job_file(tmp_path, storage, "badlauncher")
    cli("submit", job, "--set", "scheduler.launcher=mpiexec", "--set",
        "scheduler.launcher_args=[]", "--set", f'setup.commands=["export PATH={bin_dir}:$PATH"]')
    proc = pbs.run("1.pbshost", hosts=[os.uname().nodename], mpiprocs=2, timeout=240)
    assert proc.returncode == 2
    run = os.path.join(storage, "badlauncher")
    state = run_state(run)
    assert state["status"] == "FAILED"
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED"]
    assert "mpiexec" in state["attempts"][0]["error"]
    assert open(os.path.join(run, "error.txt")).read().startswith(
        "The job could not run the training:\n")
    assert "run badlauncher: FAILED" in cli("status", run).stdout


def test_dependencies_on_ended_or_unknown_jobs_are_not_sent(tmp_path, storage, pbs):
    """OpenPBS accepts `-W depend=afterany:<id>` on a job it does not know or that has
    ended, then drops the new job silently: a resubmission leaves such ids out, and a
    spec's scheduler.after naming one is refused with a HINT."""
    from hpctrain.schedulers.pbs import PbsScheduler

    script = tmp_path / "a.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    sched = PbsScheduler()
    first = sched.resubmit(str(script), after=None)
    pbs.set(first, job_state="R", substate=42)
    second = sched.resubmit(str(script), after=f"99.pbshost:{first}")
    assert pbs.submission(second)["argv"][:2] == ["-W", f"depend=afterany:{first}"]
    assert pbs.jobs()[second]["job_state"] == "H"
    pbs.finish(first, 0)
    third = sched.resubmit(str(script), after=first)
    assert pbs.submission(third)["argv"] == [str(script)]
    assert pbs.jobs()[third]["job_state"] == "Q"
    p = cli("submit", job_file(tmp_path, storage, "after"), "--set",
            "scheduler.after=98.pbshost", check=False)
    assert p.returncode == 2
    assert "the PBS server dropped job 4.pbshost at once: its dependency afterany:98.pbshost" in p.stderr
    assert "HINT: scheduler.after must name a job that is still queued or running" in p.stderr


@needs_mpirun
def test_cancel_of_a_running_job_signals_it_and_it_ends_cancelled(tmp_path, storage, pbs):
    """qdel of a running job: SIGTERM to its processes, the job stays R until they are
    gone, then F (substate 91) — CANCELLED even though the batch step exited cleanly."""
    import threading

    from helpers import wait_for

    job = job_file(tmp_path, storage, "running")
    cli("submit", job, "--set", "config.epochs=100000")
    run = os.path.join(storage, "running")
    done = {}
    mom = threading.Thread(target=lambda: done.setdefault("proc", pbs.run(
        "1.pbshost", hosts=[os.uname().nodename], mpiprocs=2, timeout=240, kill_delay=5)))
    mom.start()
    try:
        wait_for(lambda: os.path.exists(os.path.join(run, "result.json")), 180,
                 "the training's first report")
        assert "cancelled pbs job 1.pbshost" in cli("cancel", run).stdout
        assert pbs.jobs()["1.pbshost"]["job_state"] == "R"  # until its processes are gone
    finally:
        mom.join(timeout=240)
    job_info = pbs.jobs()["1.pbshost"]
    assert job_info["job_state"] == "F" and job_info["substate"] == 91
    assert run_state(run)["status"] == "INTERRUPTED"
    assert "pbs job 1.pbshost: CANCELLED" in cli("status", run).stdout
