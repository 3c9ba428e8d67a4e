"""The stop protocol and recovery decisions on this machine, with real ranks: the
warning signal sent to `hpctrain run` at random moments, a loop that ignores the warning
and is stopped at the deadline, a driver killed with SIGKILL (an allocation that
vanished), the requeue decisions and the [failure] settings. The same runs on Slurm are
in test_slurm_recovery.py."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

import workloads
from hpctrain import ConfigError, FailureConfig, RunConfig, ScalingConfig
from hpctrain.rundir.commit import verify_checkpoint
from hpctrain.allocation.recovery import MAX_IDLE_ALLOCATIONS, after_stop
from hpctrain.rundir.layout import RunDir
from hpctrain.torch import TorchTrainer
from helpers import (SUPPORT, assert_same_state, final_state, run_state, wait_for, workload,
                     write_job)

CONFIG = {"steps": 120, "sleep": 0.03, "every": 0}


def job_file(tmp_path, storage, name, config, failure=""):
    return write_job(tmp_path, name, entrypoint=workload("workloads:on_demand"),
                     storage=storage, verbose=0, scaling={"num_workers": 2}, failure=failure,
                     config=config)


def start(job, *overrides, force=False):
    sets = [a for o in overrides for a in ("--set", o)] + (["--force"] if force else [])
    return subprocess.Popen([sys.executable, "-m", "hpctrain.cli", "run", job, *sets],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def reports(run):
    path = os.path.join(run, "result.json")
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for _ in f)


def state_of(run):
    return run_state(run)


def reference(storage, config):
    """The final weights of the same training, uninterrupted (the sleep in each step
    changes nothing in them, so it is left out)."""
    return final_state(TorchTrainer(
        workloads.on_demand, train_loop_config=dict(config, sleep=0.0),
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="ref", storage_path=storage, verbose=0)).fit().path)


def test_warning_signal_stops_every_rank_at_the_same_step_and_the_run_continues(
        tmp_path, storage):
    """SIGUSR1 to `hpctrain run` three times at random moments (start-up included): each
    time both ranks checkpoint at the same step, the run ends STOPPED (exit 75) with that
    checkpoint committed, and running it again continues with zero steps lost; the final
    weights equal an uninterrupted run's."""
    job = job_file(tmp_path, storage, "stopped", CONFIG)
    run = os.path.join(storage, "stopped")
    rng = random.Random(7)
    for k in range(1, 4):
        before = reports(run)
        p = start(job)
        if k > 1:  # one warning mid-training; the others at any moment of the attempt
            wait_for(lambda: os.path.exists(os.path.join(run, "state.json")) and len(
                state_of(run)["attempts"]) == k, 60, f"attempt {k}")
            time.sleep(rng.uniform(0.0, 3.0))
        else:
            wait_for(lambda: reports(run) > before + 5, 60, "training to start")
        p.send_signal(signal.SIGUSR1)
        out, err = p.communicate(timeout=120)
        assert p.returncode == 75, err
        assert "stopped cleanly after the scheduler's warning" in err
        state = state_of(run)
        assert state["status"] == "STOPPED"
        last = state["attempts"][-1]
        assert last["outcome"] == "PREEMPTED" and last["stopped_at_deadline"] is False
        ckpt = os.path.join(run, "checkpoints", last["stop_checkpoint"])
        assert verify_checkpoint(ckpt) == []
        warned = {}
        for r in range(2):
            with open(os.path.join(run, "test-out", f"warned-rank-{r}.txt")) as f:
                warned[r] = [line.split() for line in f.read().splitlines()
                             if line.split()[0] == str(k)]
        assert len(warned[0]) == 1 and warned[0] == warned[1]  # once, at the same step
        meta = json.load(open(os.path.join(ckpt, ".hpctrain_checkpoint.json")))
        assert meta["iteration"] == int(warned[0][0][1]) + 1   # that step's report
    p = start(job)
    out, err = p.communicate(timeout=180)
    assert p.returncode == 0, err
    state = state_of(run)
    assert [a["outcome"] for a in state["attempts"]] == ["PREEMPTED"] * 3 + ["FINISHED"]
    for a, nxt in zip(state["attempts"], state["attempts"][1:]):
        assert nxt["resumed_from"].endswith(a["stop_checkpoint"])
    with open(os.path.join(run, "test-out", "starts-rank-0.txt")) as f:
        starts = [line.split() for line in f.read().splitlines()]
    with open(os.path.join(run, "test-out", "warned-rank-0.txt")) as f:
        warned = [line.split() for line in f.read().splitlines()]
    for (_, step), nxt in zip(warned, starts[1:]):  # zero steps lost
        assert int(nxt[1]) == int(step) + 1
    assert [s[3] for s in starts] == ["0", "1", "2", "3"]  # get_restart_count()
    assert_same_state(final_state(run), reference(storage, CONFIG))


