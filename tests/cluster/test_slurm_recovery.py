"""Recovery on the real test Slurm cluster (2 nodes × 2 ranks), proven by killing and
signalling real jobs: the warning signal at random moments, a chain of allocations under
a short time limit, `scontrol requeue` from outside, SIGKILL during a checkpoint, a full
disk, and max_failures exhausted. Each training must end bit-identical to an
uninterrupted run with the same seed."""
import json
import os
import random
import subprocess
import time

import pytest

import workloads
from hpctrain import RunConfig, ScalingConfig
from hpctrain.rundir.commit import verify_checkpoint
from hpctrain.rundir.layout import RunDir
from hpctrain.result import Result
from hpctrain.torch import TorchTrainer
from helpers import (SUPPORT, assert_full_disk_failure, assert_same_state, final_state, wait_for,
                     workload, write_job)
from helpers import run_state, cli as hpctrain_cli
from slurm import HoldReleaser, squeue_state, wait_gone

pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm")]



def job_file(tmp_path, storage, name, config, *, function="on_demand", failure="",
             time_limit="00:10:00", per_node=2):
    return write_job(
        tmp_path, name, site="test-cluster", entrypoint=workload(f"workloads:{function}"),
        storage=storage, scaling={"num_nodes": 2, "workers_per_node": per_node},
        scheduler={"time": time_limit}, failure=failure, env={"PYTHONPATH": SUPPORT},
        config=config)


def submit(job):
    out = hpctrain_cli("submit", job).stdout
    return out.split("submitted slurm job ")[1].split()[0]


def state_of(run):
    return run_state(run)


def reference(tmp_path_factory, config, workers=4):
    """The same training, uninterrupted, locally."""
    storage = str(tmp_path_factory.mktemp("ref"))
    result = TorchTrainer(workloads.on_demand, train_loop_config=config,
                          scaling_config=ScalingConfig(num_workers=workers),
                          run_config=RunConfig(name="ref", storage_path=storage,
                                               verbose=0)).fit()
    return final_state(result.path)


def lines(run, prefix, ranks):
    """{rank: [fields per line]} of the workload's per-rank records."""
    out = {}
    for r in range(ranks):
        path = os.path.join(run, "test-out", f"{prefix}-rank-{r}.txt")
        with open(path) as f:
            out[r] = [line.split() for line in f.read().splitlines()]
    return out


def assert_chain_is_lossless(run, preempted, ranks=4, deadline_stops_allowed=False):
    """Every stop: all ranks saw the warning at the same step and checkpointed it; the
    next attempt resumed from exactly that checkpoint at the next step. An attempt warned
    too late to checkpoint (during a slow start-up, when Slurm's timer fires early) is
    stopped at the deadline; then the next resumes from the newest committed checkpoint."""
    state = state_of(run)
    attempts = state["attempts"]
    assert [a["outcome"] for a in attempts] == ["PREEMPTED"] * preempted + ["FINISHED"]
    warned, starts = lines(run, "warned", ranks), lines(run, "starts", ranks)
    committed = sorted(RunDir(run).list_checkpoints(), key=lambda c: c.path)
    for a, nxt in zip(attempts[:-1], attempts[1:]):
        n = str(a["attempt"])
        if deadline_stops_allowed and a["stopped_at_deadline"]:
            before = [c for c in committed if c.metadata["time"] < nxt["started"]]
            assert nxt["resumed_from"] == (before[-1].path if before else None)
            continue
        steps = {r: [w[1] for w in warned[r] if w[0] == n] for r in range(ranks)}
        assert all(len(s) == 1 for s in steps.values()), steps        # warned once
        assert len({s[0] for s in steps.values()}) == 1, steps         # at the same step
        assert a["stopped_at_deadline"] is False and len(a["stopped_iterations"]) == 1
        assert nxt["resumed_from"].endswith(a["stop_checkpoint"])
        for r in range(ranks):  # zero steps lost: the next attempt starts right after
            start = [s for s in starts[r] if s[0] == str(nxt["attempt"])]
            assert start and int(start[0][1]) == int(steps[r][0]) + 1
            assert start[0][2] == a["stop_checkpoint"]
    for name in sorted(os.listdir(os.path.join(run, "checkpoints"))):
        if name.startswith("checkpoint_"):
            assert verify_checkpoint(os.path.join(run, "checkpoints", name)) == [], name
    assert state["status"] == "FINISHED" and state["requeues"] == preempted
    assert len(set(state["job_ids"])) == 1  # requeued: the same job id throughout


