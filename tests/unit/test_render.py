"""Batch scripts rendered from job specs: the exact #SBATCH / #PBS lines, every packaged
site, site limits, shell safety of what reaches the script, the embedded spec, and
`hpctrain render` as a process.

Every expectation below is the literal directive text; a test builds the spec from a real
TOML file (plus overrides) through ``load_job_spec`` and renders it with
``BatchRequest(spec, run_path).materialize()``, as ``hpctrain render``/``submit`` do.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import uuid

import pytest

from hpctrain.common.registry import describe, scheduler_names
from hpctrain.errors import ConfigError
from hpctrain.schedulers import BatchRequest
from hpctrain.sites import PACKAGE_SITE_DIR, SITE_PATH_ENV, available_sites
from hpctrain.spec import load_site
from hpctrain.spec import load_job_spec
from helpers import ROOT

ENTRY = os.path.join(ROOT, "examples", "quickstart_train.py")
RUN = "/scratch/me/runs/r1"           # the run directory every request renders for
HEADER = "#!/bin/bash\n# Rendered by hpctrain"
EOF_MARK = "HPCTRAIN_SPEC_EOF"


@pytest.fixture(autouse=True)
def _only_packaged_sites(monkeypatch):
    """Sites come from the package (no user/center site dirs leaking in)."""
    monkeypatch.delenv(SITE_PATH_ENV, raising=False)


# --------------------------------------------------------------------------- helpers
def write_job(tmp_path, body: str = "", name: str = "job.toml") -> str:
    """A job file with the quickstart entry point plus ``body`` (TOML, dedented)."""
    path = tmp_path / name
    path.write_text(f'[job]\nentrypoint = "{ENTRY}:train_func"\n'
                    + textwrap.dedent(body))
    return str(path)


def load(tmp_path, body: str = "", *, site=None, overrides=(), name="job.toml"):
    return load_job_spec(write_job(tmp_path, body, name), list(overrides), site=site)


def render(tmp_path, body: str = "", *, site=None, overrides=(), run_path=RUN,
           python=None):
    spec = load(tmp_path, body, site=site, overrides=overrides)
    return BatchRequest(spec, run_path, python=python).materialize()


def directives(script: str) -> list:
    """The ``#SBATCH``/``#PBS`` lines of a script, without the prefix, in order."""
    out = []
    for line in script.splitlines():
        for prefix in ("#SBATCH ", "#PBS "):
            if line.startswith(prefix):
                out.append(line[len(prefix):])
    return out


def export_lines(script: str) -> list:
    """The ``export`` lines of the script's [env] part."""
    return [l for l in script.splitlines() if l.startswith("export ")
            and not l.startswith(("export HPCTRAIN_JOB_STARTED=", "export PYTHONSAFEPATH="))]


def config_error(tmp_path, body="", **kw) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        render(tmp_path, body, **kw)
    return info.value


# --------------------------------------------------------------------------- Slurm
SLURM_CASES = [
    pytest.param(
        """
        [scaling]
        num_nodes = 2
        workers_per_node = 4
        use_gpu = true
        cpus_per_worker = 8
        gpus_per_worker = 1
        mem_per_worker = "16G"
        """, [],
        ["--job-name=r1", "--nodes=2", "--ntasks-per-node=4", "--cpus-per-task=8",
         "--gpus-per-node=4", "--mem=64G", "--signal=B:USR1@120", "--requeue"],
        id="nodes-x-workers-cpus-gpus-mem"),
    pytest.param(
        """
        [scaling]
        num_workers = 6
        workers_per_node = 3
        gpus_per_worker = 2
        mem_per_worker = "1.5G"
        """, [],
        ["--job-name=r1", "--nodes=2", "--ntasks-per-node=3", "--gpus-per-node=6",
         "--mem=4608M", "--signal=B:USR1@120", "--requeue"],
        id="num-workers-over-workers-per-node-fractional-mem"),
    pytest.param(
        """
        [scaling]
        num_workers = 4
        use_gpu = true
        resources_per_worker = { CPU = 2, GPU = 1 }
        """, [],
        ["--job-name=r1", "--nodes=1", "--ntasks-per-node=4", "--cpus-per-task=2",
         "--gpus-per-node=4", "--signal=B:USR1@120", "--requeue"],
        id="resources-per-worker"),
    pytest.param('[scheduler]\ntime = "90m"\n', [],
                 ["--job-name=r1", "--nodes=1", "--ntasks-per-node=1", "--time=01:30:00", "--signal=B:USR1@120", "--requeue"],
                 id="walltime-90m"),
    pytest.param('[scheduler]\ntime = "1-12:00:00"\n', [],
                 ["--job-name=r1", "--nodes=1", "--ntasks-per-node=1", "--time=1-12:00:00", "--signal=B:USR1@120", "--requeue"],
                 id="walltime-days"),
    pytest.param('[scheduler]\ntime = "36:00:00"\n', [],
                 ["--job-name=r1", "--nodes=1", "--ntasks-per-node=1", "--time=1-12:00:00", "--signal=B:USR1@120", "--requeue"],
                 id="walltime-36h-is-1-12"),
    pytest.param('[scheduler]\ntime = "45s"\n', [],
                 ["--job-name=r1", "--nodes=1", "--ntasks-per-node=1", "--time=00:00:45", "--signal=B:USR1@11", "--requeue"],
                 id="walltime-seconds"),
    pytest.param('[scheduler]\ntime = "1d"\n', [],
                 ["--job-name=r1", "--nodes=1", "--ntasks-per-node=1", "--time=1-00:00:00", "--signal=B:USR1@120", "--requeue"],
                 id="walltime-one-day"),
    pytest.param(
        """
        [scheduler]
        partition = "gpu"
        account = "m1234_g"
        qos = "regular"
        constraint = "a100&hbm80g"
        after = "4242"
        """, [],
        ["--job-name=r1", "--nodes=1", "--ntasks-per-node=1", "--partition=gpu",
         "--account=m1234_g", "--qos=regular", "--constraint=a100&hbm80g",
         "--dependency=afterany:4242", "--signal=B:USR1@120", "--requeue"],
        id="partition-account-qos-constraint-after"),
    pytest.param("", ["scheduler.reservation=maint"],
                 ["--job-name=r1", "--nodes=1", "--ntasks-per-node=1", "--reservation=maint", "--signal=B:USR1@120", "--requeue"],
                 id="reservation"),
    pytest.param(
        """
        [scheduler]
        partition = "gpu"
        [scheduler.directives]
        mail-type = "END,FAIL"
        exclusive = true
        partition = "gpu-large"
        ntasks-per-node = ""
        signal = "B:USR1@90"
        """, [],
        # replaced in place, removed with "", true is a bare flag, new keys follow in order
        ["--job-name=r1", "--nodes=1", "--partition=gpu-large", "--signal=B:USR1@90",
         "--requeue", "--mail-type=END,FAIL", "--exclusive"],
        id="directive-map"),
    pytest.param("", ["scheduler.directives.exclusive=true", "scheduler.directives.time-min=30",
                      'scheduler.directives.nodes=""'],
                 ["--job-name=r1", "--ntasks-per-node=1", "--signal=B:USR1@120", "--requeue",
                  "--exclusive", "--time-min=30"],
                 id="directive-overrides"),
]


