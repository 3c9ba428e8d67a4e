"""The package's metadata: one version source (``hpctrain/_version.py``), read by the
build, by ``hpctrain.__version__`` and by ``hpctrain --version`` alike; and the frameworks
as lower bounds, never exact pins (a center installs hpctrain over the frameworks its
modules provide)."""
import os
import re
import subprocess
import sys
import tomllib

import hpctrain
from helpers import ROOT

FRAMEWORKS = ("torch", "tensorflow", "tensorflow-cpu", "tf-keras")


def _project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_the_version_has_one_source():
    project = _project()
    assert "version" not in project["project"]           # no second copy to forget
    assert project["project"]["dynamic"] == ["version"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "hpctrain._version.__version__"
    from hpctrain._version import __version__
    assert hpctrain.__version__ == __version__
    p = subprocess.run([sys.executable, "-m", "hpctrain", "--version"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, PYTHONPATH=ROOT))
    assert __version__ in p.stdout + p.stderr


def test_the_frameworks_are_lower_bounds_not_pins():
    seen = {}
    for extra, requirements in _project()["project"]["optional-dependencies"].items():
        for req in requirements:
            name = re.match(r"[A-Za-z0-9_.-]+", req).group(0)
            if name in FRAMEWORKS:
                seen[f"{extra}: {req}"] = "==" not in req and ">=" in req
    assert seen and all(seen.values()), seen