def test_a_loop_that_ignores_the_warning_is_stopped_at_the_deadline(tmp_path, storage):
    """It checkpoints every 100 steps (10 s) and never on demand: warned just after a
    checkpoint, it is stopped at the deadline (5 s for a 10 s warning) and resumes from
    that checkpoint."""
    config = {"steps": 250, "sleep": 0.1, "every": 100, "ignore_warning": True}
    job = job_file(tmp_path, storage, "deaf", config, failure='warning_time = "10s"')
    run = os.path.join(storage, "deaf")
    p = start(job)
    wait_for(lambda: reports(run) > 101, 60, "the first checkpoint")
    p.send_signal(signal.SIGUSR1)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 75, err
    assert "did not commit a checkpoint by the deadline" in err
    state = state_of(run)
    first = state["attempts"][0]
    assert first["stopped_at_deadline"] is True and first["stop_checkpoint"] is None
    # the deadline it was given: max(0.5 w, w - 15 s) after the warning, 5 s for w = 10 s
    # (stopped_at_deadline above is only set once the supervisor's clock passed it)
    with open(os.path.join(RunDir(run).attempt_dir(1), "stop")) as f:
        stop = json.load(f)
    assert stop["deadline"] - stop["time"] == pytest.approx(5.0)
    assert stop["time"] == first["warned_at"]
    latest = RunDir(run).latest_checkpoint()
    assert latest.iteration == 100
    p = start(job, "config.sleep=0.0", force=True)  # a changed [config]: said on purpose
    out, err = p.communicate(timeout=180)
    assert p.returncode == 0, err
    state = state_of(run)
    assert state["attempts"][1]["resumed_from"] == latest.path
    assert_same_state(final_state(run), reference(storage, config))


def test_a_killed_driver_leaves_a_resumable_run_and_its_attempt_is_marked_lost(
        tmp_path, storage):
    """SIGKILL of the process that owns the ranks (an allocation that vanished with its
    node): the ranks follow it, the next start marks the attempt LOST and resumes from
    the last committed checkpoint."""
    config = {"steps": 150, "sleep": 0.03, "every": 10}
    job = job_file(tmp_path, storage, "vanished", config)
    run = os.path.join(storage, "vanished")
    p = start(job)
    wait_for(lambda: reports(run) > 35, 60, "three checkpoints")
    p.kill()
    p.communicate()
    latest = RunDir(run).latest_checkpoint()
    assert state_of(run)["attempts"][0]["outcome"] == "RUNNING"
    time.sleep(1.5)  # the orphaned ranks notice their driver is gone
    p = start(job)
    out, err = p.communicate(timeout=180)
    assert p.returncode == 0, err
    state = state_of(run)
    assert [a["outcome"] for a in state["attempts"]] == ["LOST", "FINISHED"]
    assert state["attempts"][1]["resumed_from"] == latest.path or \
        RunDir(run).list_checkpoints()[0].iteration <= latest.iteration
    assert verify_checkpoint(latest.path) == []
    assert_same_state(final_state(run), reference(storage, config))


def test_python_fit_raises_training_stopped_error_with_the_result(tmp_path, storage):
    """From Python, a local run stopped by the warning raises TrainingStoppedError; its
    .result has the committed checkpoint, and restore() continues the run."""
    script = tmp_path / "fit.py"
    script.write_text(f"""
import sys
sys.path.insert(0, {SUPPORT!r})
import workloads
from hpctrain import RunConfig, ScalingConfig, TrainingStoppedError
from hpctrain.torch import TorchTrainer
try:
    TorchTrainer(workloads.on_demand, train_loop_config={CONFIG!r},
                 scaling_config=ScalingConfig(num_workers=2),
                 run_config=RunConfig(name="py", storage_path={storage!r}, verbose=0)).fit()
except TrainingStoppedError as e:
    print("STOPPED", e.result.status, e.result.checkpoint.path)
""")
    run = os.path.join(storage, "py")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    wait_for(lambda: reports(run) > 5, 60, "training to start")
    p.send_signal(signal.SIGUSR1)
    out, _ = p.communicate(timeout=120)
    assert out.split()[:2] == ["STOPPED", "STOPPED"]
    assert out.split()[2].endswith("checkpoint_000000")
    result = TorchTrainer.restore(run).fit()
    assert result.status == "FINISHED"
    assert_same_state(final_state(run), reference(storage, CONFIG))