@pytest.mark.parametrize("body, overrides, expected", SLURM_CASES)
def test_slurm_directives(tmp_path, body, overrides, expected):
    script = render(tmp_path, body, site="generic-slurm", overrides=overrides)
    assert directives(script) == expected
    assert script.startswith(HEADER)
    assert "# Submit by hand with:  sbatch <this file>" in script


def test_slurm_directives_without_a_site(tmp_path):
    script = render(tmp_path, '[scheduler]\nkind = "slurm"\ntime = "2h"\n')
    assert directives(script) == ["--job-name=r1", "--nodes=1", "--ntasks-per-node=1",
                                  "--time=02:00:00", "--signal=B:USR1@120", "--requeue"]
    assert "-m hpctrain.cli.batch /scratch/me/runs/r1 " in script


def test_directive_order_is_stable(tmp_path):
    """Same request, different spelling order of the directive map in two files → the
    directives follow the merged map's order, identically on every render."""
    body = """
    [scheduler.directives]
    b-opt = "1"
    a-opt = "2"
    """
    first = render(tmp_path, body, site="generic-slurm")
    second = render(tmp_path, body, site="generic-slurm")
    assert first == second
    assert directives(first)[-2:] == ["--b-opt=1", "--a-opt=2"]


@pytest.mark.parametrize("site, job, expected_tail", [
    # juwels-booster sets no gres since it asks GPUs through --gpus-per-node; the job can
    # still ask for them as gres instead, and remove the computed request with "".
    pytest.param("juwels-booster",
                 '[scheduler.directives]\ngres = "gpu:4"\ngpus-per-node = ""\n',
                 ["--partition=booster", "--account=p1", "--signal=B:USR1@120", "--requeue", "--gres=gpu:4"],
                 id="juwels-gres-instead-of-gpus-per-node"),
    # jean-zay's own directive (hint) replaced in place by the job file, then removed
    pytest.param("jean-zay", '[scheduler.directives]\nhint = "multithread"\n',
                 ["--account=p1@h100", "--constraint=h100", "--signal=B:USR1@120",
                  "--requeue", "--hint=multithread"],
                 id="jean-zay-hint-replaced"),
    pytest.param("jean-zay", '[scheduler.directives]\nhint = ""\n',
                 ["--account=p1@h100", "--constraint=h100", "--signal=B:USR1@120",
                  "--requeue"],
                 id="jean-zay-hint-removed"),
    pytest.param("frontier", '[scheduler.directives]\nnetwork = ""\n',
                 ["--partition=batch", "--account=p1", "--signal=B:USR1@120", "--requeue"],
                 id="frontier-network-removed"),
    pytest.param("perlmutter",
                 '[scheduler.directives]\ngpus-per-task = 1\ngpus-per-node = ""\n',
                 ["--account=p1", "--qos=regular", "--constraint=gpu", "--signal=B:USR1@120", "--requeue",
                  "--gpus-per-task=1"],
                 id="perlmutter-gpus-per-task-instead"),
])
def test_site_directives_replaced_and_removed_by_the_job(tmp_path, site, job, expected_tail):
    body = """
    [scaling]
    num_nodes = 1
    workers_per_node = 4
    use_gpu = true
    [scheduler]
    account = "p1"
    """.replace('"p1"', '"p1@h100"' if site == "jean-zay" else '"p1"') + job
    got = directives(render(tmp_path, body, site=site))
    assert got[-len(expected_tail):] == expected_tail
    assert got[:3] == ["--job-name=r1", "--nodes=1", "--ntasks-per-node=4"]


