"""The docs run as written: each page's snippets, in a fresh venv holding only the install
the page names (``docs_snippets.page_install``), twice in a row, each time in a fresh empty
working directory, with one home directory for both runs (a user running the page twice:
the default storage path ``~/hpctrain_results`` keeps the first run).

One venv per distinct install among the pages covered here (``python3 -m venv``, no system
site packages; ``pip install --no-compile '<a copy of the checkout>[extras]'``: a module is compiled when
first imported, not all of torch at install; the pip cache is kept between CI runs);
``torch`` is pinned to ``$HPCTRAIN_TEST_TORCH`` (``torch==2.13.0``, the CPU build this
machine has on disk) so that pip takes no CUDA build. Pages whose install is another extra
run in the development environment instead (tests/unit/test_docs.py), as do the pages of
``MAIN_ENV_ONLY``."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
from docs_snippets import (FRESH_INSTALLS, fresh_venv_pages, failed_block, install_extras,
                           page_install, read_page, run_blocks, runnable)
from helpers import ROOT

# one xdist worker runs them all: one venv per install, built once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docs-fresh-venv")]

TORCH = os.environ.get("HPCTRAIN_TEST_TORCH", "torch==2.13.0")
PIP_CACHE = os.environ.get("PIP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                             "pip")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A copy of what the package is built from: pip builds in its source tree (build/,
    *.egg-info), which must neither be the checkout nor hold a stale earlier build."""
    where = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(os.path.join(ROOT, name), where / name)
    # the package and the folders the wheel carries inside it (setup.py's build_py)
    for name in ("hpctrain", "templates", "site-configs"):
        shutil.copytree(os.path.join(ROOT, name), where / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return str(where)


@pytest.fixture(scope="module")
def venvs(tmp_path_factory, source):
    """install -> the python of a fresh venv holding it (made on first use)."""
    made = {}

    def python_for(install):
        if install not in made:
            where = str(tmp_path_factory.mktemp("venv-" + install.replace("[", "-")
                                                .replace("]", "").replace(",", "-")))
            began = time.monotonic()
            subprocess.run([sys.executable, "-m", "venv", where], check=True)
            python = os.path.join(where, "bin", "python")
            extras = install_extras(install)
            target = source + (f"[{','.join(extras)}]" if extras else "")
            pins = [TORCH] if "torch" in extras else []
            p = subprocess.run([python, "-m", "pip", "install", "-q", "--cache-dir", PIP_CACHE,
                                "--disable-pip-version-check", "--no-compile", target, *pins],
                               capture_output=True, text=True, timeout=600,
                               env={k: v for k, v in os.environ.items()
                                    if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")})
            assert p.returncode == 0, f"pip install {install} failed:\n{p.stdout}\n{p.stderr}"
            print(f"venv with {install}: {time.monotonic() - began:.0f} s")
            made[install] = python
        return made[install]

    return python_for


def _env(python, home):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "HPCTRAIN_STORAGE_PATH", "HPCTRAIN_SITE",
                        "XDG_CONFIG_HOME", "VIRTUAL_ENV", "PYTHONHOME")}
    bindir = os.path.dirname(python)
    env.update(HOME=home, VIRTUAL_ENV=os.path.dirname(bindir), OMP_NUM_THREADS="1",
               PATH=bindir + os.pathsep + env.get("PATH", ""))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the venv's modules compile once, when imported
    return env


def run_twice(page, python, tmp_path):
    """Runs ``page``'s snippets twice with ``python``; None, or what failed (page:line, which
    run, the output)."""
    home = tmp_path / "home"
    home.mkdir()
    for attempt in ("first", "second"):
        p = run_blocks(runnable(page), str(tmp_path / attempt), _env(python, str(home)),
                       python=python)
        if p.returncode:
            return (f"{failed_block(p.stdout)} failed on the {attempt} run of {page}'s snippets "
                    f"in a fresh venv with only {page_install(read_page(page), page)} (exit "
                    f"{p.returncode}):\n{p.stdout[-4000:]}\n{p.stderr[-6000:]}")
    return None


@pytest.mark.parametrize("page", fresh_venv_pages())
def test_page_runs_twice_in_a_fresh_venv(page, venvs, tmp_path):
    install = page_install(read_page(page), page)
    assert install in FRESH_INSTALLS
    failure = run_twice(page, venvs(install), tmp_path)
    assert failure is None, failure


def test_a_fixed_run_name_fails_the_second_run_and_is_named(venvs, tmp_path):
    """What the test above catches, on the README's snippet as it was: a fixed run name in
    the default storage path is refused the second time, and the failure names the block."""
    text = read_page("README.md")
    assert "RunConfig(verbose=0)" in text
    page = tmp_path / "README-fixed-name.md"
    page.write_text(text.replace("RunConfig(verbose=0)", 'RunConfig(name="readme", verbose=0)'),
                    encoding="utf-8")
    line = next(b["line"] for b in runnable(str(page)) if b["kind"] == "python")
    failure = run_twice(str(page), venvs("hpctrain[torch]"), tmp_path)
    assert failure is not None
    first_line = failure.split("\n")[0]
    assert first_line.startswith(f"{page}:{line} failed on the second run of {page}'s snippets "
                                 f"in a fresh venv with only hpctrain[torch]"), first_line
    assert "a finished run named 'readme' already exists" in failure
