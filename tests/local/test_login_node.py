"""The login-node trap: a run with no site, where a batch system's submit command is on
PATH and no allocation is detected, trains on this machine; it says so once, with the fix."""
import os
import subprocess
import sys
import warnings

import pytest
import workloads
from helpers import fit, workload, write_job

from hpctrain.driver import login
from hpctrain.errors import LoginNodeWarning

ALLOCATION_VARS = ("SLURM_JOB_ID", "SLURM_JOBID", "PBS_JOBID", "LSB_JOBID")
MESSAGE = ("no site was named and this process is in no batch allocation, although 'sbatch' "
           "is on PATH: training runs on this machine, probably a login node. To use the "
           "cluster, ")


@pytest.fixture
def login_node(tmp_path, monkeypatch):
    """A fake ``sbatch`` first on PATH, no allocation, and the once-per-process flag reset."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sbatch"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for var in ALLOCATION_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(login, "_warned", False)
    return bin_dir


def test_fit_without_a_site_warns_once_with_the_fix(login_node, storage):
    with pytest.warns(LoginNodeWarning) as record:
        fit(workloads.return_rank, storage, workers=1, name="first")
        fit(workloads.return_rank, storage, workers=1, name="second")
    mine = [w for w in record if w.category is LoginNodeWarning]
    assert len(mine) == 1
    assert str(mine[0].message) == MESSAGE + (
        'name a site (site="NAME", `hpctrain sites` lists them) or a scheduler '
        '(scheduler="slurm"); site="local" runs here on purpose')
    assert mine[0].filename == __file__ or mine[0].filename.endswith("helpers.py")
    assert os.path.isdir(os.path.join(storage, "second", "checkpoints"))  # it still ran


def test_site_local_runs_here_without_a_word(login_node, storage):
    with warnings.catch_warnings():
        warnings.simplefilter("error", LoginNodeWarning)
        result = fit(workloads.return_rank, storage, workers=1, name="here", site="local")
    assert result.error is None and result.metrics["x"] == 1


def test_no_warning_inside_an_allocation_or_without_a_batch_system(login_node):
    path = os.environ["PATH"]
    assert login.login_node_message({"PATH": path}) is not None
    for var in ALLOCATION_VARS[:1] + ALLOCATION_VARS[2:]:
        assert login.login_node_message({"PATH": path, var: "42"}) is None, var
    assert login.login_node_message({"PATH": str(login_node.parent / "empty")}) is None


def _run_cli(tmp_path, storage, *extra):
    job = write_job(tmp_path, "cli" + str(len(extra)),
                    entrypoint=workload("workloads:return_rank"), storage=storage,
                    scaling={"num_workers": 1}, verbose=0)
    return subprocess.run([sys.executable, "-m", "hpctrain", "run", job, *extra],
                          capture_output=True, text=True, timeout=180, env=dict(os.environ))


def test_cli_run_without_a_site_warns_and_site_local_silences_it(login_node, tmp_path,
                                                                  storage):
    p = _run_cli(tmp_path, storage)
    assert p.returncode == 0, p.stderr
    assert ("[hpctrain] warning: " + MESSAGE + "`hpctrain submit` it with --site NAME "
            "(`hpctrain sites` lists them), or run it inside an allocation (salloc, qsub -I); "
            'site = "local" in the job file (or --set site=local) runs here on purpose\n'
            ) in p.stderr
    assert p.stderr.count("login node") == 1
    quiet = _run_cli(tmp_path, storage, "--set", "site=local")
    assert quiet.returncode == 0, quiet.stderr
    assert "login node" not in quiet.stderr