@pytest.mark.parametrize("override", ["scheduler.directives.nodes=",
                                      "scaling.resources_per_worker.GPU="])
def test_empty_override_of_a_table_entry_nobody_set(tmp_path, override):
    script = render(tmp_path, site="generic-slurm", overrides=[override])
    assert directives(script)[:3] == ["--job-name=r1", "--nodes=1", "--ntasks-per-node=1"]


def test_site_directive_does_not_override_the_jobs_scaling(tmp_path, monkeypatch):
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "mysite.toml").write_text(
        '[site]\nscheduler = "slurm"\n[scheduler.directives]\n"cpus-per-task" = 32\n'
        '"gpus-per-node" = 8\n')
    monkeypatch.setenv(SITE_PATH_ENV, str(sites))
    body = "[scaling]\nnum_workers = 2\ncpus_per_worker = 8\ngpus_per_worker = 1\n"
    got = directives(render(tmp_path, body, site="mysite"))
    assert got == ["--job-name=r1", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=8",
                   "--gpus-per-node=2", "--signal=B:USR1@120", "--requeue"]


# --------------------------------------------------------------------------- PBS
PBS_CASES = [
    pytest.param(
        """
        [scaling]
        num_nodes = 2
        workers_per_node = 4
        use_gpu = true
        cpus_per_worker = 8
        mem_per_worker = "16G"
        [scheduler]
        time = "1-02:03:04"
        queue = "workq"
        account = "proj"
        after = "123.server"
        """, [],
        ["-N r1", "-l select=2:ncpus=32:mpiprocs=4:ngpus=4:mem=64gb", "-l place=scatter",
         "-l walltime=26:03:04", "-q workq", "-A proj", "-r y", "-j oe", "-o /scratch/me/runs/r1/logs/",
         "-W depend=afterany:123.server"],
        id="full-request"),
    pytest.param('[scheduler]\ntime = "100:00:00"\n', [],
                 ["-N r1", "-l select=1:ncpus=1:mpiprocs=1", "-l walltime=100:00:00", "-r y",
                  "-j oe", "-o /scratch/me/runs/r1/logs/", "-l place=scatter"],
                 id="walltime-hours-not-wrapped"),
    pytest.param('[scaling]\nnum_workers = 3\nmem_per_worker = "1500M"\n'
                 '[scheduler]\nqueue = "debug"\n', [],
                 ["-N r1", "-l select=1:ncpus=3:mpiprocs=3:mem=4500mb", "-q debug", "-r y",
                  "-j oe", "-o /scratch/me/runs/r1/logs/", "-l place=scatter"],
                 id="queue"),
    pytest.param(
        """
        [scheduler.directives]
        "-J" = "0-9"
        "select:system" = "polaris"
        filesystems = "home:eagle"
        "-k" = "doe"
        "-r" = "n"
        umask = "022"
        """, [],
        ["-N r1", "-l select=1:ncpus=1:mpiprocs=1:system=polaris", "-r n", "-j oe", "-o /scratch/me/runs/r1/logs/",
         "-l place=scatter", "-J 0-9", "-l filesystems=home:eagle", "-k doe",
         "-W umask=022"],
        id="directive-map"),
    pytest.param("", ["scheduler.directives.place=", 'scheduler.directives.-V=true'],
                 ["-N r1", "-l select=1:ncpus=1:mpiprocs=1", "-r y", "-j oe", "-o /scratch/me/runs/r1/logs/", "-V"],
                 id="remove-and-bare-flag"),
]


@pytest.mark.parametrize("body, overrides, expected", PBS_CASES)
def test_pbs_directives(tmp_path, body, overrides, expected):
    script = render(tmp_path, body, site="generic-pbs", overrides=overrides)
    assert directives(script) == expected
    assert script.startswith(HEADER)
    assert "# Submit by hand with:  qsub <this file>" in script
    # PBS starts a job in $HOME: the body goes back to the submission directory first
    body_lines = script.splitlines()
    assert 'cd "$PBS_O_WORKDIR"' in body_lines
    assert body_lines.index('cd "$PBS_O_WORKDIR"') < next(
        i for i, l in enumerate(body_lines) if l.startswith("exec "))


def test_slurm_script_has_no_pbs_cd(tmp_path):
    assert "PBS_O_WORKDIR" not in render(tmp_path, site="generic-slurm")


