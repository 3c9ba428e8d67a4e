"""The hang watchdog on the real test Slurm cluster: 2 nodes × 1 rank, the rank on the
second node stops before its step in the first attempt, so the rank on the first node
waits inside DDP's allreduce. The supervisor (in the batch step, on the first node) sees
both ranks' progress stop through their heartbeat files on the shared filesystem, gets
both ranks' stacks (one written on each node), ends the attempt and restarts from the
last checkpoint in the same allocation; the run ends with the weights of a run that
never hung."""
import os

import pytest

import hang_workloads
from helpers import (SUPPORT, assert_same_state, final_state, run_state, workload, write_job,
                     cli as hpctrain_cli)
from hpctrain import RunConfig, ScalingConfig
from hpctrain.rundir.layout import RunDir
from hpctrain.torch import TorchTrainer

pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm")]

LIMIT = 20  # seconds: a fixed limit, so the test's time is known


@pytest.mark.timeout(600)
def test_a_rank_that_stops_before_the_allreduce_on_another_node_is_a_hang(tmp_path, storage,
                                                                          tmp_path_factory):
    config = {"epochs": 4, "stall_at": 2, "how": "allreduce"}
    job = write_job(tmp_path, "hung", site="test-cluster",
                    entrypoint=workload("hang_workloads:stalls"), storage=storage,
                    scaling={"num_nodes": 2, "workers_per_node": 1},
                    scheduler={"time": "00:10:00"},
                    failure=f'max_failures = 1\nhang_timeout = "{LIMIT}s"',
                    env={"PYTHONPATH": SUPPORT}, config=config)
    p = hpctrain_cli("submit", job, "--follow", check=False, timeout=500)
    assert p.returncode == 0, p.stdout + p.stderr
    run = os.path.join(storage, "hung")
    state = run_state(run)
    first, second = state["attempts"]
    assert (first["outcome"], second["outcome"]) == ("FAILED", "FINISHED")
    assert first["job_id"] == second["job_id"]  # restarted inside the same allocation
    hang = first["hang"]
    assert 1 in hang["stalled_ranks"] and hang["limit_s"] == LIMIT and hang["phase"] == "train"
    assert first["error"].startswith("hang: rank ")
    assert first["ended"] - first["started"] < LIMIT + 90
    adir = RunDir(run).attempt_dir(1)
    stacks = {r: open(os.path.join(adir, f"stacks.rank-{r}.txt")).read() for r in (0, 1)}
    assert stacks[1].startswith("rank 1 on n2") and "in stalls" in stacks[1]
    assert stacks[0].startswith("rank 0 on n1") and "backward" in stacks[0]
    assert second["resumed_from"].endswith("checkpoint_000001")
    reference = TorchTrainer(
        hang_workloads.stalls, train_loop_config={"epochs": 4},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="ref", storage_path=str(tmp_path_factory.mktemp("ref")),
                             verbose=0)).fit()
    assert_same_state(final_state(run), final_state(reference.path))
