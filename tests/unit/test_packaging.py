"""The package's metadata: one version source (``hpctrain/_version.py``), read by the
build, by ``hpctrain.__version__`` and by ``hpctrain --version`` alike."""
import os
import subprocess
import sys
import tomllib

import hpctrain
from helpers import ROOT


def test_the_version_has_one_source():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    assert "version" not in project["project"]           # no second copy to forget
    assert project["project"]["dynamic"] == ["version"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "hpctrain._version.__version__"
    from hpctrain._version import __version__
    assert hpctrain.__version__ == __version__
    p = subprocess.run([sys.executable, "-m", "hpctrain", "--version"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, PYTHONPATH=ROOT))
    assert __version__ in p.stdout + p.stderr
