"""The node-local checkpoint tier on the real test Slurm cluster: the node that holds the
local copy is gone for the restart (the job is requeued, same job id, onto the other
node), so the restart reads the shared copy — and still resumes from the newest
committed checkpoint."""
import json
import os
import subprocess

import pytest

import tier_workloads
from helpers import ROOT, SUPPORT, cli as hpctrain_cli, run_state, wait_for, workload, write_job
from slurm import HoldReleaser, wait_gone

pytestmark = pytest.mark.cluster("slurm")


@pytest.mark.timeout(300)
def test_a_restart_on_another_node_reads_the_shared_copy(tmp_path, storage):
    nodes = tmp_path / "nodes"  # one "node-local" directory per node, named as $TMPDIR is
    for n in ("n1", "n2"):
        (nodes / n).mkdir(parents=True)
    job = write_job(
        tmp_path, "tiernode", site="test-cluster",
        entrypoint=workload("tier_workloads:counter"), storage=storage,
        scaling={"num_nodes": 1, "workers_per_node": 1},
        scheduler='time = "00:05:00"\n[scheduler.directives]\nexclude = "n2"',
        checkpoint={"local_dir": str(nodes / "$SLURMD_NODENAME")},
        env={"PYTHONPATH": os.pathsep.join([ROOT, SUPPORT])},  # this checkout's batch step
        config={"steps": 5, "fail_at": 2, "damage": "none", "hold": True})
    # the resolved spec the batch step reads carries the setting
    assert f'local_dir = "{nodes}/$SLURMD_NODENAME"' in hpctrain_cli("render", job).stdout
    job_id = hpctrain_cli("submit", job).stdout.split("submitted slurm job ")[1].split()[0]
    run = os.path.join(storage, "tiernode")
    wait_for(lambda: os.path.exists(os.path.join(run, "test-out", "holding")), 180,
             "the checkpoint of report 3 committed on n1")
    # n1 "is gone": the job is requeued (the same job id) and may only run on n2 now
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    subprocess.run(["scontrol", "update", f"jobid={job_id}", "ExcNodeList=n1"], check=True)
    releaser = HoldReleaser(job_id)
    try:
        wait_gone(job_id, 150)
    finally:
        releaser.stop()
    state = run_state(run)
    assert state["status"] == "FINISHED" and set(state["job_ids"]) == {job_id}
    last = state["attempts"][-1]["attempt"]
    assert state["attempts"][-1]["restored"] == {
        "local": [], "shared": [0], "shared_bytes_read": tier_workloads.SIZE}
    record = json.load(open(os.path.join(run, ".hpctrain", f"attempt-{last:03d}",
                                         "restore.rank-0.json")))
    assert record["source"] == "shared" and record["node"] == "n2"
    assert record["local_problems"] == ["no local copy of report 3 on node n2"]
    assert record["shared_bytes_read"] == tier_workloads.SIZE
    restored = json.load(open(os.path.join(run, "test-out", f"restored-{last}-rank-0.json")))
    assert restored == {"path": os.path.join(run, "checkpoints", record["checkpoint"]),
                        "step": 2, "host": "n2", "job": job_id}
    # the local copy is still on n1, sealed (its manifest written), private
    [n1_copy] = [os.path.join(d, "rank-0", "ckpt-000003")
                 for d in (nodes / "n1").glob("hpctrain-*/*")]
    manifest = json.load(open(os.path.join(n1_copy, ".hpctrain_local.json")))
    assert manifest["node"] == "n1" and manifest["job_id"] == job_id
    assert os.stat(os.path.dirname(n1_copy)).st_mode & 0o777 == 0o700
    from hpctrain.result import Result
    assert tier_workloads.step_of(Result.from_path(run).checkpoint.path) == 4