WARNINGS = 20
# paced while the warnings come (each lands 0-4 s into an attempt, mid-training more
# often than not); the attempt after the last warning trains the rest unpaced
RANDOM_CONFIG = {"steps": 1500, "sleep": 0.02, "every": 0, "sleep_attempts": WARNINGS}


@pytest.mark.timeout(900)
def test_warning_at_20_random_moments_checkpoints_requeues_and_completes(
        tmp_path, storage, tmp_path_factory):
    """`scancel --signal=USR1 --batch` (what `--signal=B:USR1@N` does) 20 times, each at
    a random moment of a fresh attempt: during the ranks' start-up, mid-training, during
    a checkpoint. One rank on each node."""
    job = job_file(tmp_path, storage, "warned", RANDOM_CONFIG, per_node=1,
                   failure='warning_time = "60s"')
    job_id = submit(job)
    run = os.path.join(storage, "warned")
    rng = random.Random(4)
    releaser = HoldReleaser(job_id)
    try:
        for k in range(1, WARNINGS + 1):
            wait_for(lambda: len(state_of(run).get("attempts", [])) >= k
                     and squeue_state(job_id) is not None
                     and squeue_state(job_id)[0] == "RUNNING", 120, f"attempt {k} to start")
            time.sleep(rng.uniform(0.0, 4.0))
            subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], check=True)
            wait_for(lambda: state_of(run)["attempts"][k - 1].get("outcome") != "RUNNING",
                     90, f"attempt {k} to stop")
        wait_gone(job_id, 300)
    finally:
        releaser.stop()
        subprocess.run(["scancel", job_id])
    assert_chain_is_lossless(run, WARNINGS, ranks=2)
    assert_same_state(final_state(run), reference(tmp_path_factory, dict(RANDOM_CONFIG,
                                                                         sleep=0.0), 2))


# 56 s of sleep alone: more than two allocations can hold, as each gives under 30 s
CHAIN_CONFIG = {"steps": 560, "sleep": 0.1, "every": 0}


@pytest.mark.timeout(900)
def test_a_training_longer_than_the_time_limit_chains_through_allocations(
        tmp_path, storage, tmp_path_factory):
    """A 1-minute time limit with `--signal=B:USR1@30`: Slurm itself warns each
    allocation (its timer may warn up to a minute early); the training needs at least
    three allocations. One rank per node: with two ranks a DDP allreduce is a sum of two
    numbers, exact in any order, so a resumed run is bit-identical (with more ranks, the
    first step after a start uses DDP's initial gradient-bucket order, and the last bits
    may differ from an uninterrupted run)."""
    job = job_file(tmp_path, storage, "chained", CHAIN_CONFIG, time_limit="00:01:00",
                   failure='warning_time = "30s"', per_node=1)
    assert "#SBATCH --signal=B:USR1@30\n#SBATCH --requeue\n" in hpctrain_cli(
        "render", job).stdout
    job_id = submit(job)
    run = os.path.join(storage, "chained")
    releaser = HoldReleaser(job_id)
    try:
        wait_gone(job_id, 600)
    finally:
        releaser.stop()
    state = state_of(run)
    preempted = len(state["attempts"]) - 1
    assert preempted >= 2, state["attempts"]     # three allocations or more
    assert all(a["warning"] == "signal SIGUSR1" for a in state["attempts"][:-1])
    assert_chain_is_lossless(run, preempted, ranks=2, deadline_stops_allowed=True)
    assert_same_state(final_state(run), reference(tmp_path_factory, dict(CHAIN_CONFIG,
                                                                         sleep=0.0), 2))


REQUEUE_CONFIG = {"steps": 400, "sleep": 0.03, "every": 5}


