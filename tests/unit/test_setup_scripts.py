"""The test command's set-up steps (issue 40): each either succeeds or says why it stopped,
and the container image finds Debian's mirror however apt's sources are written."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")
sys.path.insert(0, SCRIPTS)
import test_env  # noqa: E402  (scripts/ is not a package)

DEB822 = """\
Types: deb
URIs: http://deb.example.org/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://deb.example.org/debian-security
Suites: bookworm-security
Components: main
"""
ONE_LINE = """\
# deb http://commented.example.org/debian bookworm main
deb http://security.example.org/debian-security bookworm-security main
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://one.example.org/debian bookworm main
"""


def mirror(*files):
    p = subprocess.run(["bash", os.path.join(SCRIPTS, "container-image.sh"), "mirror", *files],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_the_mirror_from_deb822_sources_only(tmp_path):
    (tmp_path / "debian.sources").write_text(DEB822)
    assert mirror(str(tmp_path / "debian.sources")) == "http://deb.example.org/debian"


def test_the_mirror_from_one_line_sources_only(tmp_path):
    (tmp_path / "sources.list").write_text(ONE_LINE)
    assert mirror(str(tmp_path / "sources.list")) == "http://one.example.org/debian"


def test_the_mirror_from_both_kinds(tmp_path):
    (tmp_path / "sources.list").write_text(ONE_LINE)
    (tmp_path / "debian.sources").write_text(DEB822)
    assert mirror(str(tmp_path / "sources.list"),
                  str(tmp_path / "debian.sources")) == "http://one.example.org/debian"


def test_no_mirror_prints_nothing_and_the_build_says_why(tmp_path):
    (tmp_path / "empty.list").write_text("# nothing\n")
    assert mirror(str(tmp_path / "empty.list")) == ""
    with open(os.path.join(SCRIPTS, "container-image.sh")) as f:
        assert "no Debian mirror in apt's sources" in f.read()


@pytest.mark.parametrize("name", ["slurm-cluster.sh", "pbs-server.sh", "s3-server.sh",
                                  "test-users.sh", "container-image.sh", "install-horovod.sh",
                                  "fresh-machine.sh", "test.sh"])
def test_every_set_up_script_names_the_line_that_failed(name, tmp_path):
    """``set -E`` and an ERR trap that prints the line: a step cannot stop without a word
    (the container script once ended silently inside a ``$(...)``)."""
    with open(os.path.join(SCRIPTS, name)) as f:
        text = f.read()
    assert re.search(r"^set -Eeuo pipefail$", text, re.M), name
    assert re.search(r"^trap '.*failed at line \$LINENO: \$BASH_COMMAND.*' ERR$", text, re.M), name


def test_a_failing_command_inside_a_substitution_is_named(tmp_path):
    """What the ERR trap buys: the old container script's failure mode, with the trap."""
    script = tmp_path / "s.sh"
    script.write_text("set -Eeuo pipefail\n"
                      "trap 'echo \"failed at line $LINENO: $BASH_COMMAND\" >&2' ERR\n"
                      "x=\"$(grep -h nothing /nonexistent/file | head -1)\"\necho never\n")
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert p.returncode != 0 and "never" not in p.stdout
    assert "failed at line" in p.stderr and "grep -h nothing" in p.stderr


def test_the_constraints_pin_every_package_exactly():
    with open(test_env.CONSTRAINTS) as f:
        pinned = test_env.pins(f.read())
    assert len(pinned) > 50
    # torch without a local label: the CPU build where pip has one on disk, PyPI's elsewhere
    assert "+" not in pinned["torch"]
    for name in ("pytest", "tensorflow-cpu", "deepspeed", "lightning", "moto", "xgboost-cpu"):
        assert name in pinned, name
    assert "hpctrain" not in pinned


def test_hpctrain_test_torch_replaces_the_torch_pin(monkeypatch):
    monkeypatch.setenv("HPCTRAIN_TEST_TORCH", "torch==2.14.1")
    assert test_env.pins(test_env.constraints_text())["torch"] == "2.14.1"
    monkeypatch.setenv("HPCTRAIN_TEST_TORCH", "torch>=2")
    with pytest.raises(SystemExit):
        test_env.constraints_text()


def test_xdist_keeps_a_group_on_one_worker(tmp_path):
    """scripts/test.sh's ``-n 2 --dist loadgroup`` runs the tests of one cluster one after
    another on one worker (tests/conftest.py marks them with their group). pytest 9.2.0 with
    pytest-xdist 3.8 lost the groups: a pin that brings that back fails here."""
    pytest.importorskip("xdist")
    (tmp_path / "conftest.py").write_text(
        "import pytest\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_collection_modifyitems(config, items):\n"
        "    for item in items:\n"
        "        item.add_marker(pytest.mark.xdist_group('cluster'))\n")
    (tmp_path / "test_group.py").write_text(
        "import os, pytest\n"
        "@pytest.mark.parametrize('i', range(8))\n"
        "def test_one(i):\n"
        "    with open(os.path.join(os.path.dirname(__file__), 'workers'), 'a') as f:\n"
        "        f.write(os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                        "--dist", "loadgroup", str(tmp_path)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    workers = (tmp_path / "workers").read_text().split()
    assert len(workers) == 8 and len(set(workers)) == 1, workers
