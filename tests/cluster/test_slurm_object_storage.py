"""A run on the test Slurm cluster whose storage path is an s3:// URI (moto's server on
this machine's loopback, which the nodes n1/n2 share): the ranks on two nodes stage on the
control directory, rank 0 uploads, and the checkpoints are read back from S3."""
import os

import pytest

import hpctrain
from helpers import cli, run_state, workload, write_job
from s3 import s3_bucket, s3_server  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm")]


def test_a_two_node_run_stores_into_s3(s3_bucket, tmp_path):
    job = write_job(tmp_path, "s3run", site="test-cluster",
                    entrypoint=workload("s3_workloads:steps"), storage=f"{s3_bucket}/runs",
                    scaling={"num_nodes": 2, "workers_per_node": 1},
                    scheduler={"time": "00:03:00"}, config={"steps": 3})
    p = cli("submit", job, "--follow", timeout=240)
    assert "submitted slurm job" in p.stdout and "run FINISHED" in p.stdout, p.stdout
    uri = f"{s3_bucket}/runs/s3run"
    result = hpctrain.Result.from_path(uri)
    assert result.status == "FINISHED" and result.metrics["i"] == 2
    assert result.checkpoint.path == f"{uri}/checkpoints/checkpoint_000002"
    with result.checkpoint.as_directory() as d:  # both nodes' shards, from S3
        assert sorted(os.listdir(d)) == [".hpctrain_checkpoint.json", ".hpctrain_shard.rank-0.json",
                                         ".hpctrain_shard.rank-1.json", "rank0.bin", "rank1.bin",
                                         "step.txt"]
        assert open(os.path.join(d, "rank1.bin"), "rb").read() == bytes([2]) * 16
    control = tmp_path / "control" / "s3" / s3_bucket[5:] / "runs" / "s3run"
    assert run_state(str(control))["status"] == "FINISHED"
    assert not [n for n in os.listdir(control / "checkpoints") if n.startswith("checkpoint_")]
