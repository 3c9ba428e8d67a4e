"""PyTorch Lightning across the two nodes of the real test Slurm cluster (n1, n2), one
rank per node: inside the Slurm job Lightning would detect SLURM by itself, but the
cluster environment is hpctrain's, the warning and SIGTERM handlers stay hpctrain's, and
the training ends with one committed Lightning checkpoint per epoch."""
import json
import os

import pytest

from helpers import cli as hpctrain_cli
from slurm import start_cluster

pytest.importorskip("lightning")
pytestmark = pytest.mark.slow
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module", autouse=True)
def cluster():
    start_cluster()


def test_lightning_on_two_nodes_keeps_hpctrains_environment_and_signals(tmp_path, storage):
    job = tmp_path / "lightning.toml"
    job.write_text(f"""
site = "test-cluster"
[job]
entrypoint = "{HERE}/framework_workloads.py:lightning_deterministic"
[run]
name = "lit2"
storage_path = "{storage}"
[scaling]
num_nodes = 2
workers_per_node = 1
[scheduler]
time = "00:05:00"
[config]
epochs = 2
samples = 32
""")
    p = hpctrain_cli("submit", str(job), "--follow", timeout=400)
    assert "run FINISHED" in p.stdout, p.stdout + p.stderr
    run = os.path.join(storage, "lit2")
    with open(os.path.join(run, "result.json")) as f:
        reported = [json.loads(line) for line in f]
    assert [(r["epoch"], r["step"]) for r in reported] == [(0, 2), (1, 4)]  # 32 / 2 ranks / 8
    assert os.path.isfile(os.path.join(run, "checkpoints", "checkpoint_000001", "checkpoint.ckpt"))
    for rank in range(2):
        with open(os.path.join(run, "test-out", f"probe-rank-{rank}.json")) as f:
            probe = json.load(f)
        assert probe["slurm_job_id"] and probe["slurm_detected"] is True, probe
        assert probe["environment"] == "RayLightningEnvironment"
        assert (probe["global_rank"], probe["world_size"]) == (rank, 2)
        assert (probe["node_rank"], probe["host"]) == (rank, f"n{rank + 1}")
        assert probe["sigusr1"] == "_take_warning_signal.<locals>.handler", probe
        assert probe["sigterm"] == "SIG_DFL", probe
