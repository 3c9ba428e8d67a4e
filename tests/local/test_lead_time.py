"""The warning's lead time from the measured checkpoint cost: where the allocation's end
is known and twice the costliest recent checkpoint (+ 15 s) is more than warning_time,
the supervisor warns by itself that much earlier; the ranks stop at a checkpoint."""
import time
import uuid

import pytest

import health_workloads
from helpers import run_state
from hpctrain import FailureConfig, RunConfig, ScalingConfig
from hpctrain._internal.allocation.lead import SLACK_S
from hpctrain._internal.allocation.supervisor import PREEMPTED, Supervisor
from hpctrain.launchers.local import LocalLauncher
from hpctrain.run import Run, driver_pythonpath
from hpctrain.torch import TorchTrainer


def _supervise(storage, *, steps, warning_s, ends_in):
    trainer = TorchTrainer(
        health_workloads.steady, train_loop_config={"steps": steps, "step_s": 0.25},
        scaling_config=ScalingConfig(num_workers=1), site="local",
        run_config=RunConfig(name="lead", storage_path=storage, verbose=0,
                             failure_config=FailureConfig(max_failures=0)))
    prepared = Run.for_trainer(trainer)
    run = prepared.run_dir
    run.create()
    with run.exclusive():
        prepared.prepare()
        sup = Supervisor(run, launcher=LocalLauncher(), num_workers=1, max_failures=0,
                         job_id=f"lead-{uuid.uuid4().hex[:8]}", warning_s=warning_s,
                         extra_env=driver_pythonpath(), ends_at=time.time() + ends_in)
        return sup, sup.run_to_end(), run.path


def test_a_measured_checkpoint_cost_warns_before_warning_time(storage):
    """No checkpoint at the start: the lead is warning_time (10 s). The checkpoints
    committed meanwhile (the supervisor looks again every 30 s) make it 2 × their cost +
    15 s: the warning comes that long before the end (in 50 s), though no scheduler
    warns and warning_time alone would not."""
    sup, status, path = _supervise(storage, steps=400, warning_s=10, ends_in=50)
    assert status == PREEMPTED
    assert sup.checkpoint_cost is not None
    assert sup.lead_s > 10 and abs(sup.lead_s - (2 * sup.checkpoint_cost + SLACK_S)) < 1e-9
    assert sup.stop_reason.startswith(f"{sup.lead_s:.0f} s before the walltime ends: 2 × "
                                      f"the measured checkpoint cost")
    assert "more than failure.warning_time (10 s)" in sup.stop_reason
    # the ranks get the lead (less the requeue's 15 s) to stop, not warning_time's
    assert sup.stop_deadline - sup.stop_time == pytest.approx(max(sup.lead_s / 2,
                                                                  sup.lead_s - 15))
    last = run_state(path)["attempts"][-1]
    assert last["outcome"] == PREEMPTED and last["warning"] == sup.stop_reason
    assert last["stop_checkpoint"]  # stopped at a committed checkpoint
