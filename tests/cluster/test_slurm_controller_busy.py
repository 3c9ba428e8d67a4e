"""A busy slurmctld does not end a run's requeue chain: submission, requeue and the state
queries ask again while it answers "Socket timed out" (a wrapper on PATH that answers as
a loaded controller does, then runs the real command; and the real slurmctld paused with
SIGSTOP while a job requeues itself)."""
import os
import signal
import subprocess
import time

import pytest

from helpers import ROOT, SUPPORT, run_state, wait_for, workload, write_job
from slurm import HoldReleaser, squeue_state, wait_gone

pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm")]

BUSY = "Socket timed out on send/recv operation"
CONFIG = {"steps": 300, "sleep": 0.05, "every": 0, "sleep_attempts": 1}


def job_file(tmp_path, storage, name):
    return write_job(
        tmp_path, name, site="test-cluster", entrypoint=workload("workloads:on_demand"),
        storage=storage, scaling={"num_nodes": 2, "workers_per_node": 1},
        # (ROOT first: the batch step runs this checkout's hpctrain, whatever is installed)
        env={"PYTHONPATH": f"{ROOT}:{SUPPORT}"}, config=CONFIG)


def wrapper(bin_dir, name, *, failures, when="", prefix="", wait_s=0):
    """``bin_dir/name``: the first ``failures`` calls (whose arguments start with
    ``when``) fail as a loaded slurmctld answers; then the real command runs. With
    ``wait_s``, each such call writes its line to ``<name>.calls`` and waits that long
    before running the real command (a moment to pause slurmctld in)."""
    real = subprocess.run(["which", name], capture_output=True, text=True,
                          check=True).stdout.strip()
    calls = bin_dir / f"{name}.calls"
    path = bin_dir / name
    path.write_text(
        "#!/bin/sh\n"
        f'case "$*" in "{when}"*)\n'
        f'  echo "$*" >> "{calls}"\n'
        f'  if [ "$(wc -l < "{calls}")" -le {failures} ]; then\n'
        f'    echo "{prefix}{BUSY}" >&2; exit 1\n'
        "  fi\n"
        f"  sleep {wait_s} ;;\n"
        "esac\n"
        f'exec {real} "$@"\n')
    path.chmod(0o755)
    return calls


def submit(job, env):
    p = subprocess.run(["python3", "-m", "hpctrain", "submit", job], capture_output=True,
                       text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    return p, p.stdout.split("submitted slurm job ")[1].split()[0]


def job_log(run, job_id):
    with open(os.path.join(run, "logs", f"slurm-{job_id}.out")) as f:
        return f.read()


def warn_and_follow(run, job_id, during=None):
    """The warning signal once the ranks train; ``during()`` right after it; then the
    chain to its end (Slurm's hold on a requeued job released)."""
    wait_for(lambda: os.path.isdir(os.path.join(run, "test-out"))
             and squeue_state(job_id) == ("RUNNING", "None"), 180, "the ranks to train")
    time.sleep(2)
    releaser = HoldReleaser(job_id)
    try:
        subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], check=True)
        if during:
            during()
        wait_gone(job_id, 400)
    finally:
        releaser.stop()
        subprocess.run(["scancel", job_id])


def assert_chain_finished(run, job_id):
    state = run_state(run)
    assert [a["outcome"] for a in state["attempts"]] == ["PREEMPTED", "FINISHED"]
    assert state["status"] == "FINISHED" and state["requeues"] == 1
    assert set(state["job_ids"]) == {job_id}  # requeued: one chain, the same job id


@pytest.mark.timeout(900)
def test_submission_and_requeue_ask_a_busy_controller_again(tmp_path, storage):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = wrapper(bin_dir, "sbatch", failures=2, prefix="sbatch: error: Batch job "
                     "submission failed: ")
    scontrol = wrapper(bin_dir, "scontrol", failures=2, when="requeue",
                       prefix="slurm_requeue error: ")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env.pop("HPCTRAIN_CONTROLLER_RETRY_S", None)
    p, job_id = submit(job_file(tmp_path, storage, "busy"), env)
    assert sbatch.read_text().count("\n") == 3  # two busy answers, then the real sbatch
    assert p.stderr.count(f"{BUSY} (transient); retry ") == 2
    run = os.path.join(storage, "busy")
    warn_and_follow(run, job_id)  # (the job inherits PATH: its requeue meets the wrapper)
    assert scontrol.read_text() == f"requeue {job_id}\n" * 3
    log = job_log(run, job_id)
    assert f"`scontrol requeue`: slurm_requeue error: {BUSY} (transient); retry 1 in 1.0 s" \
        in log
    assert f"`scontrol requeue`: slurm_requeue error: {BUSY} (transient); retry 2 in 2.0 s" \
        in log
    assert_chain_finished(run, job_id)


def slurmctld_pid():
    out = subprocess.run(["pgrep", "-x", "slurmctld"], capture_output=True, text=True).stdout
    pids = out.split()
    assert len(pids) == 1, out
    return int(pids[0])


@pytest.mark.timeout(900)
def test_a_requeue_while_slurmctld_is_paused_keeps_the_chain_alive(tmp_path, storage):
    """The controller stops answering (SIGSTOP) as the batch step requeues its job: the
    real `scontrol requeue` times out (MessageTimeout = 10 s here) and is asked again
    until slurmctld answers (SIGCONT after 16 s, always). The wrapper on PATH only tells
    the test when the requeue starts (and gives it 3 s to pause slurmctld)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = wrapper(bin_dir, "scontrol", failures=0, when="requeue", wait_s=3)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env.pop("HPCTRAIN_CONTROLLER_RETRY_S", None)
    p, job_id = submit(job_file(tmp_path, storage, "paused"), env)
    run = os.path.join(storage, "paused")
    pid = slurmctld_pid()

    def pause():
        wait_for(scontrol.exists, 120, "the batch step to requeue its job", poll_s=0.02)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(16)
        finally:
            os.kill(pid, signal.SIGCONT)

    warn_and_follow(run, job_id, during=pause)
    log = job_log(run, job_id)
    # (what the paused controller's client says: "Socket timed out…" or, as seen here,
    # "Unexpected message received for job N")
    retried = [line for line in log.splitlines() if "`scontrol requeue`: " in line]
    assert retried and "(transient); retry 1 in 1.0 s" in retried[0], log
    assert "requeueing failed" not in log
    assert_chain_finished(run, job_id)
