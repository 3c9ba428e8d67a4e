"""The center-wide install as users get it (issue 31): hpctrain's wheel built from this
checkout, installed by root into a root-owned venv made with ``--system-site-packages``
(torch comes from the system, as from a center's module), a site file in the center's
sites directory, an Lmod-like ``HPCTRAIN_SITE``, and a center config
(``/etc/hpctrain/config.toml``, here through ``HPCTRAIN_CENTER_CONFIG``) whose
``storage_path = "$SCRATCH/hpctrain_runs"`` is the center-wide default. The unprivileged
test user ``hpct-alice`` runs the README's quick start, submits to the test Slurm cluster
and finds her runs by name; then makes her own venv over the module's and trains with a
package of her own. Needs root, the test users and the test Slurm cluster."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import pytest

from helpers import ROOT, copy_checkout
from multiuser import NEEDS_USERS, Machine, have_users

pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm"),
              pytest.mark.skipif(not have_users(), reason=NEEDS_USERS)]

ALICE = "hpct-alice"
SITE_PACKAGES = os.path.relpath(sysconfig.get_path("purelib"), sys.prefix)

# the README's "same from Python" quick start, as a user types it
QUICK_START = """
import hpctrain
from hpctrain import RunConfig, ScalingConfig
from hpctrain.torch import TorchTrainer

def train_func(config):
    for epoch in range(config["epochs"]):
        hpctrain.report({"epoch": epoch, "loss": 1.0 / (epoch + 1)})

result = TorchTrainer(train_func, train_loop_config={"epochs": 3},
                      scaling_config=ScalingConfig(num_workers=2),
                      run_config=RunConfig(name="readme", verbose=0)).fit()
print(result.metrics["loss"], result.path)
"""

MISSING_MPI4PY = """
import sys
sys.modules["mpi4py"] = None  # not installed
from hpctrain.backends import check_installed
try:
    check_installed("mpi")
except ImportError as e:
    print(e)
"""

TRAIN = """
import hpctrain

def train_func(config):
    extra = {}
    if config.get("tools"):
        import alice_tools  # alice's own package, from her venv
        extra = {"scale": alice_tools.SCALE}
    for epoch in range(2):
        hpctrain.report({"epoch": epoch, "loss": 1.0 / (epoch + 1), **extra})
    ctx = hpctrain.get_context()
    print(f"rank {ctx.get_world_rank()} on node {ctx.get_node_rank()} imports hpctrain from "
          f"{hpctrain.__file__}", flush=True)