@pytest.mark.timeout(600)
def test_scontrol_requeue_from_outside_resumes_from_the_last_committed_checkpoint(
        tmp_path, storage, tmp_path_factory):
    """An admin's (or the scheduler's) `scontrol requeue`: the running instance is
    killed without warning; the next start resumes from the newest committed
    checkpoint, with the restart visible to the training function."""
    job = job_file(tmp_path, storage, "adminrequeue", REQUEUE_CONFIG, per_node=1)
    job_id = submit(job)
    run = os.path.join(storage, "adminrequeue")
    ckpts = os.path.join(run, "checkpoints")
    wait_for(lambda: os.path.isdir(ckpts) and len(
        [n for n in os.listdir(ckpts) if n.startswith("checkpoint_")]) >= 3, 180,
        "three committed checkpoints")
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    releaser = HoldReleaser(job_id)
    try:
        wait_gone(job_id, 300)
    finally:
        releaser.stop()
    state = state_of(run)
    first, second = state["attempts"][0], state["attempts"][-1]
    assert first["outcome"] in ("INTERRUPTED", "LOST") and second["outcome"] == "FINISHED"
    committed_before = [r for r in Result.from_path(run).best_checkpoints]
    newest = max((c for c, _ in committed_before
                  if json.load(open(os.path.join(c.path, ".hpctrain_checkpoint.json")))["time"]
                  < second["started"]), key=lambda c: c.path)
    assert second["resumed_from"] == newest.path
    starts = lines(run, "starts", 2)
    for r in range(2):  # attempt, start step, checkpoint, restart count, job id
        assert starts[r][-1][2:] == [os.path.basename(newest.path), str(len(state["attempts"]) - 1),
                                     job_id]
    assert_same_state(final_state(run), reference(tmp_path_factory, dict(REQUEUE_CONFIG,
                                                                         sleep=0.0), 2))


@pytest.mark.timeout(600)
def test_sigkill_while_shards_are_written_keeps_the_previous_checkpoint(tmp_path, storage):
    job = job_file(tmp_path, storage, "killedwriting", {}, function="kill_during_checkpoint",
                   failure="max_failures = 1")
    p = hpctrain_cli("submit", job, "--follow", check=False, timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    run = os.path.join(storage, "killedwriting")
    state = state_of(run)
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "FINISHED"]
    assert state["attempts"][0]["failed_rank"] == 0 and "signal 9" in state["attempts"][0]["error"]
    assert state["attempts"][1]["resumed_from"].endswith("checkpoint_000000")
    for r in range(4):  # every rank resumed from checkpoint 0, whose content is step 0's
        with open(os.path.join(run, "test-out", f"resumed-from-{r}")) as f:
            assert f.read().split() == ["checkpoint_000000", "00"]
    names = os.listdir(os.path.join(run, "checkpoints"))
    assert not [n for n in names if n.startswith(".tmp_")]  # the half-written one is gone
    assert verify_checkpoint(os.path.join(run, "checkpoints", "checkpoint_000000")) == []


@pytest.mark.timeout(600)
def test_max_failures_exhausted_ends_failed_with_rank_and_traceback(tmp_path, storage):
    job = job_file(tmp_path, storage, "exhausted", {"rank": 3}, function="fail_on_rank",
                   failure="max_failures = 1")
    p = hpctrain_cli("submit", job, "--follow", check=False, timeout=400)
    assert p.returncode == 1 and "training FAILED (rank 3)" in p.stderr
    run = os.path.join(storage, "exhausted")
    state = state_of(run)
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "FAILED"]
    assert state["failures"] == 2 and state["status"] == "FAILED"
    err = Result.from_path(run).error
    assert err.rank == 3 and "ValueError: boom on rank 3" in err.worker_traceback


@pytest.mark.timeout(600)
def test_a_disk_that_fills_during_a_checkpoint_fails_clearly_and_keeps_the_last_one(
        tmp_path, small_disk):
    job = job_file(tmp_path, small_disk, "full", {"mib": 3, "epochs": 8},
                   function="fill_disk", failure="max_failures = 0")
    p = hpctrain_cli("submit", job, "--follow", check=False, timeout=400)
    run = os.path.join(small_disk, "full")
    assert p.returncode == 1, p.stdout + p.stderr
    assert_full_disk_failure(Result.from_path(run).error, run)
