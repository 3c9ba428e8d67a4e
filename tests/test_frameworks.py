"""The framework integrations with real worker processes: PyTorch Lightning
(hpctrain.lightning), Hugging Face Transformers (hpctrain.huggingface.transformers) and
Accelerate, each quick start as a user runs it, and a Lightning run warned mid-run that
resumes to the same weights as an uninterrupted one."""
import json
import os
import signal
import subprocess
import sys

import pytest

from helpers import wait_for

pytest.importorskip("lightning")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLES = os.path.join(ROOT, "examples")


def run_example(name, *args, timeout=240):
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *args],
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def rows(run):
    with open(os.path.join(run, "result.json")) as f:
        return [json.loads(line) for line in f]


def load_ckpt(checkpoint_dir, name):
    import torch

    return torch.load(os.path.join(checkpoint_dir, name), weights_only=False,
                      map_location="cpu")


def assert_same_tensors(a, b):
    import torch

    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


# ----------------------------------------------------------------------------- Lightning
def lightning_job(tmp_path, storage, name, config):
    path = tmp_path / f"{name}.toml"
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in config.items())
    path.write_text(f"""
[job]
entrypoint = "{HERE}/framework_workloads.py:lightning_deterministic"
[scaling]
num_workers = 2
[run]
name = "{name}"
storage_path = "{storage}"
verbose = 0
[config]
{body}
""")
    return str(path)


def hpctrain_run(job):
    return subprocess.Popen([sys.executable, "-m", "hpctrain.cli", "run", job],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_lightning_quickstart_example(storage):
    """examples/lightning_quickstart.py (Ray's Lightning guide, imports and data changed):
    2 workers, 2 epochs; one report per epoch with Lightning's logged loss, and the
    result's checkpoint is the last epoch's Lightning checkpoint."""
    out = run_example("lightning_quickstart.py", "--epochs", "2", "--storage", storage,
                      "--name", "lq")
    run = os.path.join(storage, "lq")
    reported = rows(run)
    assert [r["epoch"] for r in reported] == [0, 1]
    assert all(r["loss"] > 0 for r in reported)
    assert [r["checkpoint_dir_name"] for r in reported] == ["checkpoint_000000",
                                                              "checkpoint_000001"]
    ckpt = load_ckpt(os.path.join(run, "checkpoints", "checkpoint_000001"), "checkpoint.ckpt")
    assert ckpt["epoch"] == 1 and ckpt["global_step"] == reported[-1]["step"] > 0
    assert "reloaded the model from checkpoint_000001/checkpoint.ckpt" in out


def test_lightning_warning_checkpoints_stops_and_resumes_to_the_same_weights(tmp_path, storage):
    """SIGUSR1 to `hpctrain run` during epoch 2 of 5: both ranks stop after that epoch's
    checkpoint (exit 75, run STOPPED); running the job again resumes with
    ``trainer.fit(ckpt_path=...)`` and ends with the weights and optimizer state of an
    uninterrupted run. Inside fit, the warning and SIGTERM handlers stay hpctrain's and
    the cluster environment is RayLightningEnvironment."""
    config = {"epochs": 5, "samples": 64}
    job = lightning_job(tmp_path, storage, "warned", dict(config, step_sleep=0.25))
    run = os.path.join(storage, "warned")
    p = hpctrain_run(job)
    wait_for(lambda: os.path.exists(os.path.join(run, "result.json")) and len(rows(run)) >= 1,
             120, "the first epoch", proc=p)
    p.send_signal(signal.SIGUSR1)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 75, err
    with open(os.path.join(run, "state.json")) as f:
        state = json.load(f)
    assert state["status"] == "STOPPED"
    stopped_after = len(rows(run))
    assert 1 <= stopped_after < config["epochs"]
    stop_ckpt = state["attempts"][-1]["stop_checkpoint"]
    assert load_ckpt(os.path.join(run, "checkpoints", stop_ckpt),
                     "checkpoint.ckpt")["epoch"] == stopped_after - 1
    for rank in range(2):
        with open(os.path.join(run, "test-out", f"probe-rank-{rank}.json")) as f:
            probe = json.load(f)
        assert probe["sigusr1"] == "_take_warning_signal.<locals>.handler", probe
        assert probe["sigterm"] == "SIG_DFL", probe
        assert probe["environment"] == "RayLightningEnvironment"
        assert (probe["global_rank"], probe["world_size"]) == (rank, 2)

    p = hpctrain_run(job)
    out, err = p.communicate(timeout=180)
    assert p.returncode == 0, err
    with open(os.path.join(run, "test-out", "resumed-attempt-2")) as f:
        assert f.read().endswith(f"{stop_ckpt}/checkpoint.ckpt")
    reported = rows(run)
    assert [r["epoch"] for r in reported] == list(range(config["epochs"]))  # none lost, none twice

    ref = lightning_job(tmp_path, storage, "ref", config)
    p = hpctrain_run(ref)
    _, err = p.communicate(timeout=180)
    assert p.returncode == 0, err
    last = reported[-1]["checkpoint_dir_name"]
    resumed = load_ckpt(os.path.join(run, "checkpoints", last), "checkpoint.ckpt")
    reference = load_ckpt(os.path.join(storage, "ref", "checkpoints", last), "checkpoint.ckpt")
    assert resumed["global_step"] == reference["global_step"] == 5 * 4
    assert_same_tensors(resumed["state_dict"], reference["state_dict"])
    for a, b in zip(resumed["optimizer_states"][0]["state"].values(),
                    reference["optimizer_states"][0]["state"].values()):
        assert_same_tensors(a, b)
