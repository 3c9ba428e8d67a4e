"""The warning's lead time from the measured checkpoint cost: where the allocation's end
is known and warning_time leaves the ranks less than twice the costliest recent
checkpoint to stop, the supervisor warns by itself earlier; the ranks stop at a
checkpoint."""
import time
import uuid

import pytest

import health_workloads
from helpers import run_state
from hpctrain import FailureConfig, RunConfig, ScalingConfig
from hpctrain.allocation.supervisor import PREEMPTED, AttemptPlan, Supervisor
from hpctrain.launchers.local import LocalLauncher
from hpctrain.run import Run, driver_pythonpath
from hpctrain.torch import TorchTrainer


def _supervise(storage, *, steps, warning_s, ends_in, checkpoint_s):
    trainer = TorchTrainer(
        health_workloads.steady,
        train_loop_config={"steps": steps, "step_s": 0.25, "checkpoint_s": checkpoint_s},
        scaling_config=ScalingConfig(num_workers=1), site="local",
        run_config=RunConfig(name="lead", storage_path=storage, verbose=0,
                             failure_config=FailureConfig(max_failures=0)))
    prepared = Run.for_trainer(trainer)
    run = prepared.run_dir
    run.create()
    with run.exclusive():
        prepared.prepare()
        plan = AttemptPlan(1, f"lead-{uuid.uuid4().hex[:8]}", warning_s=warning_s,
                           extra_env=driver_pythonpath(), ends_at=time.time() + ends_in)
        sup = Supervisor(run, plan, launcher=LocalLauncher())
        return sup, sup.run_to_end(), run.path


def test_a_measured_checkpoint_cost_warns_before_warning_time(storage):
    """Checkpoints of 3 s, warning_time 10 s: after it the ranks would get 5 s (10 − 15,
    at least half) to stop, less than 2 × 3 s. No checkpoint at the start: the lead is
    warning_time; the supervisor looks again after 30 s, sees the cost, and warns 12 s
    before the end (in 50 s): the ranks get 6 s. No scheduler warns here, and
    warning_time alone would not have."""
    sup, status, path = _supervise(storage, steps=400, warning_s=10, ends_in=50,
                                   checkpoint_s=3)
    assert status == PREEMPTED
    assert 3 <= sup.checkpoint_cost < 6
    assert sup.lead_s == pytest.approx(4 * sup.checkpoint_cost)
    assert sup.stop_reason == (
        f"{sup.lead_s:.0f} s before the walltime ends (the supervisor's timer: the ranks "
        f"get 2 × the measured checkpoint cost of {sup.checkpoint_cost:.1f} s to stop, more "
        "than failure.warning_time = 10 s allows)")
    assert sup.stop_deadline - sup.stop_time == pytest.approx(sup.lead_s / 2)
    last = run_state(path)["attempts"][-1]
    assert last["outcome"] == PREEMPTED and last["warning"] == sup.stop_reason
    assert last["stop_checkpoint"] and not last["stopped_at_deadline"]

