"""PyTorch Lightning across the two nodes of the real test Slurm cluster (n1, n2), one
rank per node: inside the Slurm job Lightning would detect SLURM by itself, but the
cluster environment is hpctrain's, the warning and SIGTERM handlers stay hpctrain's, and
the training ends with one committed Lightning checkpoint per epoch."""
import json
import os
import subprocess

import pytest

from helpers import ROOT, run_state, workload, write_job, cli as hpctrain_cli
from helpers import wait_for
from slurm import HoldReleaser, squeue_state, wait_gone

pytest.importorskip("lightning")
pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm")]



def job_file(tmp_path, storage, name, config):
    """``framework_workloads.lightning_deterministic`` on 2 nodes, one rank each."""
    return write_job(
        tmp_path, name, site="test-cluster",
        entrypoint=workload("framework_workloads:lightning_deterministic"), storage=storage,
        scaling={"num_nodes": 2, "workers_per_node": 1}, scheduler={"time": "00:05:00"},
        failure={"warning_time": "60s"}, config=config)


def rows(run):
    with open(os.path.join(run, "result.json")) as f:
        return [json.loads(line) for line in f]


def test_lightning_on_two_nodes_keeps_hpctrains_environment_and_signals(tmp_path, storage):
    job = job_file(tmp_path, storage, "lit2", {"epochs": 2, "samples": 32})
    p = hpctrain_cli("submit", job, "--follow", timeout=400)
    assert "run FINISHED" in p.stdout, p.stdout + p.stderr
    run = os.path.join(storage, "lit2")
    reported = rows(run)
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


@pytest.mark.timeout(600)
def test_lightning_warned_on_slurm_requeues_and_resumes_to_the_same_weights(tmp_path, storage):
    """`scancel --signal=USR1 --batch` (what `--signal=B:USR1@N` does) during epoch 2 of
    5: the ranks stop after that epoch's checkpoint, the job is requeued (same job id)
    and the next instance resumes with ``trainer.fit(ckpt_path=...)``; every epoch is
    reported once and the final weights equal a local uninterrupted run's."""
    import torch

    from hpctrain import RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    import framework_workloads

    config = {"epochs": 5, "samples": 32}
    job = job_file(tmp_path, storage, "litwarned", dict(config, step_sleep=0.5))
    out = hpctrain_cli("submit", job).stdout
    job_id = out.split("submitted slurm job ")[1].split()[0]
    run = os.path.join(storage, "litwarned")
    releaser = HoldReleaser(job_id)
    try:
        wait_for(lambda: os.path.exists(os.path.join(run, "result.json")) and len(rows(run)) >= 1
                 and squeue_state(job_id) is not None, 180, "the first epoch on Slurm")
        subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], check=True)
        wait_gone(job_id, 300)
    finally:
        releaser.stop()
        subprocess.run(["scancel", job_id])
    state = run_state(run)
    assert [a["outcome"] for a in state["attempts"]] == ["PREEMPTED", "FINISHED"], state
    assert state["requeues"] == 1 and len(set(state["job_ids"])) == 1
    assert state["attempts"][1]["resumed_from"].endswith(state["attempts"][0]["stop_checkpoint"])
    reported = rows(run)
    assert [r["epoch"] for r in reported] == list(range(config["epochs"]))
    reference = TorchTrainer(framework_workloads.lightning_deterministic,
                             train_loop_config=config, scaling_config=ScalingConfig(num_workers=2),
                             run_config=RunConfig(name="ref", storage_path=str(tmp_path / "ref"),
                                                  verbose=0)).fit()
    last = reported[-1]["checkpoint_dir_name"]
    a = torch.load(os.path.join(run, "checkpoints", last, "checkpoint.ckpt"), weights_only=False)
    b = torch.load(os.path.join(reference.checkpoint.path, "checkpoint.ckpt"), weights_only=False)
    assert a["global_step"] == b["global_step"] == 5 * 2
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for k in a["state_dict"]:
        assert torch.equal(a["state_dict"][k], b["state_dict"][k]), k


EXAMPLES = os.path.join(ROOT, "examples")
ACCELERATE_CONFIG = {"lr": 2e-3, "num_epochs": 2, "seed": 42, "train_batch_size": 16,
                     "eval_batch_size": 32, "train_dataset_size": 256, "eval_dataset_size": 128}
DEEPSPEED_CONFIG = {"num_epochs": 2, "seed": 42, "eval_batch_size": 32,
                    "train_dataset_size": 256, "eval_dataset_size": 128}


@pytest.mark.parametrize("example,config,steps", [
    ("lightning_quickstart.py", {"epochs": 2, "samples": 512}, [2, 4]),     # 512 / 2 / 128
    ("transformers_quickstart.py", {"epochs": 2}, [7, 14]),                 # 100 / 2 / 8
    ("accelerate_quickstart.py", ACCELERATE_CONFIG, None),
    ("deepspeed_quickstart.py", DEEPSPEED_CONFIG, None),                    # ZeRO-3
], ids=["lightning", "transformers", "accelerate", "deepspeed"])
def test_quickstart_examples_on_two_nodes(example, config, steps, tmp_path, storage):
    """Each quick start's ``train_func`` as a 2-node Slurm job (one rank per node):
    data-parallel across the nodes, one report and one committed checkpoint per epoch
    (DeepSpeed's: both nodes' ZeRO shards in it)."""
    if example == "deepspeed_quickstart.py":
        pytest.importorskip("deepspeed")
    job = tmp_path / "job.toml"
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in config.items())
    job.write_text(f"""
site = "test-cluster"
[job]
entrypoint = "{EXAMPLES}/{example}:train_func"
[run]
name = "ex"
storage_path = "{storage}"
[scaling]
num_nodes = 2
workers_per_node = 1
[scheduler]
time = "00:05:00"
[config]
{body}
""")
    p = hpctrain_cli("submit", str(job), "--follow", timeout=400, cwd=str(tmp_path))
    assert "run FINISHED" in p.stdout, p.stdout + p.stderr
    reported = rows(os.path.join(storage, "ex"))
    assert len(reported) == 2
    assert [r["checkpoint_dir_name"] for r in reported] == ["checkpoint_000000",
                                                              "checkpoint_000001"]
    if steps is not None:
        assert [r["step"] for r in reported] == steps
    elif example == "accelerate_quickstart.py":
        assert [r["num_processes"] for r in reported] == [2, 2]
    else:
        assert [r["world_size"] for r in reported] == [2, 2]
        ckpt = os.path.join(storage, "ex", "checkpoints", "checkpoint_000001", "global_step0")
        assert sorted(os.listdir(ckpt)) == [f"zero_pp_rank_{r}_mp_rank_00_{kind}_states.pt"
                                            for r in (0, 1) for kind in ("model", "optim")]
