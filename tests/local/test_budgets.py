"""The retry budget per cause, each spent on its own with its exit code and message, and
a run that makes no progress giving up (exit code 76) instead of restarting forever.
Real ranks of the local launcher, through `hpctrain run`."""
import pytest

from helpers import cli, run_state, workload, write_job


def _run(tmp_path, name, how, failure, checkpoint_on=(), workers=1):
    job = write_job(tmp_path, name, entrypoint=workload("health_workloads:misbehave"),
                    storage=tmp_path / "runs", site="local", verbose=0,
                    scaling={"num_workers": workers},
                    failure={"max_failures": -1, **failure},
                    config={"how": how, "checkpoint_on": list(checkpoint_on)})
    p = cli("run", job, check=False, timeout=240)
    return p, run_state(str(tmp_path / "runs" / name))


@pytest.mark.parametrize("how, budget, code, message, cause", [
    ("raise", "max_user_errors", 1,
     "the budget for errors in the training code is spent: 2 failure(s) of this cause, "
     "failure.max_user_errors = 1", "user"),
    ("kill", "max_node_failures", 77,
     "the budget for node failures is spent: 2 failure(s) of this cause, "
     "failure.max_node_failures = 1", "node"),
], ids=["user-errors", "node-failures"])
def test_a_budget_per_cause_ends_the_run_with_its_exit_code(tmp_path, how, budget, code,
                                                            message, cause):
    # a checkpoint on every attempt: progress, so only the cause's budget can stop it
    p, state = _run(tmp_path, how, how, {budget: 1}, checkpoint_on=range(5))
    assert p.returncode == code, p.stderr
    assert f"[hpctrain] not retried: {message}" in p.stderr
    assert state["status"] == "FAILED" and state["failures_by_cause"] == {cause: 2}
    assert [a["cause"] for a in state["attempts"]] == [cause, cause]
    assert state["gave_up"] == {"reason": cause, "message": message}
    with open(tmp_path / "runs" / how / "error.txt") as f:
        assert f"Not restarted: {message}\n" in f.read()


def test_the_hang_budget_ends_the_run_with_exit_code_78(tmp_path):
    p, state = _run(tmp_path, "hang", "hang", {"max_hangs": 0, "hang_timeout": "8s"},
                    checkpoint_on=[0])
    assert p.returncode == 78, p.stderr
    message = ("the budget for hangs is spent: 1 failure(s) of this cause, "
               "failure.max_hangs = 0")
    assert f"[hpctrain] not retried: {message}" in p.stderr
    assert len(state["attempts"]) == 1 and state["attempts"][0]["hang"]["rank"] == 0
    assert state["failures_by_cause"] == {"hang": 1}


def test_max_failures_still_bounds_every_cause_together(tmp_path):
    p, state = _run(tmp_path, "total", "raise", {"max_failures": 1, "max_user_errors": 5},
                    checkpoint_on=range(5))
    assert p.returncode == 1
    assert "[hpctrain] not retried: failure.max_failures (1) is spent: 2 failure(s)" in p.stderr
    assert state["gave_up"]["reason"] == "max_failures"


def test_a_run_without_progress_stops_with_exit_code_76(tmp_path):
    """Attempt 1 commits a checkpoint (progress: the count starts again), attempts 2 and
    3 commit none: with max_attempts_without_progress = 2 the run stops after the 3rd,
    though max_failures is unlimited."""
    p, state = _run(tmp_path, "idle", "raise", {"max_attempts_without_progress": 2},
                    checkpoint_on=[0])
    assert p.returncode == 76, p.stderr
    assert ("[hpctrain] not retried: no progress: the last 2 attempts committed no new "
            "checkpoint (failure.max_attempts_without_progress = 2)") in p.stderr
    assert len(state["attempts"]) == 3 and state["idle_attempts"] == 2
    assert state["status"] == "FAILED" and state["gave_up"]["reason"] == "no_progress"