# ------------------------------------------------------------------ requeue decisions
class _Allocation:
    """Stands for a supervisor whose allocation did or did not commit a checkpoint."""

    def __init__(self, progressed):
        self.progressed = progressed

    def made_progress(self):
        return self.progressed


def _run_dir(tmp_path):
    run = RunDir(tmp_path / "r")
    run.create()
    with run.update_state() as s:
        s["status"] = "RUNNING"
    return run


@pytest.mark.parametrize("config, can, progress, expected, why", [
    (FailureConfig(), True, [True], "REQUEUED", None),
    (FailureConfig(requeue=False), True, [True], "STOPPED", "failure.requeue is false"),
    (FailureConfig(), False, [True], "STOPPED", "not requeued"),
    (FailureConfig(max_requeues=2), True, [True, True, True], "STOPPED",
     "failure.max_requeues (2) is reached"),
    (FailureConfig(), True, [False] * MAX_IDLE_ALLOCATIONS, "STOPPED",
     f"no progress: the last {MAX_IDLE_ALLOCATIONS} attempts committed no new checkpoint "
     f"(failure.max_attempts_without_progress = {MAX_IDLE_ALLOCATIONS})"),
    (FailureConfig(max_attempts_without_progress=1), True, [True, False], "STOPPED",
     "no progress: the last 1 attempts committed no new checkpoint"),
    (FailureConfig(max_attempts_without_progress=0), True, [False] * 5, "REQUEUED", None),
    (FailureConfig(), True, [False, False, True, False, False], "REQUEUED", None),
], ids=["requeue", "requeue-off", "local", "max-requeues", "no-progress", "no-progress-1",
        "no-progress-off", "progress-resets"])
def test_after_a_clean_stop_requeue_or_stop(tmp_path, config, can, progress, expected, why):
    run = _run_dir(tmp_path)
    for made in progress:
        status = after_stop(run, _Allocation(made), config, can_requeue=can)
    state = run.read_state()
    assert status == expected == state["status"]
    if why:
        assert why in state["stopped_because"]
    from hpctrain.allocation.budgets import exit_code

    # the batch job's exit code: 76 when it gave up for no progress
    assert exit_code(state, 0) == (76 if why and "no progress" in why else 0)


@pytest.mark.parametrize("kwargs, message", [
    ({"warning_signal": "KILL"}, "failure.warning_signal: expected one of USR1, USR2"),
    ({"warning_time": "5s"}, "failure.warning_time: expected between 10 s and 65535 s"),
    ({"warning_time": 90000}, "failure.warning_time: expected between 10 s and 65535 s"),
    ({"warning_time": "soon"}, "failure.warning_time"),
    ({"requeue": "yes"}, "failure.requeue: expected true or false"),
    ({"max_requeues": -2}, "failure.max_requeues: expected an integer ≥ -1"),
    ({"max_hangs": -2}, "failure.max_hangs: expected an integer ≥ -1"),
    ({"max_node_failures": "2"}, "failure.max_node_failures: expected an integer, got '2'"),
    ({"max_attempts_without_progress": -1},
     "failure.max_attempts_without_progress: expected an integer ≥ 0"),
])
def test_failure_config_refuses_bad_values(kwargs, message):
    with pytest.raises(ConfigError) as info:
        FailureConfig(**kwargs)
    assert message in str(info.value)


def test_failure_config_accepts_sig_prefix_and_seconds():
    fc = FailureConfig(warning_signal="SIGUSR2", warning_time=90)
    assert (fc.warning_signal, fc.warning_s, fc.signal_number) == ("USR2", 90, signal.SIGUSR2)
    assert FailureConfig(warning_time="2m").warning_s == 120


def test_the_warning_sent_to_the_ranks_themselves_stops_the_run_too(tmp_path, storage):
    """`scancel --signal=USR1 <job>` signals the job's steps (the ranks), not the batch
    step: one rank's signal reaches every rank through the agreement, they stop at a
    checkpoint, and the supervisor records the stop (not a finished training)."""
    job = job_file(tmp_path, storage, "ranksignal", CONFIG)
    run = os.path.join(storage, "ranksignal")
    p = start(job)
    wait_for(lambda: reports(run) > 5, 60, "training to start")
    ranks = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True,
                           text=True).stdout.split()
    assert len(ranks) == 2
    os.kill(int(ranks[-1]), signal.SIGUSR1)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 75, err
    state = state_of(run)
    assert state["status"] == "STOPPED"
    first = state["attempts"][0]
    assert first["outcome"] == "PREEMPTED" and first["warning"] == (
        "the warning signal, sent to the ranks")
    assert reports(run) < CONFIG["steps"]
    assert verify_checkpoint(os.path.join(run, "checkpoints", first["stop_checkpoint"])) == []