# --------------------------------------------------------------------------- every site
# A small valid request per packaged site, and the exact directives it gives.
SITE_REQUESTS = {
    "frontier": (
        '[scaling]\nnum_nodes = 1\nworkers_per_node = 8\nuse_gpu = true\n'
        '[scheduler]\naccount = "abc123"\ntime = "01:00:00"\n',
        ["--job-name=r1", "--nodes=1", "--ntasks-per-node=8", "--gpus-per-node=8",
         "--time=01:00:00", "--partition=batch", "--account=abc123",
         "--signal=B:USR1@120", "--requeue", "--network=disable_rdzv_get"]),
    "generic-pbs": (
        '[scaling]\nnum_nodes = 1\nworkers_per_node = 2\n',
        ["-N r1", "-l select=1:ncpus=2:mpiprocs=2", "-r y", "-j oe", "-o /scratch/me/runs/r1/logs/", "-l place=scatter"]),
    "generic-slurm": (
        '[scaling]\nnum_nodes = 1\nworkers_per_node = 2\n',
        ["--job-name=r1", "--nodes=1", "--ntasks-per-node=2", "--signal=B:USR1@120", "--requeue"]),
    "jean-zay": (
        '[scaling]\nnum_nodes = 1\nworkers_per_node = 4\nuse_gpu = true\n'
        '[scheduler]\naccount = "abc@h100"\ntime = "02:00:00"\n',
        ["--job-name=r1", "--nodes=1", "--ntasks-per-node=4", "--cpus-per-task=24",
         "--gpus-per-node=4", "--time=02:00:00", "--account=abc@h100", "--constraint=h100",
         "--signal=B:USR1@120", "--requeue", "--hint=nomultithread"]),
    "juwels-booster": (
        '[scaling]\nnum_nodes = 1\nworkers_per_node = 4\nuse_gpu = true\n'
        '[scheduler]\naccount = "jscproj"\n',
        ["--job-name=r1", "--nodes=1", "--ntasks-per-node=4", "--gpus-per-node=4",
         "--partition=booster", "--account=jscproj", "--signal=B:USR1@120", "--requeue"]),
    "lumi": (
        '[scaling]\nnum_nodes = 1\nworkers_per_node = 8\nuse_gpu = true\n'
        '[scheduler]\naccount = "project_465000001"\ntime = "1-00:00:00"\n',
        ["--job-name=r1", "--nodes=1", "--ntasks-per-node=8", "--gpus-per-node=8",
         "--time=1-00:00:00", "--partition=standard-g", "--account=project_465000001",
         "--signal=B:USR1@120", "--requeue"]),
    "perlmutter": (
        '[scaling]\nnum_nodes = 1\nworkers_per_node = 4\nuse_gpu = true\n'
        '[scheduler]\naccount = "m1234_g"\ntime = "30m"\n',
        ["--job-name=r1", "--nodes=1", "--ntasks-per-node=4", "--cpus-per-task=32",
         "--gpus-per-node=4", "--time=00:30:00", "--account=m1234_g", "--qos=regular",
         "--constraint=gpu", "--signal=B:USR1@120", "--requeue"]),
    "polaris": (
        '[scaling]\nnum_nodes = 1\nworkers_per_node = 4\nuse_gpu = true\n'
        '[scheduler]\naccount = "MyProject"\n',
        ["-N r1", "-l select=1:ncpus=4:mpiprocs=4:ngpus=4:system=polaris",
         "-l walltime=01:00:00", "-q debug", "-A MyProject", "-r y", "-j oe", "-o /scratch/me/runs/r1/logs/",
         "-l filesystems=home:eagle", "-l place=scatter"]),
    "test-cluster": (
        '[scaling]\nnum_nodes = 2\nworkers_per_node = 2\n',
        ["--job-name=r1", "--nodes=2", "--ntasks-per-node=2", "--time=00:10:00",
         "--partition=debug", "--signal=B:USR1@120", "--requeue"]),
}
PACKAGED = sorted(n for n, p in available_sites().items()
                  if os.path.dirname(os.path.abspath(p)) == os.path.abspath(PACKAGE_SITE_DIR))


def test_every_packaged_site_has_a_request_here():
    assert PACKAGED == sorted(SITE_REQUESTS), "add the new site to SITE_REQUESTS"


@pytest.mark.parametrize("site", PACKAGED)
def test_every_packaged_site_loads_and_renders(tmp_path, site):
    body, expected = SITE_REQUESTS[site]
    info = load_site(site)
    assert info.name == site and info.path.startswith(PACKAGE_SITE_DIR)
    spec = load(tmp_path, body, site=site)
    assert spec.site == site and spec.scheduler.kind == info.scheduler
    first = BatchRequest(spec, RUN).materialize()
    second = BatchRequest(load(tmp_path, body, site=site), RUN).materialize()
    assert first == second, "rendering is not byte-stable"
    assert first.startswith(HEADER)
    assert directives(first) == expected
    prefix = "#SBATCH " if info.scheduler == "slurm" else "#PBS "
    assert all(not l.startswith("#SBATCH " if prefix == "#PBS " else "#PBS ")
               for l in first.splitlines())
    # the site's [env] and [setup] reach the script
    for name in spec.env:
        assert any(l.startswith(f"export {name}=") for l in first.splitlines())
    for module in spec.setup.modules:
        assert f"module load {module}" in first.splitlines()
    for command in spec.setup.commands:
        assert command in first.splitlines()
    # no directive sits after the first command: schedulers stop reading them there
    lines = first.splitlines()
    last_directive = max(i for i, l in enumerate(lines) if l.startswith(prefix))
    first_command = next(i for i, l in enumerate(lines)
                         if l.strip() and not l.startswith("#"))
    assert last_directive < first_command


def test_polaris_select_system_comes_from_the_site_file(tmp_path):
    site = load_site("polaris")
    chunk = site.layer["scheduler"]["directives"].get("select:system")
    body, _ = SITE_REQUESTS["polaris"]
    select = next(d for d in directives(render(tmp_path, body, site="polaris"))
                  if d.startswith("-l select="))
    assert (f":system={chunk}" in select) == bool(chunk)


