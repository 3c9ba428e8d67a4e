"""[container]: each rank runs inside the container, the batch step on the host. The
rendered script's launch line is checked word for word for every runtime (the exact command
the supervisor runs); site files name a center's runtime and binds; bad values are refused
naming the key. And scheduler.python is split as the shell would, never quoted into one
word, and a container command there is refused with a HINT naming [container]."""
from __future__ import annotations

import os
import shlex
import sys
import textwrap

import pytest

from hpctrain.errors import ConfigError
from hpctrain.launchers import launcher_for
from hpctrain.schedulers import BatchRequest
from hpctrain.spec import load_job_spec
from helpers import ROOT

ENTRY = os.path.join(ROOT, "examples", "quickstart_train.py")
RUN = "/scratch/me/runs/r1"
SRUN = "srun --kill-on-bad-exit=1 --nodes=2 --ntasks=4 --ntasks-per-node=2"
WORKER = "python3 -m hpctrain.worker /scratch/me/runs/r1"
PODMAN_ENV = ("'--env=SLURM_*' --env=SLURMD_NODENAME '--env=PBS_*' '--env=LSB_*' "
              "'--env=LSF_*' '--env=PMI_*' '--env=PMIX_*' '--env=PALS_*' '--env=OMPI_*' "
              "'--env=MPI_*' '--env=HPCTRAIN_*' "
              "--env=MASTER_ADDR "
              "--env=MASTER_PORT --env=PYTHONPATH --env=PYTHONSAFEPATH --env=OMP_NUM_THREADS "
              "--env=CUDA_VISIBLE_DEVICES --env=ROCR_VISIBLE_DEVICES --env=HIP_VISIBLE_DEVICES")


@pytest.fixture(autouse=True)
def site_dir(tmp_path, monkeypatch):
    d = tmp_path / "sites"
    d.mkdir()
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(d))
    return d


def load(tmp_path, body="", overrides=(), *, top=""):
    path = tmp_path / "job.toml"
    path.write_text(top + f'[job]\nentrypoint = "{ENTRY}:train_func"\n' + textwrap.dedent(body))
    return load_job_spec(str(path), list(overrides))


SLURM_2x2 = """
[scaling]
num_workers = 4
workers_per_node = 2
[scheduler]
kind = "slurm"
"""


def launch_comment(script):
    """The launch line the script shows (what each attempt runs), without its '#'."""
    lines = script.splitlines()
    at = lines.index("#     Each attempt starts the ranks with:")
    return lines[at + 1].removeprefix("#       ")


@pytest.mark.parametrize("container, expected", [
    ('runtime = "apptainer"\nimage = "/p/train.sif"\nbinds = {"/lustre/data" = true}',
     f"{SRUN} apptainer exec --bind /scratch/me/runs --bind /lustre/data /p/train.sif "
     f"{WORKER}"),
    ('runtime = "singularity"\nimage = "/p/train.sif"\nargs = ["--cleanenv"]',
     f"{SRUN} singularity exec --bind /scratch/me/runs --cleanenv /p/train.sif {WORKER}"),
    ('runtime = "podman-hpc"\nimage = "me/train:1"\nbinds = {"/pscratch/d" = "/data"}',
     f"{SRUN} podman-hpc run --rm --net=host {PODMAN_ENV} "
     f"--volume=/scratch/me/runs:/scratch/me/runs --volume=/pscratch/d:/data me/train:1 "
     f"{WORKER}"),
    ('runtime = "shifter"\nimage = "docker:me/train:1"',
     f"{SRUN} shifter --image=docker:me/train:1 --volume=/scratch/me/runs:/scratch/me/runs "
     f"{WORKER}"),
    ('runtime = "pyxis"\nimage = "nvcr.io#nvidia/pytorch:24.01-py3"\n'
     'binds = {"/lustre" = true}\nargs = ["--container-writable"]',
     f"{SRUN} '--container-image=nvcr.io#nvidia/pytorch:24.01-py3' "
     "--container-mounts=/scratch/me/runs:/scratch/me/runs,/lustre:/lustre "
     f"--container-writable {WORKER}"),
    ('runtime = "charliecloud"\nimage = "/var/tmp/img"\npython = "/opt/py/bin/python3"',
     f"{SRUN} ch-run --bind=/scratch/me/runs:/scratch/me/runs /var/tmp/img -- "
     "/opt/py/bin/python3 -m hpctrain.worker /scratch/me/runs/r1"),
], ids=["apptainer", "singularity", "podman-hpc", "shifter", "pyxis", "charliecloud"])
def test_each_runtime_renders_its_exact_rank_command(tmp_path, container, expected):
    spec = load(tmp_path, SLURM_2x2 + "[container]\n" + container + "\n")
    script = BatchRequest(spec, RUN).materialize()
    assert launch_comment(script) == expected
    # the batch step stays on the host: its interpreter is not the container's
    assert "\nexec " + shlex.quote(sys.executable) \
        + " -m hpctrain.cli.batch " in script
    # the supervisor runs the same words it shows
    launcher = launcher_for(spec, run_path=RUN)
    argv = ([*launcher.extra_args, *launcher.container.command(RUN)])
    assert shlex.join(argv) in expected