"""

JOB = """
[job]
entrypoint = "train.py:train_func"
[run]
name = "{name}"
[scaling]
num_nodes = 2
workers_per_node = 1
[scheduler]
time = "00:05:00"
[config]
tools = {tools}
"""


@pytest.fixture(scope="module")
def center(tmp_path_factory):
    """``(machine, venv, variables of a user who loaded the module)``."""
    import tempfile

    base = tempfile.mkdtemp(prefix="hpct-center-", dir="/tmp")
    try:
        machine = Machine(base)
        # the wheel, built from a copy of the checkout's files that git does not ignore (no
        # build/ left in the checkout)
        src, wheels = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheels")
        copy_checkout(src)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "--no-build-isolation", "-q", "-w", str(wheels), str(src)], check=True)
        wheel, = [os.path.join(wheels, w) for w in os.listdir(wheels) if w.endswith(".whl")]
        # root's install: /opt/hpctrain/<version> over the system's torch, not editable
        venv = os.path.join(base, "opt", "hpctrain", "0.1.0")
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                       check=True)
        if sys.prefix != sys.base_prefix:
            # the suite runs in a venv of its own (scripts/test_env.py): it stands for the
            # center's module Python, whose site-packages (torch, hpctrain's dependencies) a
            # venv made from a venv does not see; one .pth line adds them as a site directory
            with open(os.path.join(venv, SITE_PACKAGES, "center-python.pth"), "w") as f:
                f.write(f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})\n")
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "--no-deps",
                        "--no-index", wheel], check=True)
        etc = os.path.join(base, "etc", "hpctrain")
        os.makedirs(os.path.join(etc, "sites"))
        with open(os.path.join(ROOT, "site-configs", "test-cluster.toml")) as f:
            site = f.read().replace('name = "test-cluster"', 'name = "mycluster"')
        with open(os.path.join(etc, "sites", "mycluster.toml"), "w") as f:
            f.write(site)
        with open(os.path.join(etc, "config.toml"), "w") as f:
            f.write('storage_path = "$SCRATCH/hpctrain_runs"   # every user\'s runs\n')
        for d in (os.path.join(base, "opt"), etc):
            subprocess.run(["chmod", "-R", "go-w,a+rX", d], check=True)
        scratch = os.path.join(machine.scratch, ALICE)
        os.mkdir(scratch)
        shutil.chown(scratch, ALICE, ALICE)
        loaded = {"PATH": f"{venv}/bin:{os.environ['PATH']}", "PYTHONPATH": None,
                  "HPCTRAIN_SITE": "mycluster",                      # the module's setenv
                  "HPCTRAIN_SITE_PATH": os.path.join(etc, "sites"),  # /etc/hpctrain/sites
                  "HPCTRAIN_CENTER_CONFIG": os.path.join(etc, "config.toml"),
                  "SCRATCH": scratch}
        yield machine, venv, loaded
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_alice(center, *args, program=None, code=None, timeout=300):
    machine, venv, loaded = center
    p = machine.run(ALICE, code or "", args=list(args) if args else None,
                    program=program or os.path.join(venv, "bin", "hpctrain"), env=loaded,
                    timeout=timeout)
    assert p.returncode == 0, f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


def write(machine, name, text):
    path = os.path.join(machine.home(ALICE), name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    shutil.chown(path, ALICE, ALICE)
    return path


def test_the_center_install_as_a_user_gets_it(center):
    machine, venv, loaded = center
    assert os.stat(venv).st_uid == 0 and not os.stat(venv).st_mode & 0o022
    python = os.path.join(venv, "bin", "python")
    runs = os.path.join(loaded["SCRATCH"], "hpctrain_runs")
    # the quick start, from the module's Python: its run under the center's storage path
    out = as_alice(center, program=python, code=QUICK_START)
    assert out.strip() == f"0.3333333333333333 {runs}/readme"
    # a batch job: the module's site and the center's storage path, no --site, no path
    write(machine, "train.py", TRAIN)
    write(machine, "job.toml", JOB.format(name="c1", tools="false"))
    out = as_alice(center, "submit", "job.toml", "--follow")
    assert f"run FINISHED: {runs}/c1" in out
    # ... found by name by every command that finds runs
    assert "FINISHED" in as_alice(center, "results", "c1")
    status = as_alice(center, "status", "c1")
    assert f"run c1: FINISHED  ({runs}/c1)" in status and "COMPLETED" in status
    site_packages = os.path.join(venv, SITE_PACKAGES, "hpctrain", "__init__.py")
    assert as_alice(center, "logs", "c1").strip() == \
        f"rank 0 on node 0 imports hpctrain from {site_packages}"
    assert "FINISHED" in as_alice(center, "results", "readme")
    listed = sorted(l.split("\t")[:3] for l in as_alice(center, "list").splitlines())
    assert listed == [["c1", "run", "FINISHED"], ["readme", "run", "FINISHED"]]
    # a missing framework's HINT: the packages' own names, and a venv of her own
    hint = as_alice(center, program=python, code=MISSING_MPI4PY)
    assert hint.splitlines()[-1] == (
        f"HINT: {venv} is not yours to change (a center-wide install): make a venv of your "
        "own over it (docs/sites.md, 'Your own packages') and pip install mpi4py there (built "
        "against the job's MPI: load the MPI module first)")
    sites = as_alice(center, "sites")
    assert f"storage_path │ {runs}" in sites and loaded["HPCTRAIN_CENTER_CONFIG"] in sites
    assert f"center config: {loaded['HPCTRAIN_CENTER_CONFIG']}\n" in sites


def test_a_users_venv_over_the_modules_venv(center):
    """docs/sites.md's recipe: ``python -m venv --system-site-packages`` from the module's
    Python, one ``.pth`` line adding the module's site-packages as a site directory (a venv
    made from a venv sees the *base* Python's packages, not the module's; a site directory's
    own ``.pth`` files count too), then the user's own packages;
    ``python -m hpctrain submit`` from that venv runs the ranks with it."""
    machine, venv, loaded = center
    pkg = os.path.join(machine.home(ALICE), "alice-tools")
    os.makedirs(os.path.join(pkg, "alice_tools"))
    write(machine, "alice-tools/pyproject.toml", """
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "alice-tools"
        version = "1.0"
        """)
    write(machine, "alice-tools/alice_tools/__init__.py", "SCALE = 3\n")
    subprocess.run(["chown", "-R", f"{ALICE}:", pkg], check=True)
    write(machine, "venv.sh", """
        set -e
        python -m venv --system-site-packages --without-pip ~/venvs/mywork
        purelib='import sysconfig; print(sysconfig.get_path("purelib"))'
        echo "import site; site.addsitedir('$(python -c "$purelib")')" \\
            > "$(~/venvs/mywork/bin/python -c "$purelib")/hpctrain-module.pth"
        ~/venvs/mywork/bin/python -m pip install -q --no-deps --no-index \\
            --no-build-isolation ./alice-tools
        """)
    as_alice(center, "venv.sh", program="/bin/bash")
    mine = os.path.join(machine.home(ALICE), "venvs", "mywork", "bin", "python")
    write(machine, "train.py", TRAIN)
    write(machine, "tools.toml", JOB.format(name="t1", tools="true"))
    out = as_alice(center, "-m", "hpctrain", "submit", "tools.toml", "--follow", program=mine)
    assert "final metrics: epoch=1, loss=0.5, scale=3" in out, out
    site_packages = os.path.join(venv, SITE_PACKAGES, "hpctrain", "__init__.py")
    assert as_alice(center, "logs", "t1").strip() == \
        f"rank 0 on node 0 imports hpctrain from {site_packages}"