# --------------------------------------------------------------------------- site limits
LIMIT_CASES = [
    pytest.param(
        "lumi", '[scheduler]\npartition = "dev-g"\ntime = "04:00:00"\n', [],
        "scheduler.time", "FILE",
        ["walltime 04:00:00 (4h) is over the limit of 03:00:00 (3h) for partition 'dev-g'"],
        ["ask for less time", "lumi.toml"], id="walltime-over-partition"),
    pytest.param(
        "frontier", '[scheduler]\naccount = "a"\nqos = "debug"\ntime = "3h"\n', [],
        "scheduler.time", "FILE",
        ["walltime 3h (3h) is over the limit of 02:00:00 (2h)", "qos 'debug'"],
        ["frontier.toml"], id="walltime-over-qos"),
    pytest.param(
        "frontier", "", ['scheduler.time="13:00:00"'],
        "scheduler.time", "override 'scheduler.time=\"13:00:00\"'",
        ["over the limit of 12:00:00 (12h) for partition 'batch'"], ["frontier.toml"],
        id="walltime-over-site-partition-via-override"),
    pytest.param(
        "test-cluster", '[scheduler]\ntime = "3h"\n', [],
        "scheduler.time", "FILE", ["over the limit of 02:00:00 (2h)"], ["test-cluster.toml"],
        id="walltime-over-test-cluster"),
    pytest.param(
        "perlmutter", '[scaling]\nuse_gpu = true\n[scheduler]\nconstraint = "cpu"\n', [],
        "scaling.use_gpu", "FILE",
        ["GPUs requested (1 per worker) but constraint 'cpu' has CPU-only nodes"],
        ["set use_gpu = false", "perlmutter.toml"], id="gpu-on-cpu-constraint"),
    pytest.param(
        "perlmutter", "", ["scaling.use_gpu=true", "scheduler.constraint=cpu"],
        "scaling.use_gpu", "override 'scaling.use_gpu=true'",
        ["has CPU-only nodes"], ["perlmutter.toml"], id="gpu-on-cpu-constraint-override"),
    pytest.param(
        "test-cluster", '[scaling]\nuse_gpu = true\n', [],
        "scaling.use_gpu", "FILE", ["site 'test-cluster' has CPU-only nodes"], [],
        id="gpu-on-cpu-partition"),
    pytest.param(
        "perlmutter", '[scaling]\nnum_nodes = 1\nworkers_per_node = 8\nuse_gpu = true\n', [],
        "scaling.workers_per_node", "FILE",
        ["8 workers × 1 GPUs = 8 GPUs per node, but nodes of constraint 'gpu' have 4"],
        ["use fewer workers per node"], id="more-gpus-than-the-node"),
    pytest.param(
        "juwels-booster", '[scaling]\nnum_nodes = 1\nworkers_per_node = 2\ngpus_per_worker = 4\n',
        [], "scaling.workers_per_node", "FILE",
        ["2 workers × 4 GPUs = 8 GPUs per node", "have 4"], [], id="gpus-per-worker-too-many"),
    pytest.param(
        "test-cluster", '[scaling]\nnum_nodes = 3\nworkers_per_node = 1\n', [],
        "scaling.num_nodes", "FILE", ["3 nodes requested", "allows at most 2"],
        ["use fewer nodes", "test-cluster.toml"], id="too-many-nodes"),
    pytest.param(
        "polaris", "", ["scaling.num_nodes=11", "scaling.workers_per_node=1",
                        "scheduler.queue=debug-scaling"],
        "scaling.num_nodes", "override 'scaling.num_nodes=11'",
        ["11 nodes requested, partition 'debug-scaling' allows at most 10"], [],
        id="too-many-nodes-for-queue"),
    pytest.param(
        "polaris", '[scaling]\nnum_nodes = 1\nworkers_per_node = 4\ncpus_per_worker = 16\n', [],
        "scaling.cpus_per_worker", "FILE", ["4 workers × 16 CPUs = 64 CPUs per node", "have 32"],
        [], id="too-many-cpus"),
    pytest.param(
        "perlmutter", '[scaling]\nnum_nodes = 1\nworkers_per_node = 4\nmem_per_worker = "80G"\n'
        '[scheduler]\naccount = "m1"\n', [],
        "scaling.mem_per_worker", "FILE", ["4 workers × 80G is more than the 256G"], [],
        id="too-much-memory"),
    pytest.param(
        "frontier", "", ["scheduler.partition=bach"],
        "scheduler.partition", "override 'scheduler.partition=bach'",
        ["site 'frontier' has no partition 'bach'"],
        ["did you mean 'batch'?", "known: batch, extended"], id="unknown-partition"),
    pytest.param(
        "polaris", '[scheduler]\nqueue = "prodd"\n', [],
        "scheduler.queue", "FILE", ["site 'polaris' has no queue 'prodd'"],
        ["did you mean 'prod'?"], id="unknown-queue"),
    pytest.param(
        "polaris", '[scheduler.directives]\nfilesystems = ""\n', [],
        "scheduler.directives.filesystems", "FILE",
        ["site 'polaris' requires this directive"],
        ["[scheduler.directives] filesystems", "docs.alcf.anl.gov"],
        id="polaris-filesystems-removed"),
    pytest.param(
        "polaris", "", ["scheduler.directives.filesystems="],
        "scheduler.directives.filesystems", "override 'scheduler.directives.filesystems='",
        ["site 'polaris' requires this directive"], [], id="polaris-filesystems-removed-override"),
]