def test_the_gpu_option_is_the_runtimes_own_only_for_a_gpu_job(tmp_path):
    body = SLURM_2x2 + '[container]\nruntime = "apptainer"\nimage = "/p/t.sif"\n'
    gpu = load(tmp_path, body, ["scaling.use_gpu=true"])
    assert launch_comment(BatchRequest(gpu, RUN).materialize()).startswith(
        f"{SRUN} --gpus-per-task=1 apptainer exec --nv --bind /scratch/me/runs /p/t.sif")
    cpu = load(tmp_path, body)
    assert " --nv " not in launch_comment(BatchRequest(cpu, RUN).materialize())
    rocm = load(tmp_path, body, ["scaling.use_gpu=true", "container.gpu=--rocm"])
    assert "apptainer exec --rocm --bind" in launch_comment(BatchRequest(rocm, RUN).materialize())


def test_podman_hpc_passes_the_jobs_env_names_and_container_env(tmp_path):
    spec = load(tmp_path, SLURM_2x2 + '[env]\nHF_HOME = "/p/hf"\n[container]\n'
                'runtime = "podman-hpc"\nimage = "me/t:1"\nenv = ["WANDB_*"]\n')
    line = launch_comment(BatchRequest(spec, RUN).materialize())
    assert f"{PODMAN_ENV} --env=HF_HOME '--env=WANDB_*' --volume=" in line


def test_a_site_names_the_runtime_and_binds_and_the_job_adds_its_image(tmp_path, site_dir):
    (site_dir / "center.toml").write_text(textwrap.dedent("""
        [scheduler]
        kind = "slurm"
        [container]
        runtime = "apptainer"
        binds = {"/lustre" = true, "/opt/cray" = true}
        gpu = "--rocm"
    """))
    spec = load(tmp_path, top='site = "center"\n', body='[scaling]\nnum_workers = 4\nworkers_per_node = 2\n'
                '[container]\nimage = "/p/t.sif"\nbinds = {"/opt/cray" = "", "/d" = "/data"}\n')
    assert launch_comment(BatchRequest(spec, RUN).materialize()) == (
        f"{SRUN} apptainer exec --bind /scratch/me/runs --bind /lustre --bind /d:/data "
        f"/p/t.sif {WORKER}")
    assert spec.where("container.runtime").endswith("center.toml")


def test_a_sites_runtime_waits_for_a_jobs_image(tmp_path, site_dir):
    """A center names its runtime for every job; a job without an image runs on the host,
    but a job file that names a runtime itself and no image is refused."""
    (site_dir / "center.toml").write_text('[scheduler]\nkind = "slurm"\n[container]\n'
                                          'runtime = "apptainer"\n')
    spec = load(tmp_path, top='site = "center"\n',
                body='[scaling]\nnum_workers = 4\nworkers_per_node = 2\n')
    assert launch_comment(BatchRequest(spec, RUN).materialize()) == (
        f"{SRUN} {shlex.quote(sys.executable)} -m hpctrain.worker {RUN}")
    with pytest.raises(ConfigError) as e:
        load(tmp_path, SLURM_2x2 + '[container]\nruntime = "shifter"\n')
    assert e.value.message == ('container.image: expected the image the ranks run in, since '
                               'container.runtime = "shifter"')
    assert e.value.file == str(tmp_path / "job.toml")


