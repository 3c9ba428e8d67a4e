"""Asynchronous validation on the real test Slurm cluster (nodes n1, n2): a sweep whose
trials validate their checkpoints in Slurm jobs of their own, separate from the trials'
array tasks, whose results come back into each trial's run directory."""
import glob
import json
import os

import pytest

import validation_workloads as wl
from helpers import run_state, wait_for
from slurm import wait_gone
from hpctrain import (CheckpointConfig, RunConfig, ScalingConfig, ValidationConfig, tune)
from hpctrain.rundir.layout import RunDir
from hpctrain.torch import TorchTrainer

pytestmark = pytest.mark.cluster("slurm")


def test_a_sweep_whose_trials_validate_in_slurm_jobs_of_their_own(storage):
    trainer = TorchTrainer(
        wl.train_one_validated, scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name="valsweep", storage_path=storage, verbose=0,
                             checkpoint_config=CheckpointConfig(
                                 num_to_keep=1, checkpoint_score_attribute="accuracy",
                                 checkpoint_score_order="max")),
        validation_config=ValidationConfig(wl.validate_quality,
                                           scheduler={"partition": "debug"}),
        scheduler="slurm", site="test-cluster")
    grid = tune.Tuner(trainer, param_space={"train_loop_config": {
        "x": tune.grid_search([1, 3])}}).fit()
    assert grid.num_errors == 0
    for r in grid:
        run = RunDir(r.path)

        def validated():
            recs = run.list_checkpoints()
            return recs and all(rec.status != "PENDING_VALIDATION" for rec in recs) and recs
        # the trial's job has ended; its validation jobs finish on their own
        wait_for(validated, 45, f"the validations of {r.path}")
        # each validation job writes its result, then applies retention with the new
        # score: once its job has left the queue, retention has run
        launches = glob.glob(os.path.join(r.path, ".hpctrain", "validation", "*.launch.json"))
        assert len(launches) == 2, launches
        for path in launches:
            wait_gone(json.load(open(path))["job_id"], 45)
        recs = run.list_checkpoints()
        x = r.metrics["x"]
        training_jobs = set(run_state(r.path)["job_ids"])
        for rec in recs:
            assert rec.status == "VALIDATED", rec.validation
            # the validation's accuracy (x times the step), from a Slurm job that is not
            # the trial's array task
            step = int(rec.name[-1])
            assert rec.metrics["accuracy"] == x * (step + 1)
            job = rec.metrics["job"]
            assert job and job not in training_jobs and rec.launch["job_id"] == job
            assert os.path.exists(os.path.join(
                r.path, "logs", f"validation-{rec.name}-{job}.out"))
            script = open(rec.launch["script"]).read()
            assert "#SBATCH --job-name=trial_0000" in script and "-validate\n" in script
            assert "#SBATCH --partition=debug\n" in script
        # top-1 by the validated accuracy: the second checkpoint (also the latest)
        assert [rec.name for rec in recs] == ["checkpoint_000001"]
