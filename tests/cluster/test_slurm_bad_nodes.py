"""Bad nodes and the retry budgets on the real test Slurm cluster (nodes n1, n2): a rank
killed without a traceback blames its node; the run's next allocation is submitted
without it (``--exclude``) and runs on the other node. A budget spent ends the batch job
with its exit code."""
import json
import subprocess
import os

import pytest

from helpers import ROOT, SUPPORT, run_state, workload, write_job, cli as hpctrain_cli

pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm")]


def _rows(run):
    with open(os.path.join(run, "result.json")) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.timeout(300)
def test_the_node_blamed_for_a_failure_is_excluded_from_the_next_allocation(tmp_path, storage):
    job = write_job(tmp_path, "flaky", site="test-cluster",
                    entrypoint=workload("health_workloads:flaky_node"), storage=storage,
                    scaling={"num_nodes": 1, "workers_per_node": 1},
                    scheduler={"time": "00:05:00"}, failure={"max_failures": 2},
                    env={"PYTHONPATH": f"{SUPPORT}:{ROOT}"})  # this checkout's hpctrain
    p = hpctrain_cli("submit", job, "--follow", check=False, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    run = os.path.join(storage, "flaky")
    state = run_state(run)
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "PREEMPTED", "FINISHED"]
    assert state["attempts"][0]["cause"] == "node"
    blamed = state["bad_nodes"][0]["host"]
    assert blamed in ("n1", "n2") and state["bad_nodes"][0]["cause"] == "node"
    first_job, second_job = state["attempts"][1]["job_id"], state["attempts"][2]["job_id"]
    assert first_job != second_job
    follow_up = [s for s in state["submissions"] if s["job_id"] == second_job]
    assert follow_up and follow_up[0]["excluded_nodes"] == [blamed]
    nodes = {r["attempt"]: r["node"] for r in _rows(run)}
    assert nodes[1] == blamed                      # restarted in place: same allocation
    assert nodes[2] == ({"n1", "n2"} - {blamed}).pop()  # the next one: the other node


@pytest.mark.timeout(200)
def test_a_spent_node_failure_budget_ends_the_batch_job_with_exit_code_77(tmp_path, storage):
    job = write_job(tmp_path, "budget", site="test-cluster",
                    entrypoint=workload("health_workloads:misbehave"), storage=storage,
                    scaling={"num_nodes": 1, "workers_per_node": 1},
                    scheduler={"time": "00:05:00"},
                    failure={"max_failures": -1, "max_node_failures": 0},
                    env={"PYTHONPATH": f"{SUPPORT}:{ROOT}"}, config={"how": "kill"})
    p = hpctrain_cli("submit", job, "--follow", check=False, timeout=150)
    message = ("the budget for node failures is spent: 1 failure(s) of this cause, "
               "failure.max_node_failures = 0")
    assert p.returncode == 77, p.stdout + p.stderr
    assert f"not retried: {message}" in p.stderr
    state = run_state(os.path.join(storage, "budget"))
    assert state["status"] == "FAILED" and len(state["attempts"]) == 1
    # the batch job's own exit code, as Slurm recorded it
    job_id = state["attempts"][0]["job_id"]
    shown = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True,
                           text=True).stdout
    assert "ExitCode=77:0" in shown, shown
