"""Fast restarts on the real test Slurm cluster (2 nodes × 2 ranks): with
``HPCTRAIN_FORK_RANKS=1`` one node zygote per node forks the ranks; a rank killed with
SIGKILL is named, the group restarts in the allocation from the last checkpoint, and the
training ends bit-identical to the same job with one interpreter per rank. (Not to an
uninterrupted run: with 4 ranks a resume changes a few weights in the last bit, in plain
PyTorch DDP over Gloo too — scripts/ddp-restart-bits.py, docs/guide/fault-tolerance.md.)
Without the crash, forked ranks end bit-identical to the local run. Timings:
bench/bench_recovery.py --compare-fork."""
import json
import os

import pytest

import workloads
from helpers import SUPPORT, assert_same_state, final_state, fit, run_state
from helpers import cli as hpctrain_cli
from slurm import wait_gone

pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm")]



def _run(tmp_path, storage, name, config, fork):
    job = tmp_path / f"{name}.toml"
    job.write_text(f"""
site = "test-cluster"
[job]
entrypoint = "{SUPPORT}/workloads.py:deterministic"
[run]
name = "{name}"
storage_path = "{storage}"
[scaling]
num_nodes = 2
workers_per_node = 2
[scheduler]
time = "00:10:00"
[failure]
max_failures = 1
[env]
PYTHONPATH = "{SUPPORT}"
HPCTRAIN_FORK_RANKS = "{1 if fork else 0}"
[config]
{chr(10).join(f"{k} = {json.dumps(v)}" for k, v in config.items())}
""")
    out = hpctrain_cli("submit", str(job)).stdout
    job_id = out.split("submitted slurm job ")[1].split()[0]
    wait_gone(job_id, timeout=600)
    run = os.path.join(storage, name)
    with open(os.path.join(run, "logs", job_id, "launcher.out")) as f:
        assert ("hpctrain.worker.nodezygote" in f.read()) is fork
    return run, run_state(run)


def test_forked_ranks_end_like_a_local_run(tmp_path, storage):
    run, state = _run(tmp_path, storage, "forked-straight", {"epochs": 4}, fork=True)
    assert state["status"] == "FINISHED", state
    reference = fit(workloads.deterministic, str(tmp_path / "ref"), workers=4,
                    config={"epochs": 4})
    assert_same_state(final_state(reference.path), final_state(run))


def test_a_forked_rank_killed_with_sigkill_restarts_to_the_same_model(tmp_path, storage):
    config = {"epochs": 5, "crash_at": 2, "crash_rank": 2, "crash_how": "sigkill"}
    run, state = _run(tmp_path, storage, "forked", config, fork=True)
    assert state["status"] == "FINISHED", state
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "FINISHED"]
    assert state["attempts"][0]["failed_rank"] == 2
    assert "killed by signal 9" in state["attempts"][0]["error"]
    assert os.path.basename(state["attempts"][1]["resumed_from"]) == "checkpoint_000001"
    plain_run, plain = _run(tmp_path, storage, "plain", config, fork=False)
    assert [a["outcome"] for a in plain["attempts"]] == ["FAILED", "FINISHED"]
    assert_same_state(final_state(plain_run), final_state(run))
