"""Schedulers, launchers and backends from outside hpctrain, through entry points.

The toy plugin package (examples/plugins/hpctrain-toy-scheduler) is installed for real
with pip into a folder of its own; the hpctrain command, run with that folder on
PYTHONPATH, finds its scheduler ``toybatch``, renders its script and runs a job through it
to FINISHED. A broken plugin is left out with a warning naming its distribution and entry
point, and hpctrain keeps working for everything else."""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import hpctrain
from helpers import cli

REPO = pathlib.Path(__file__).resolve().parents[2]
TOY = REPO / "examples" / "plugins" / "hpctrain-toy-scheduler"

TRAIN = """\
import hpctrain


def train(config):
    hpctrain.report({"rank": hpctrain.get_context().get_world_rank(), "x": config["x"]})
"""

BROKEN_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "hpctrain-plugintest"
version = "0.2"

[project.entry-points."hpctrain.schedulers"]
broken = "hpctrain_plugintest.broken:BrokenScheduler"
slurm = "hpctrain_plugintest.good:Local"

[project.entry-points."hpctrain.launchers"]
toylaunch = "hpctrain_plugintest.good:ToyLauncher"

[project.entry-points."hpctrain.backends"]
toyback = "hpctrain_plugintest.good:TOYBACK"

[tool.setuptools]
packages = ["hpctrain_plugintest"]
"""

GOOD = """\
from hpctrain.plugins import BackendEntry
from hpctrain.launchers.local import LocalLauncher
from hpctrain.schedulers.local import LocalScheduler as Local


class ToyLauncher(LocalLauncher):
    pass


TOYBACK = BackendEntry("toyback", backend="hpctrain.backends.torch:TorchBackend",
                       config="hpctrain.backends.torch:TorchConfig",
                       trainer="hpctrain.torch:TorchTrainer", config_keyword="torch_config")
"""


def pip_install(source: pathlib.Path, target: pathlib.Path) -> None:
    """Install the distribution at ``source`` into ``target`` (offline: setuptools is here)."""
    build = target.parent / (source.name + "-src")
    shutil.copytree(source, build)  # the build leaves build/ and *.egg-info beside it
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--no-build-isolation", "--no-index", "--target", str(target),
                        str(build)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


def env_with(site: pathlib.Path, tmp_path: pathlib.Path) -> dict:
    env = dict(os.environ, TOYBATCH_SPOOL=str(tmp_path / "spool"))
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO)] + [
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def job_file(tmp_path: pathlib.Path, kind: str, extra: str = "") -> str:
    (tmp_path / "train.py").write_text(TRAIN)
    path = tmp_path / f"{kind}.toml"
    path.write_text(textwrap.dedent(f"""\
        [job]
        entrypoint = "train.py:train"
        [scaling]
        num_workers = 1
        [scheduler]
        kind = "{kind}"
        time = "10m"
        [run]
        name = "{kind}"
        storage_path = "{tmp_path / 'runs'}"
        [config]
        x = 3
        """) + extra)
    return str(path)


@pytest.fixture(scope="module")
def toy_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("toy") / "site"
    pip_install(TOY, site)
    return site


def test_toy_scheduler_plugin_validates_renders_and_runs_a_job(toy_site, tmp_path):
    env = env_with(toy_site, tmp_path)
    job = job_file(tmp_path, "toybatch")

    p = cli("validate", job, env=env)
    assert "is valid" in p.stderr and 'kind = "toybatch"' in p.stdout
    script = cli("render", job, env=env).stdout
    # the plugin's own template (its directive lines), with hpctrain's shared body
    assert "#TOY nodes=1\n#TOY walltime=600\n" in script
    assert "-m hpctrain.cli.batch" in script

    p = cli("submit", job, "--follow", env=env, timeout=240)
    assert "submitted toybatch job" in p.stdout and "run FINISHED" in p.stdout
    run = tmp_path / "runs" / "toybatch"
    result = hpctrain.Result.from_path(str(run))
    assert result.error is None and result.metrics["x"] == 3
    job_id = re.search(r"submitted toybatch job (\w+)", p.stdout).group(1)
    assert (run / "logs" / f"toybatch-{job_id}.out").is_file()  # the job's own log
    assert (run / "job.sh").read_text() == script  # what render printed was submitted


def test_without_the_plugin_the_kind_is_unknown(tmp_path):
    p = cli("validate", job_file(tmp_path, "toybatch"), check=False)
    assert p.returncode != 0 and 'got "toybatch"' in p.stderr


def test_a_broken_or_clashing_plugin_is_left_out_with_a_warning(tmp_path):
    src = tmp_path / "hpctrain-plugintest"
    (src / "hpctrain_plugintest").mkdir(parents=True)
    (src / "pyproject.toml").write_text(BROKEN_PYPROJECT)
    (src / "hpctrain_plugintest" / "__init__.py").write_text("")
    (src / "hpctrain_plugintest" / "broken.py").write_text("import hpctrain_no_such_module\n")
    (src / "hpctrain_plugintest" / "good.py").write_text(GOOD)
    site = tmp_path / "site"
    pip_install(src, site)
    env = env_with(site, tmp_path)

    # everything else works: the built-in local scheduler, and the same distribution's
    # good launcher and backend (its [toyback] section is the backend's config)
    job = job_file(tmp_path, "local")
    text = pathlib.Path(job).read_text().replace(
        'kind = "local"', 'kind = "local"\nlauncher = "toylaunch"').replace(
        "[job]\n", '[job]\nbackend = "toyback"\n') + '[toyback]\nbackend = "gloo"\n'
    pathlib.Path(job).write_text(text)
    p = cli("validate", job, env=env)
    assert "is valid" in p.stderr
    assert 'backend = "toyback"' in p.stdout and 'launcher = "toylaunch"' in p.stdout
    broken = ('the entry point "broken = hpctrain_plugintest.broken:BrokenScheduler" '
              '(group hpctrain.schedulers) of the distribution "hpctrain-plugintest 0.2" '
              "was not loaded")
    assert broken in p.stderr and "No module named 'hpctrain_no_such_module'" in p.stderr
    # a plugin cannot replace a built-in scheduler
    assert ('"slurm = hpctrain_plugintest.good:Local"' in p.stderr
            and "'slurm' is already taken by hpctrain's own" in p.stderr)

    # asking for the broken one: an error, after the warning saying why
    p = cli("validate", job_file(tmp_path, "broken"), env=env, check=False)
    assert p.returncode != 0 and broken in p.stderr and 'got "broken"' in p.stderr
    # the error's own HINT says why the name is missing (not only the warning above it)
    assert "HINT: " + broken in p.stderr
