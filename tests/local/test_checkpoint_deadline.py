"""A checkpoint that cannot finish before the deadline is not started (deadline.py): after
the warning, a stop whose checkpoint costs more than the time left ends the training at
once, without it; the attempt ends before the deadline (not killed there), and the next
attempt resumes from the last committed checkpoint."""
import glob
import os
import uuid

import health_workloads
from helpers import run_state
from hpctrain import FailureConfig, Result, RunConfig, ScalingConfig
from hpctrain.allocation.supervisor import FINISHED, PREEMPTED, AttemptPlan, Supervisor
from hpctrain.launchers.local import LocalLauncher
from hpctrain.run import Run, driver_pythonpath
from hpctrain.torch import TorchTrainer


def _prepared(storage):
    trainer = TorchTrainer(
        health_workloads.steady,
        train_loop_config={"steps": 4, "step_s": 0.5, "checkpoint_s": 2.5},
        scaling_config=ScalingConfig(num_workers=1), site="local",
        run_config=RunConfig(name="deadline", storage_path=storage, verbose=0,
                             failure_config=FailureConfig(max_failures=0)))
    prepared = Run.for_trainer(trainer)
    prepared.run_dir.create()
    return prepared


def test_a_stop_checkpoint_that_would_end_after_the_deadline_is_not_started(storage):
    """Checkpoints of 2.5 s; the warning comes once the first is committed, with 4 s of
    warning time: the ranks get 2 s to stop, less than a checkpoint costs. The stop's
    checkpoint is not started: the attempt ends cleanly before the deadline (before, the
    rank staged it and was killed at the deadline), and the next attempt resumes from the
    first checkpoint and finishes with the uninterrupted run's final state."""
    prepared = _prepared(storage)
    run = prepared.run_dir

    def warn_after_first_checkpoint():
        if sup.stop_time is None and run.list_checkpoints():
            sup.request_stop("the test's warning")

    with run.exclusive():
        prepared.prepare()
        job = f"deadline-{uuid.uuid4().hex[:8]}"
        sup = Supervisor(run, AttemptPlan(1, job, warning_s=4, extra_env=driver_pythonpath()),
                         launcher=LocalLauncher(), on_tick=warn_after_first_checkpoint)
        assert sup.run_to_end() == PREEMPTED
        first = run_state(run.path)["attempts"][0]
        assert first["outcome"] == PREEMPTED
        assert not first["stopped_at_deadline"] and first["stop_checkpoint"] is None
        assert first["ended"] < sup.stop_deadline
        assert [c.name for c in run.list_checkpoints()] == ["checkpoint_000000"]
        log = "".join(open(p).read() for p in
                      glob.glob(os.path.join(run.logs_dir(job), "rank-0*")))
        assert ("the checkpoint of report 2 is not started: the deadline (the stop "
                "deadline after the scheduler's warning) is in ") in log
        assert ("s (measured); the ranks stop now, and the next attempt resumes from the "
                "last committed checkpoint") in log

        again = Supervisor(run, AttemptPlan(1, job + "-2", extra_env=driver_pythonpath()),
                           launcher=LocalLauncher())
        assert again.run_to_end() == FINISHED
    second = run_state(run.path)["attempts"][1]
    assert os.path.basename(second["resumed_from"]) == "checkpoint_000000"
    result = Result.from_path(run.path)
    with result.checkpoint.as_directory() as d:
        assert open(os.path.join(d, "step.txt")).read() == "3"
    assert result.metrics["step"] == 3
