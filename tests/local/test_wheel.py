"""The wheel as a center installs it (issue 41): ``templates/`` and ``site-configs/`` sit at
the repository's top level, and the wheel carries them inside the package, where an
installed hpctrain finds them. A job rendered for a site from the installed wheel is the job
the checkout renders."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from helpers import ROOT, copy_checkout

pytestmark = pytest.mark.slow

TRAIN = "def train_func(config):\n    pass\n"
JOB = '[job]\nentrypoint = "train.py:train_func"\n[run]\nname = "w1"\nstorage_path = "{runs}"\n'


def render(job_dir, env):
    return subprocess.run([sys.executable, "-m", "hpctrain", "render", "job.toml", "--site",
                           "perlmutter", "--set", "scheduler.account=m1234"],
                          capture_output=True, text=True, cwd=job_dir, env=env, timeout=120)


def test_the_installed_wheel_carries_the_templates_and_site_configs_and_renders_a_job(tmp_path):
    src, wheels, target = tmp_path / "src", tmp_path / "wheels", tmp_path / "site-packages"
    copy_checkout(src)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(wheels), str(src)], check=True, timeout=600)
    wheel, = wheels.glob("hpctrain-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("templates", "site-configs"):
        shipped = sorted(os.listdir(os.path.join(ROOT, folder)))
        assert shipped, folder
        assert [n for n in shipped if f"hpctrain/{folder}/{n}" not in names] == []
    assert not [n for n in names if n.startswith(("templates/", "site-configs/"))]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(target), str(wheel)], check=True, timeout=300)

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "train.py").write_text(TRAIN)
    (job_dir / "job.toml").write_text(JOB.format(runs=tmp_path / "runs"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCTRAIN_")}
    installed = dict(env, PYTHONPATH=str(target))
    where = subprocess.run([sys.executable, "-c", "import hpctrain.sites as s; "
                            "print(s.__file__); print(s.PACKAGE_SITE_DIR)"],
                           capture_output=True, text=True, cwd=job_dir, env=installed,
                           check=True).stdout.split()
    assert where == [str(target / "hpctrain" / "sites.py"),
                     str(target / "hpctrain" / "site-configs")]
    from_wheel, from_checkout = render(job_dir, installed), render(job_dir, env)
    assert from_wheel.returncode == 0, from_wheel.stderr
    assert from_checkout.returncode == 0, from_checkout.stderr
    assert "#SBATCH --qos=regular" in from_wheel.stdout  # perlmutter.toml's [scheduler]
    assert "-m hpctrain.cli.batch" in from_wheel.stdout  # templates/_body.sh.j2
    assert from_wheel.stdout == from_checkout.stdout
    assert not (tmp_path / "runs").exists()
