"""The batch script of a validation job (asynchronous validation): rendered from the
scheduler's template like the training job's, with one worker, the ValidationConfig's
resources and scheduler options, its own name and log, and the batch step told to
validate one checkpoint. Specs come from real job files through ``load_job_spec``."""
import textwrap

import pytest

from helpers import ROOT
from hpctrain.allocation.validation import render_validation_job
from hpctrain.rundir.layout import RunDir
from hpctrain.errors import ConfigError
from hpctrain.spec import load_job_spec

RUN = "/scratch/me/runs/r1"


def spec_of(tmp_path, body, site):
    path = tmp_path / "job.toml"
    path.write_text(f'[job]\nentrypoint = "{ROOT}/examples/quickstart_train.py:train_func"\n'
                    + textwrap.dedent(body))
    return load_job_spec(str(path), [], site=site)


def directives(script, prefix):
    return [l[len(prefix):] for l in script.splitlines() if l.startswith(prefix)]


TRAINING = """
[scaling]
num_workers = 8
workers_per_node = 4
use_gpu = true
[scheduler]
time = "12:00:00"
"""


def test_a_slurm_validation_job_asks_for_its_own_resources_and_partition(tmp_path):
    spec = spec_of(tmp_path, TRAINING + 'partition = "gpu"\n', "generic-slurm")
    _, script = render_validation_job(
        RunDir(RUN), spec, {"ray_remote_kwargs": {"num_cpus": 4, "memory": "16G"},
                            "scheduler": {"partition": "debug", "time": "00:20:00"}},
        "checkpoint_000007")
    assert directives(script, "#SBATCH ") == [
        "--job-name=r1-validate", "--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=4",
        "--mem=16G", "--time=00:20:00", "--partition=debug", "--signal=B:USR1@120",
        "--requeue"]
    assert (f'exec >>"{RUN}/logs/validation-checkpoint_000007-${{SLURM_JOB_ID}}.out" 2>&1'
            in script)
    assert f"-m hpctrain.cli.batch {RUN} --validate checkpoint_000007 --script" in script


def test_a_pbs_validation_job(tmp_path):
    spec = spec_of(tmp_path, TRAINING + 'queue = "workq"\n', "generic-pbs")
    _, script = render_validation_job(
        RunDir(RUN), spec, {"ray_remote_kwargs": {"num_gpus": 1}, "scheduler": {}},
        "checkpoint_000002")
    lines = directives(script, "#PBS ")
    assert "-N r1-validate" in lines and "-q workq" in lines
    select = [l for l in lines if l.startswith("-l select=")]
    assert select == ["-l select=1:ncpus=1:mpiprocs=1:ngpus=1"], lines
    assert "-l walltime=12:00:00" in lines  # the training job's, unless set
    assert "--validate checkpoint_000002" in script


def test_a_scheduler_option_the_scheduler_lacks_is_refused_naming_it(tmp_path):
    spec = spec_of(tmp_path, TRAINING, "generic-slurm")
    with pytest.raises(ConfigError) as e:
        render_validation_job(RunDir(RUN), spec, {"scheduler": {"partiton": "debug"}},
                              "checkpoint_000000")
    assert "ValidationConfig(scheduler=...): partiton is no [scheduler] option of slurm" \
        in str(e.value)
    assert "partition" in str(e.value).split("HINT:")[1]
