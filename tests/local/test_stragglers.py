"""Stragglers: one rank of two slowed on purpose (real ranks of the local launcher, in
lock step at every report) is named, with its node, in a warning, in state.json and in
`hpctrain status` / `hpctrain results`."""
import socket

from helpers import cli, run_state, workload, write_job


def test_a_slow_rank_is_named_with_its_node(tmp_path):
    job = write_job(tmp_path, "slow", entrypoint=workload("health_workloads:slow_rank"),
                    storage=tmp_path / "runs", site="local", verbose=0,
                    scaling={"num_workers": 2},
                    failure={"hang_timeout": "10s", "straggler_factor": 2.5},
                    config={"steps": 30, "slow_rank": 1, "slow_s": 0.4, "fast_s": 0.05})
    p = cli("run", job, timeout=240)
    state = run_state(str(tmp_path / "runs" / "slow"))
    pace = state["attempts"][0]["pace"]
    host = pace["slowest_host"]
    assert pace["slowest_rank"] == 1 and host == socket.gethostname()
    # rank 1 works 0.4 s a step, rank 0 0.05 s and then waits for it at the report
    assert 0.3 < pace["ranks"]["1"]["step_s"] < 0.8 and pace["ranks"]["0"]["step_s"] < 0.2
    assert pace["ratio"] > 2.5
    warning = state["attempts"][0]["straggler"]
    assert warning.startswith(f"straggler: rank 1 on {host} takes ")
    assert "the other ranks' median" in warning and "failure.straggler_factor = 2.5" in warning
    assert f"WARNING: {warning}" in p.stderr
    for command in ("status", "results"):
        shown = cli(command, str(tmp_path / "runs" / "slow")).stdout
        assert f"slowest rank 1 on {host}" in shown, shown


def test_ranks_at_the_same_pace_are_no_stragglers(tmp_path):
    job = write_job(tmp_path, "even", entrypoint=workload("health_workloads:slow_rank"),
                    storage=tmp_path / "runs", site="local", verbose=0,
                    scaling={"num_workers": 2}, failure={"hang_timeout": "10s"},
                    config={"steps": 30, "slow_rank": 1, "slow_s": 0.2, "fast_s": 0.2})
    p = cli("run", job, timeout=240)
    state = run_state(str(tmp_path / "runs" / "even"))
    assert "straggler" not in state["attempts"][0] and "straggler" not in p.stderr
    assert state["attempts"][0]["pace"]["ratio"] < 2
