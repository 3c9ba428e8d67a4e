"""Asynchronous validation on the real OpenPBS server (scripts/pbs-server.sh): a run's
validations are PBS jobs of their own, submitted by the training job's batch step, whose
results come back into the run directory after the training job has ended."""
import os

import pytest

import validation_workloads as wl
from helpers import ROOT, run_state, wait_for
from hpctrain import CheckpointConfig, PbsConfig, RunConfig, ScalingConfig, ValidationConfig
from hpctrain.rundir.layout import RunDir
from hpctrain.sites import PACKAGE_SITE_DIR, SITE_PATH_ENV
from hpctrain.torch import TorchTrainer

pytestmark = [pytest.mark.slow, pytest.mark.cluster("pbs")]


@pytest.fixture
def pbs(pbs_server, monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith(("PBS_", "SLURM_", "OMPI_", "PMI_", "PALS_", "HPCTRAIN_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", f"{pbs_server}{os.pathsep}{os.environ['PATH']}")
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    # generic-pbs, with this checkout first on the batch step's PYTHONPATH (MoM starts
    # the job from a login shell: nothing of this process's environment reaches it)
    sites = tmp_path / "sites"
    sites.mkdir()
    with open(os.path.join(PACKAGE_SITE_DIR, "generic-pbs.toml")) as f:
        text = f.read().replace('name = "generic-pbs"', 'name = "valpbs"')
    (sites / "valpbs.toml").write_text(text + f'\n[env]\nPYTHONPATH = "{ROOT}"\n')
    monkeypatch.setenv(SITE_PATH_ENV, str(sites))
    return pbs_server


def test_a_run_whose_checkpoints_validate_in_pbs_jobs_of_their_own(storage, pbs):
    trainer = TorchTrainer(
        wl.train_one_validated, train_loop_config={"x": 2},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name="pbsval", storage_path=storage, verbose=0,
                             checkpoint_config=CheckpointConfig(
                                 num_to_keep=1, checkpoint_score_attribute="accuracy",
                                 checkpoint_score_order="max")),
        validation_config=ValidationConfig(wl.validate_quality),
        scheduler=PbsConfig(queue="workq", time="00:05:00", launcher="local"),
        site="valpbs")
    result = trainer.fit()
    run = RunDir(result.path)
    training_jobs = set(run_state(result.path)["job_ids"])

    def done():
        recs = run.list_checkpoints()
        return recs and all(r.status != "PENDING_VALIDATION" for r in recs)
    wait_for(done, 120, "the PBS validation jobs")
    recs = run.list_checkpoints()
    assert [(r.name, r.status, r.metrics["accuracy"]) for r in recs] == [
        ("checkpoint_000001", "VALIDATED", 4)]
    job = recs[0].launch["job_id"]
    assert job not in training_jobs
    script = open(recs[0].launch["script"]).read()
    assert "#PBS -N pbsval-validate\n" in script and "#PBS -q workq\n" in script