@pytest.mark.parametrize("body, overrides, message, hint", [
    ('image = "/p/t.sif"', (), "container.runtime: expected the runtime that runs "
     "container.image = '/p/t.sif'", 'runtime = "apptainer" or "singularity" or "podman-hpc" '
     'or "shifter" or "pyxis" or "charliecloud"'),
    ('runtime = "docker"\nimage = "x"', (), 'container.runtime: expected one of "apptainer", '
     '"singularity", "podman-hpc", "shifter", "pyxis", "charliecloud", got "docker"', None),
    ('runtime = "apptainer"\nimage = "x"\nbinds = {"data" = true}', (),
     "container.binds.data: expected an absolute host path as the key, got 'data'",
     'e.g. binds = {"/lustre/project" = true}'),
    ('runtime = "apptainer"\nimage = "x"\nbinds = {"/d" = false}', (),
     "container.binds./d: expected true (the same path in the container) or the path in the "
     "container, got false (boolean)", 'e.g. binds = {"/d" = true}; "" removes it'),
    ('runtime = "podman-hpc"\nimage = "x"\nenv = ["BAD-NAME"]', (),
     "container.env[0]: expected a variable name (or a prefix ending in *), got 'BAD-NAME'",
     'e.g. env = ["WANDB_MODE", "NCCL_*"]'),
])
def test_bad_container_values_are_refused_naming_the_file_and_key(tmp_path, body, overrides,
                                                                   message, hint):
    with pytest.raises(ConfigError) as e:
        load(tmp_path, SLURM_2x2 + "[container]\n" + body + "\n", overrides)
    assert e.value.message.startswith(message), e.value.message
    assert e.value.hint == hint
    assert e.value.file == str(tmp_path / "job.toml")


def test_pyxis_needs_srun(tmp_path):
    spec = load(tmp_path, '[scaling]\nnum_workers = 2\n[scheduler]\nkind = "pbs"\n'
                '[container]\nruntime = "pyxis"\nimage = "nvcr.io#nvidia/pytorch:24.01-py3"\n')
    with pytest.raises(ConfigError) as e:
        BatchRequest(spec, RUN).materialize()
    assert e.value.message == ("container.runtime: pyxis (Enroot) starts the ranks through "
                               "srun's own options, but scheduler.launcher is 'mpiexec'")
    assert e.value.hint.startswith('set scheduler.launcher = "srun"')
    assert e.value.file == str(tmp_path / "job.toml")


def test_a_job_without_container_runs_its_ranks_on_the_host(tmp_path):
    spec = load(tmp_path, SLURM_2x2)
    assert launcher_for(spec, run_path=RUN).container is None
    assert "[container]" not in spec.to_toml()


def test_the_container_survives_spec_toml(tmp_path):
    spec = load(tmp_path, SLURM_2x2 + '[container]\nruntime = "shifter"\nimage = "d:x"\n'
                'binds = {"/a" = true, "/b" = "/c"}\nargs = ["--entrypoint"]\n')
    again = tmp_path / "again.toml"
    again.write_text(spec.to_toml())
    assert load_job_spec(str(again)).container == spec.container


# --------------------------------------------------------------------------- scheduler.python
def test_scheduler_python_with_spaces_is_split_as_the_shell_would(tmp_path):
    spec = load(tmp_path, SLURM_2x2 + "python = '\"/opt/my env/bin/python3\" -X dev'\n")
    script = BatchRequest(spec, RUN).materialize()
    assert ("\nexec '/opt/my env/bin/python3' -X dev -m hpctrain.cli.batch /scratch/me/runs/r1 "
            "--script \"$0\"") in script
    assert launch_comment(script) == (
        f"{SRUN} '/opt/my env/bin/python3' -X dev -m hpctrain.worker "
        "/scratch/me/runs/r1")


def test_a_container_command_as_scheduler_python_is_refused_with_a_hint(tmp_path):
    with pytest.raises(ConfigError) as e:
        load(tmp_path, SLURM_2x2 + 'python = "apptainer exec --nv img.sif python3"\n')
    assert e.value.message == (
        "scheduler.python: expected the Python interpreter of the batch step, got "
        "'apptainer exec --nv img.sif python3', which runs apptainer: the batch step, which "
        "starts the ranks with srun or mpiexec, would run inside it")
    assert e.value.hint == (
        'run each rank in the container with a [container] section: runtime = "apptainer", '
        'image = "img.sif", gpu = "--nv", python = "python3"; scheduler.python stays the '
        "host's interpreter")
    assert e.value.file == str(tmp_path / "job.toml")


def test_a_scheduler_python_the_shell_cannot_split_is_refused(tmp_path):
    with pytest.raises(ConfigError) as e:
        load(tmp_path, SLURM_2x2 + "python = '\"/opt/py'\n")
    assert e.value.message == (
        "scheduler.python: expected an interpreter and its arguments as the shell would "
        "split them, got '\"/opt/py', which the shell cannot split (No closing quotation)")
