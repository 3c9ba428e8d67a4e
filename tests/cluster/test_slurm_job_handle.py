"""A run submitted without waiting (``trainer.submit()`` → :class:`hpctrain.job.Job`), on
the real test Slurm cluster: its status while it queues and runs, its result, a cancel
that keeps the committed checkpoints, and the handle found again from the run directory
by another process."""
import os
import subprocess
import sys

import pytest

import hpctrain
import workloads
from hpctrain import RunConfig, ScalingConfig
from hpctrain.errors import ConfigError
from hpctrain.job import Job
from hpctrain.torch import TorchTrainer
from helpers import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm")]



def trainer(func, name, storage, **config):
    return TorchTrainer(func, train_loop_config=config,
                        scaling_config=ScalingConfig(num_workers=2, num_nodes=2),
                        run_config=RunConfig(name=name, storage_path=storage, verbose=0),
                        scheduler="slurm", site="test-cluster")


def test_submit_returns_at_once_and_result_waits(storage):
    job = trainer(workloads.deterministic, "handle", storage, epochs=2).submit()
    assert job.path == os.path.join(storage, "handle")
    assert job.status() in ("PENDING", "RUNNING")     # submitted, not waited for
    assert not job.done()
    result = job.result(timeout=240)
    assert result.status == "FINISHED" and result.metrics["epoch"] == 1
    assert job.done() and job.status() == "FINISHED"
    assert job.cancel() is False                      # nothing left to cancel
    # another process finds the same job from the run directory
    code = (f"from hpctrain.job import Job; j = Job({job.path!r}); "
            "print(j.job_id, j.status(), j.result().metrics['epoch'])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.stdout.split() == [job.job_id, "FINISHED", "1"], p.stderr


def test_cancel_ends_the_job_and_keeps_its_checkpoints(storage):
    job = trainer(workloads.slow_checkpointing, "handle-cancel", storage).submit()
    ckpts = os.path.join(job.path, "checkpoints")
    wait_for(lambda: os.path.isdir(ckpts) and any(n.startswith("checkpoint_")
                                                 for n in os.listdir(ckpts)),
             240, "a committed checkpoint")
    assert job.status() == "RUNNING"
    with pytest.raises(TimeoutError):
        job.wait(timeout=1, poll_s=0.5)              # still running: the wait gives up
    assert job.cancel() is True
    status = job.wait(timeout=120, poll_s=0.5)
    assert status in ("JOB_CANCELLED", "FAILED"), status
    with pytest.raises(hpctrain.TrainingFailedError):
        job.result()
    assert hpctrain.Result.from_path(job.path).checkpoint is not None


def test_submit_needs_a_batch_scheduler(storage):
    local = TorchTrainer(workloads.deterministic, scaling_config=ScalingConfig(num_workers=1),
                         run_config=RunConfig(name="nope", storage_path=storage))
    with pytest.raises(ConfigError) as info:
        local.submit()
    assert "submit() needs a batch scheduler" in str(info.value)
    assert not os.path.exists(os.path.join(storage, "nope"))