@pytest.mark.parametrize("site, body, overrides, key, where, message, hint", LIMIT_CASES)
def test_site_limits_are_refused_with_key_and_origin(tmp_path, site, body, overrides, key,
                                                     where, message, hint):
    err = config_error(tmp_path, body, site=site, overrides=overrides)
    job = str(tmp_path / "job.toml")
    assert err.message.startswith(f"{key}: "), err.message
    assert err.file == (job if where == "FILE" else where)
    for part in message:
        assert part in err.message, err.message
    for part in hint:
        assert part in (err.hint or ""), err.hint
    assert str(err).startswith(f"{err.file}: {key}: ")


def test_limits_can_be_skipped(tmp_path):
    spec = load_job_spec(write_job(tmp_path, '[scheduler]\ntime = "3h"\n'), [],
                         site="test-cluster", check_limits=False)
    assert spec.scheduler.time == "3h"


def test_unknown_site_lists_the_known_ones(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, site="perlmuter")
    err = info.value
    assert err.message == "site: unknown site 'perlmuter'"
    assert err.file == "command line (--site)"
    assert err.hint.startswith("did you mean 'perlmutter'? known sites: ")
    for name in SITE_REQUESTS:
        assert name in err.hint


def test_unknown_site_named_in_the_job_file(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(f'site = "nosuch"\n[job]\nentrypoint = "{ENTRY}:train_func"\n')
    with pytest.raises(ConfigError) as info:
        load_job_spec(str(path))
    assert info.value.file == str(path)
    assert "unknown site 'nosuch'" in info.value.message
    assert "known sites: frontier" in info.value.hint


@pytest.mark.parametrize("body, overrides, where", [
    pytest.param('[scheduler]\ntime = 60\n', [], "FILE", id="file-int"),
    pytest.param('[scheduler]\ntime = "60"\n', [], "FILE", id="file-string"),
    pytest.param("", ["scheduler.time=60"], "override 'scheduler.time=60'", id="override"),
])
def test_bare_number_walltime_is_refused_with_a_hint(tmp_path, body, overrides, where):
    err = config_error(tmp_path, body, site="test-cluster", overrides=overrides)
    assert err.message.startswith("scheduler.time: walltime ")
    assert "is a bare number, which is ambiguous" in err.message
    assert err.hint == 'write "01:00:00" for one hour, or "60m"'
    assert err.file == (str(tmp_path / "job.toml") if where == "FILE" else where)


def test_walltime_override_in_clock_form(tmp_path):
    script = render(tmp_path, site="generic-slurm", overrides=["scheduler.time=04:00:00"])
    assert "--time=04:00:00" in directives(script)


# --------------------------------------------------------------------------- shell safety
@pytest.mark.parametrize("name", ["../escape", "a/b", "a;b", "a b", "$(id)", ".hidden", "",
                                  "x`id`", "a\nb", "a" * 201])
def test_unsafe_run_names_are_refused(tmp_path, name):
    err = config_error(tmp_path, f"[run]\nname = {json.dumps(name)}\n", site="generic-slurm")
    assert err.message.startswith("run.name: expected a name of letters, digits")
    assert err.file == str(tmp_path / "job.toml")


def test_unsafe_run_name_override_is_named(tmp_path):
    err = config_error(tmp_path, site="generic-slurm", overrides=["run.name=../up"])
    assert err.message.startswith("run.name: ")
    assert err.file == "override 'run.name=../up'"


def test_run_name_with_trailing_newline_is_refused(tmp_path):
    err = config_error(tmp_path, '[run]\nname = "r1\\n"\n', site="generic-slurm")
    assert err.message.startswith("run.name: ")


@pytest.mark.parametrize("value, bad", [
    ("a b", "' '"), ('a"b', "'\"'"), ("a'b", '"\'"'), ("a;b", "';'"), ("$HOME", "'$'"),
    ("a\nb", "'\\n'"), ("a#b", "'#'"), ("a\\b", "'\\\\'"), ("a`b", "'`'"),
])
@pytest.mark.parametrize("key", ["mail-user", "comment"])
def test_unsafe_directive_values_are_refused(tmp_path, key, value, bad):
    toml_value = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    body = f'[scheduler.directives]\n{key} = "{toml_value}"\n'
    err = config_error(tmp_path, body, site="generic-slurm")
    assert err.message.startswith(f"scheduler.directives.{key}: {value!r} holds {bad}")
    assert "cannot go on a directive line safely" in err.message
    assert err.file == str(tmp_path / "job.toml")
    assert "without spaces" in err.hint


def test_unsafe_directive_next_to_site_directives_names_the_job_file(tmp_path):
    err = config_error(tmp_path, '[scheduler.directives]\ncomment = "a b"\n', site="generic-pbs")
    assert err.message.startswith("scheduler.directives.comment: 'a b' holds ' '")
    assert err.file == str(tmp_path / "job.toml")


@pytest.mark.parametrize("body, key", [
    ('[scheduler]\npartition = "a b"\n', "partition"),
    ('[scheduler]\naccount = "x;reboot"\n', "account"),
    ('[scheduler]\nafter = "1 && id"\n', "dependency"),
])
def test_unsafe_scheduler_values_are_refused(tmp_path, body, key):
    err = config_error(tmp_path, body, site="generic-slurm")
    assert err.message.startswith(f"scheduler.directives.{key}: ")


def test_unsafe_pbs_directive_is_refused_naming_the_key(tmp_path):
    err = config_error(tmp_path, site="generic-pbs",
                       overrides=['scheduler.directives."select:system"="a:b c"'])
    assert err.message.startswith("scheduler.directives.select:system: 'a:b c' holds ' '")
    assert err.file == "override 'scheduler.directives.\"select:system\"=\"a:b c\"'"


@pytest.mark.parametrize("key", ["bad key", "x;y", "-", "1abc", "a=b"])
def test_unsafe_directive_keys_are_refused(tmp_path, key):
    err = config_error(tmp_path, f'[scheduler.directives]\n"{key}" = "1"\n', site="generic-slurm")
    assert err.message == f"scheduler.directives.{key}: not a valid option name"


@pytest.mark.parametrize("entry", ['"-W\\n" = "/tmp/x.sh"', 'comment = "x\\n"'])
def test_directive_with_trailing_newline_is_refused(tmp_path, entry):
    err = config_error(tmp_path, f"[scheduler.directives]\n{entry}\n", site="generic-pbs")
    assert err.message.startswith("scheduler.directives.")


def test_unsafe_run_directory_is_refused(tmp_path):
    spec = load(tmp_path, site="generic-slurm")
    with pytest.raises(ConfigError) as info:
        BatchRequest(spec, "/scratch/my runs/r1").materialize()
    assert info.value.message.startswith("run.storage_path: the run directory")


def _hostile_env(marker: str) -> dict:
    return {
        "X": f"$(touch {marker}-dollar)`touch {marker}-tick`",
        "Y": f"a\"b'c\\d $(touch {marker}-y) ${{Q:-`touch {marker}-y2`}}",
        "Z": f"$((1+1)) $(( $(touch {marker}-z) ))",
    }


def _toml_env(env: dict) -> str:
    lines = ["[env]"]
    for k, v in env.items():
        lines.append(f'{k} = "' + v.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return "\n".join(lines) + "\n"


def test_env_values_do_not_run_commands(tmp_path):
    marker = f"/tmp/pwned-{uuid.uuid4().hex}"
    env = _hostile_env(marker)
    script = render(tmp_path, _toml_env(env) + 'H = "$HOME/data"\n', site="generic-slurm")
    exports = export_lines(script)
    assert [l.split("=", 1)[0] for l in exports] == [
        "export H", "export X", "export Y", "export Z"]
    shell = "\n".join(exports) + '\nprintf "%s\\0" "$H" "$X" "$Y" "$Z"\n'
    out = subprocess.run(["bash", "-c", shell], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"], "HOME": "/home/someone"})
    assert out.returncode == 0, out.stderr
    h, x, y, z = out.stdout.split("\0")[:4]
    leftovers = [p for p in os.listdir("/tmp") if p.startswith(os.path.basename(marker))]
    assert leftovers == [], "a command in an [env] value ran"
    # only plain $NAME / ${NAME} expand: ${Q:-word} comes out exactly as written
    assert (x, y, z) == (env["X"], env["Y"], env["Z"])
    assert h == "/home/someone/data"       # $VAR still expands (site configs rely on it)


@pytest.mark.parametrize("trigger", ["${A@P}", "$[A]"])
def test_env_values_cannot_reexpand_each_other(tmp_path, trigger):
    marker = f"/tmp/pwned-{uuid.uuid4().hex}"
    env = {"A": f"a[$(touch {marker})]" if trigger.startswith("$[") else f"$(touch {marker})",
           "B": trigger}
    script = render(tmp_path, _toml_env(env), site="generic-slurm")
    subprocess.run(["bash", "-c", "\n".join(export_lines(script))], capture_output=True)
    created = os.path.exists(marker)
    if created:
        os.remove(marker)
    assert not created


# --------------------------------------------------------------------------- the spec heredoc
def _heredoc_through_bash(script: str) -> str:
    """Run the script's last statement with ``cat`` in place of the supervisor: what bash
    feeds it on stdin."""
    lines = script.splitlines(keepends=True)
    start = max(i for i, l in enumerate(lines) if l.startswith("exec ")
                and " -m hpctrain.cli.batch " in l)
    head = lines[start]
    assert head.rstrip("\n").endswith(f"<<'{EOF_MARK}'"), head
    assert lines[-1] == EOF_MARK + "\n" or lines[-1] == EOF_MARK, "the heredoc ends the script"
    text = f"cat <<'{EOF_MARK}'\n" + "".join(lines[start + 1:])
    out = subprocess.run(["bash", "-c", text], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("site, extra", [
    ("generic-slurm", ""),
    ("generic-pbs", ""),
    ("polaris", '[scheduler]\naccount = "p"\n'),
    ("perlmutter", '[scheduler]\naccount = "p"\n'),
])
def test_embedded_spec_is_the_resolved_spec(tmp_path, site, extra):
    body = extra + textwrap.dedent("""
    [env]
    TRICKY = "$(echo no) `echo no` \\\\ \\" ' $HOME"
    [config]
    note = "line1\\nline2 $(x) EOF"
    quote = "it's"
    nested = { a = [1, 2.5, "three"], b = { c = true } }
    """)
    spec = load(tmp_path, body, site=site)
    script = BatchRequest(spec, RUN).materialize()
    embedded = _heredoc_through_bash(script)
    assert embedded == spec.to_toml()
    # and it loads back into an equal spec
    path = tmp_path / "embedded.toml"
    path.write_text(embedded)
    again = load_job_spec(str(path))
    assert again == spec


def test_whole_script_runs_and_feeds_the_spec_to_the_supervisor(tmp_path):
    """Run the rendered script for real with a stand-in interpreter: the set-up lines, the
    exports and the exec line work under bash, hostile [env] values run nothing, and the
    supervisor gets the run directory and exactly the resolved spec on stdin."""
    marker = f"/tmp/pwned-{uuid.uuid4().hex}"
    capture = tmp_path / "capture"
    stub = tmp_path / "fake-python"
    stub.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$CAPTURE.args"\n'
                    'cat > "$CAPTURE.stdin"\nprintf "%s" "$X" > "$CAPTURE.x"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    run_path = str(tmp_path / "runs" / "r1")
    body = _toml_env({"X": f"$(touch {marker})`touch {marker}`"})
    spec = load(tmp_path, body, site="generic-slurm")
    script = BatchRequest(spec, run_path, python=str(stub)).materialize()
    job = tmp_path / "job.sh"
    job.write_text(script)
    out = subprocess.run(["bash", str(job)], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"], "CAPTURE": str(capture),
                              "SLURM_JOB_ID": "777"}, cwd=str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert not os.path.exists(marker)
    assert (tmp_path / "capture.x").read_text() == f"$(touch {marker})`touch {marker}`"
    assert (tmp_path / "capture.stdin").read_text() == spec.to_toml()
    args = (tmp_path / "capture.args").read_text().splitlines()
    assert args[:4] == ["-m", "hpctrain.cli.batch", run_path, "--script"]
    assert args[4] == str(job)


def test_spec_holding_the_heredoc_marker_is_refused(tmp_path):
    err = config_error(tmp_path, f'[config]\nx = "{EOF_MARK}"\n', site="generic-slurm")
    assert EOF_MARK in err.message


# --------------------------------------------------------------------------- the CLI
def hpctrain(*args, cwd):
    return subprocess.run([sys.executable, "-m", "hpctrain.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def cli_job(tmp_path) -> str:
    return write_job(tmp_path, f'[run]\nname = "r1"\nstorage_path = "{tmp_path}/runs"\n')


@pytest.mark.parametrize("args, expected", [
    pytest.param(["--site", "nosuch"], ["unknown site 'nosuch'", "known sites:"], id="site"),
    pytest.param(["--site", "test-cluster", "--set", "scheduler.time=60"],
                 ["bare number", '"01:00:00"'], id="bare-walltime"),
    pytest.param(["--site", "test-cluster", "--set", "scaling.num_nodes=3",
                  "--set", "scaling.workers_per_node=1"],
                 ["scaling.num_nodes: 3 nodes requested", "use fewer nodes"], id="nodes"),
    pytest.param(["--site", "frontier", "--set", "scheduler.partition=bach"],
                 ["no partition 'bach'", "did you mean 'batch'?"], id="partition"),
    pytest.param(["--site", "polaris", "--set", "scheduler.directives.filesystems="],
                 ["scheduler.directives.filesystems", "requires this directive"],
                 id="polaris-filesystems"),
    pytest.param(["--site", "generic-slurm", "--set", 'run.name="a;b"'],
                 ["run.name", "the run name becomes a directory"], id="run-name"),
    pytest.param(["--site", "generic-slurm", "--set", 'scheduler.directives.comment="a b"'],
                 ["scheduler.directives.comment", "without spaces"], id="directive"),
    pytest.param(["--set", "scaling.num_workers=2"],
                 [f'scheduler.kind: expected {describe(scheduler_names(batch_only=True))} to render',
                  'got "local"',
                  "--site NAME"], id="local"),
])
def test_render_cli_bad_input_exits_2_and_prints_nothing(tmp_path, args, expected):
    job = cli_job(tmp_path)
    p = hpctrain("render", job, *args, cwd=str(tmp_path))
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    assert "error:" in p.stderr and "HINT:" in p.stderr
    for part in expected:
        assert part in p.stderr, p.stderr
    assert not os.path.exists(tmp_path / "runs"), "render created the run directory"


def test_render_cli_prints_the_script_and_creates_nothing(tmp_path):
    job = cli_job(tmp_path)
    p = hpctrain("render", job, "--site", "test-cluster", cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(HEADER)
    assert directives(p.stdout) == ["--job-name=r1", "--nodes=1", "--ntasks-per-node=1",
                                    "--time=00:10:00", "--partition=debug",
                                    "--signal=B:USR1@120", "--requeue"]
    assert f"#   hpctrain render {job} --site test-cluster --set run.name=r1\n" in p.stdout
    again = hpctrain("render", job, "--site", "test-cluster", cwd=str(tmp_path))
    assert again.stdout == p.stdout
    dry = hpctrain("submit", job, "--site", "test-cluster", "--dry-run", cwd=str(tmp_path))
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == p.stdout
    assert "dry run: would write" in dry.stderr and "`sbatch`" in dry.stderr
    assert not os.path.exists(tmp_path / "runs")
