"""Fast restarts inside an allocation (issue 18): warm spare workers
(``HPCTRAIN_WARM_SPARES=1``, :mod:`hpctrain.launchers.warm`). A rank killed with
SIGKILL: the next attempt runs on spares that had already imported torch, resumes from the
last checkpoint and ends with the same model as a run without the kill; no spare outlives
the run; a spare that cannot be used leaves its rank to start cold. How fast it is, is
measured by bench/bench_restart.py, not here."""
import os
import sys

import pytest

import fast_restart_workloads
import workloads
from hpctrain.rundir.layout import RunDir
from hpctrain.launchers.warm import WarmLocalLauncher, warm_spares_requested
from helpers import assert_same_state, final_state, fit, out, run_state

#: What a cold-started rank runs: the worker package's __main__ (python -m hpctrain.worker)
COLD = "__main__.py"

CONFIG = {"epochs": 6, "crash_at": 3, "crash_rank": 1}


def _spare_processes(run_path):
    """Live processes running a spare of this run (its run directory is in the command
    line)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if not zombie and b"hpctrain.worker.spare" in args and \
                any(run_path.encode() in a for a in args):
            found.append(int(pid))
    return found


def _program(result, attempt, rank):
    with open(out(result, f"program-attempt-{attempt}-rank-{rank}")) as f:
        return f.read().strip()


def test_a_rank_killed_with_sigkill_resumes_on_warm_spares_to_the_same_model(
        storage, monkeypatch):
    straight = fit(workloads.deterministic, storage, config={"epochs": 6})
    monkeypatch.setenv("HPCTRAIN_WARM_SPARES", "1")
    killed = fit(fast_restart_workloads.killed_once, storage, max_failures=1, config=CONFIG)
    assert_same_state(final_state(straight.path), final_state(killed.path))
    state = run_state(killed.path)
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "FINISHED"]
    assert state["attempts"][0]["failed_rank"] == 1
    assert "signal 9" in state["attempts"][0]["error"]
    # the first attempt started cold, the second on the spares
    assert [_program(killed, 1, r) for r in (0, 1)] == [COLD, COLD]
    assert [_program(killed, 2, r) for r in (0, 1)] == ["spare.py", "spare.py"]
    for rank in (0, 1):  # resumed from the checkpoint of epoch 2 on both ranks
        path, start, restarts = open(out(killed, f"resumed-attempt-2-rank-{rank}")).read().split()
        assert os.path.basename(path) == "checkpoint_000002" and start == "3" and restarts == "1"
    assert killed.metrics["_training_iteration"] == 6 and killed.metrics["epoch"] == 5
    # the spares warmed for a third attempt ended with the run
    assert _spare_processes(killed.path) == []
    assert not [f for f in os.listdir(os.path.join(killed.path, ".hpctrain", "spares"))
                if f.endswith(".ready")]


def test_without_the_switch_ranks_start_cold_and_no_spare_is_started(storage, monkeypatch):
    monkeypatch.delenv("HPCTRAIN_WARM_SPARES", raising=False)
    killed = fit(fast_restart_workloads.killed_once, storage, max_failures=1,
                 config=dict(CONFIG, wait_for_spares=False))
    assert [_program(killed, 2, r) for r in (0, 1)] == [COLD, COLD]
    assert not os.path.exists(os.path.join(killed.path, ".hpctrain", "spares"))


@pytest.mark.parametrize("value, expected", [("1", True), ("yes", True), ("on", True),
                                             ("0", False), ("", False), ("no", False)])
def test_the_switch(value, expected):
    assert warm_spares_requested({"HPCTRAIN_WARM_SPARES": value}) is expected


def test_a_spare_started_with_other_interpreter_settings_is_not_used(tmp_path):
    """PYTHONPATH, OMP_NUM_THREADS… are read when a process starts: a spare started with
    other values is ended, and the rank starts cold."""
    run = RunDir(str(tmp_path / "run"))
    os.makedirs(run.internal_dir)
    launcher = WarmLocalLauncher(sys.executable)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    spare = launcher._start_spare(env, run.path)
    launcher._spares.append(spare)
    try:
        import time

        deadline = time.monotonic() + 120
        while launcher.ready_count() < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert launcher.ready_count() == 1
        group = launcher.launch(
            command=[sys.executable, "-m", "hpctrain.worker", run.path],
            env=dict(env, OMP_NUM_THREADS="2"), num_workers=1,
            log_dir=str(tmp_path / "logs"))
        group.wait_any_failure(120)   # the cold rank fails at once: there is no payload
        group.terminate(5)
        assert launcher.history == [0]
        assert spare.proc.poll() is not None  # the unusable spare was ended
    finally:
        launcher.close()
    assert _spare_processes(run.path) == []


# -- the node zygote (HPCTRAIN_FORK_RANKS=1 under srun) ----------------------------------
# Without a Slurm cluster: a launcher that starts one node's zygote with the SLURM_*
# variables srun gives a one-task-per-node step (the real step is measured by
# bench/bench_recovery.py --fork-ranks on the test cluster).

class _OneNodeZygoteLauncher:
    name = "local"
    container = None

    def launch(self, *, command, env, num_workers, log_dir, on_line=None):
        import socket

        from hpctrain.launchers.step import StepWorkerGroup

        env = dict(env, SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURM_PROCID="0",
                   SLURM_LOCALID="0", SLURM_NODEID="0", SLURM_STEP_NUM_NODES="1",
                   SLURM_STEP_NUM_TASKS="1", SLURM_STEP_TASKS_PER_NODE="1",
                   SLURM_STEP_NODELIST=socket.gethostname(),
                   HPCTRAIN_RANKS_PER_NODE=str(num_workers))
        return StepWorkerGroup([command[0], "-m", "hpctrain.worker.nodezygote",
                                command[3]], env, log_dir)


def _zygote_processes(run_path):
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"hpctrain.worker.nodezygote" in args and \
                any(run_path.encode() in a for a in args):
            found.append(pid)
    return found


def test_ranks_forked_by_a_node_zygote_train_and_restart_to_the_same_model(
        storage, monkeypatch):
    import hpctrain.run

    straight = fit(workloads.deterministic, storage, config={"epochs": 5})
    monkeypatch.setattr(hpctrain.run, "launcher_for",
                        lambda spec, **options: _OneNodeZygoteLauncher())
    killed = fit(workloads.deterministic, storage, max_failures=1,
                 config={"epochs": 5, "crash_at": 2, "crash_rank": 1, "crash_how": "sigkill"})
    assert_same_state(final_state(straight.path), final_state(killed.path))
    state = run_state(killed.path)
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "FINISHED"]
    # the zygote wrote the record a rank killed by a signal cannot write itself
    assert state["attempts"][0]["failed_rank"] == 1
    assert "killed by signal 9" in state["attempts"][0]["error"]
    for rank in (0, 1):
        path, start, restarts = open(out(killed, f"resumed-attempt-2-rank-{rank}")).read().split()
        assert os.path.basename(path) == "checkpoint_000001" and start == "2"
    assert _zygote_processes(killed.path) == []


def test_the_ranks_see_a_step_of_one_task_per_rank():
    from hpctrain import cluster_env
    from hpctrain.worker.nodezygote import child_env

    base = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1",
            "SLURM_LOCALID": "0", "SLURM_NODEID": "1", "SLURM_STEP_NUM_NODES": "2",
            "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
            "SLURM_STEP_NODELIST": "n[1-2]"}
    infos = [cluster_env.worker_info_from_env(
        child_env(base, node=1, nodes=2, per_node=3, local=i), hostname="n2")
        for i in range(3)]
    assert [(i.world_rank, i.local_rank, i.node_rank, i.world_size, i.local_world_size)
            for i in infos] == [(3, 0, 1, 6, 3), (4, 1, 1, 6, 3), (5, 2, 1, 6, 3)]
    assert {i.master_addr for i in infos} == {"n1"}


@pytest.mark.parametrize("skew_s", [-3600.0, 0.0, 3600.0],
                         ids=["server-clock-behind", "same-clock", "server-clock-ahead"])
def test_the_zygote_ends_a_rank_stuck_after_its_stop_record_by_its_own_clock(
        tmp_path, monkeypatch, capfd, skew_s):
    """A rank alive after its stop record is ended STOPPED_GRACE_S after the zygote first
    saw the record, whatever the record's mtime says: on a shared filesystem that is the
    file server's clock (here set an hour behind or ahead)."""
    import subprocess
    import time

    from hpctrain.worker import nodezygote

    monkeypatch.setenv("HPCTRAIN_ATTEMPT", "2")
    monkeypatch.delenv("HPCTRAIN_ZYGOTE_VERBOSE", raising=False)
    adir = tmp_path / ".hpctrain" / "attempt-002"
    adir.mkdir(parents=True)
    stuck = subprocess.Popen(["sleep", "60"])
    running = subprocess.Popen(["sleep", "60"])
    children, seen = {stuck.pid: 1, running.pid: 0}, {}
    try:
        record = adir / "stopped.rank-1.json"
        record.write_text("{}")
        os.utime(record, (time.time() + skew_s,) * 2)
        nodezygote._end_stuck_after_stop(str(tmp_path), children, seen)
        assert stuck.poll() is None and children == {stuck.pid: 1, running.pid: 0}
        time.sleep(nodezygote.STOPPED_GRACE_S + 0.1)
        nodezygote._end_stuck_after_stop(str(tmp_path), children, seen)
        with pytest.raises(ProcessLookupError):  # SIGKILLed and reaped by the zygote
            os.kill(stuck.pid, 0)
        assert f"rank 1 (pid {stuck.pid}) stopped cleanly" in capfd.readouterr().err
        assert children == {running.pid: 0} and running.poll() is None  # no record: kept
    finally:
        for p in (stuck, running):
            p.kill()
            p.wait()
