#!/usr/bin/env python3
"""The Python environment the test suite runs in: a venv of its own (no system site packages),
built from the versions the project pins for its tests (``tests/constraints.txt``), so that what
the user installed before, or a new release on PyPI, cannot change what CI tests.

    python3 scripts/test_env.py ensure   build it if missing or stale (once), print its path
    python3 scripts/test_env.py check    does the built one hold the pinned versions? (exit 1 if not)
    python3 scripts/test_env.py lock     resolve the pins again, on purpose, into tests/constraints.txt

``scripts/test.sh`` calls ``ensure`` and runs everything after it (the set-up scripts that need
Python, pytest) with that venv first on ``PATH``.

Where: ``$HPCTRAIN_TEST_VENV`` (default ``~/.cache/hpctrain/test-venv``). It is built again from
scratch whenever its key changes: the constraints (after the torch override below), the extras,
the base Python's version. A half-built one has no stamp and is built again. Two test commands at
once wait for each other (a lock file beside it).

torch: the constraints pin ``torch==<version>`` without a local label, so pip takes the CPU build
where its configuration offers one (a ``find-links`` wheel directory, as on the project's CI
machines) and PyPI's default (CUDA) build elsewhere; Horovod's and DeepSpeed's builds work with
either (scripts/install-horovod.sh builds for the CPU unless asked for GPU operations).
``HPCTRAIN_TEST_TORCH`` (a requirement, e.g. ``torch==2.14.1``) replaces the pin: the same suite
against another torch, in a venv of its own (the key changes).

Standard library only: it runs on the machine's own Python before anything is installed.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONSTRAINTS = os.path.join(ROOT, "tests", "constraints.txt")
# what the suite needs: the project's extras (pyproject.toml) ...
EXTRAS = "torch,tensorflow,mpi,lightning,huggingface,deepspeed,lightgbm,dev"
# ... and what no extra names: XGBoost's CPU-only build (the `xgboost` wheel also pulls CUDA's
# NCCL, ~300 MB, that CPU tests do not use); what Horovod imports at run time (its own
# requirements minus the frameworks: Horovod itself is built by scripts/install-horovod.sh)
MORE = ["xgboost-cpu", "cloudpickle", "psutil", "pyyaml", "packaging"]
#: Releases a new resolution must not take, and why (`lock` holds them back and says so).
HELD = {"pytest": ("<9.2", "pytest 9.2.0 breaks pytest-xdist 3.8's --dist loadgroup (every test "
                   "its own group: the\n# cluster tests ran on both workers at once); "
                   "tests/unit/test_setup_scripts.py checks it")}
STAMP = ".hpctrain-test-env"
HEADER = """\
# The versions the test suite runs with (scripts/test_env.py builds its venv from them).
# Updated on purpose, never by a test run: `python3 scripts/test_env.py lock` resolves the
# project's extras again in a new venv and writes this file; review the diff, then commit.
# torch is pinned without its local label (+cpu): pip takes the CPU build where its
# configuration offers one, PyPI's default (CUDA) build elsewhere.
# Resolved on {when} with Python {python} on {machine}.
"""


def say(*words: object) -> None:
    print("[test-env]", *words, file=sys.stderr, flush=True)


def die(*words: object) -> None:
    say("error:", *words)
    sys.exit(1)


def venv_dir() -> str:
    return os.path.abspath(os.path.expanduser(
        os.environ.get("HPCTRAIN_TEST_VENV") or "~/.cache/hpctrain/test-venv"))


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """``name==version`` lines -> {canonical name: version}; comments and blank lines skipped."""
    found = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if not m:
            die(f"{CONSTRAINTS}:{n}: expected 'name==version', found {line!r}")
        found[canonical(m.group(1))] = m.group(2)
    return found


def constraints_text() -> str:
    """tests/constraints.txt with $HPCTRAIN_TEST_TORCH in place of its torch line."""
    try:
        with open(CONSTRAINTS) as f:
            text = f.read()
    except FileNotFoundError:
        die(f"{CONSTRAINTS} is missing: `python3 scripts/test_env.py lock` writes it")
    override = os.environ.get("HPCTRAIN_TEST_TORCH", "").strip()
    if override:
        if not re.fullmatch(r"torch==[0-9][0-9A-Za-z.+]*", override):
            die(f"HPCTRAIN_TEST_TORCH={override!r}: expected 'torch==VERSION' (e.g. torch==2.14.1)")
        text = re.sub(r"(?m)^torch==\S+$", override, text)
    return text


def key(text: str, python: str) -> str:
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"],
                             capture_output=True, text=True, check=True).stdout
    h = hashlib.sha256()
    for part in (text, EXTRAS, " ".join(MORE), version):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def installed(python: str) -> dict[str, str]:
    out = subprocess.run([python, "-m", "pip", "list", "--format=freeze", "--exclude-editable",
                          "--disable-pip-version-check"],
                         capture_output=True, text=True, check=True).stdout
    return {canonical(n): v for n, v in (l.split("==", 1) for l in out.splitlines() if "==" in l)}


def differences(python: str, wanted: dict[str, str]) -> list[str]:
    """What the venv holds that differs from the pins (a local label like +cpu is ignored:
    the pins name none)."""
    have = installed(python)
    wrong = []
    for name, version in sorted(wanted.items()):
        got = have.get(name)
        if got is None:
            wrong.append(f"{name}: pinned {version}, not installed")
        elif got.split("+", 1)[0] != version.split("+", 1)[0]:
            wrong.append(f"{name}: pinned {version}, installed {got}")
    return wrong


def pip_install(python: str, *args: str) -> None:
    cmd = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]
    p = subprocess.run(cmd, cwd=ROOT)
    if p.returncode:
        die(f"`{' '.join(cmd)}` failed (exit {p.returncode}, its output above)")


def make_venv(where: str, base: str) -> str:
    """A new venv at *where* (none before), no system site packages; its python."""
    shutil.rmtree(where, ignore_errors=True)
    os.makedirs(os.path.dirname(where), exist_ok=True)
    p = subprocess.run([base, "-m", "venv", where])
    if p.returncode:
        die(f"`{base} -m venv {where}` failed (exit {p.returncode}): the machine's Python has "
            "no venv module? (Debian: apt-get install python3-venv)")
    return os.path.join(where, "bin", "python")


def editable_here(python: str) -> bool:
    p = subprocess.run([python, "-c", "import hpctrain, os; print(os.path.realpath("
                        "hpctrain.__file__))"], capture_output=True, text=True, cwd="/")
    return p.returncode == 0 and p.stdout.strip() == os.path.realpath(
        os.path.join(ROOT, "hpctrain", "__init__.py"))


def ensure(base: str) -> str:
    venv = venv_dir()
    python = os.path.join(venv, "bin", "python")
    text = constraints_text()
    wanted = pins(text)
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    with open(venv + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        k = key(text, base)
        stamp = os.path.join(venv, STAMP)
        try:
            with open(stamp) as f:
                fresh = f.read().strip() == k
        except OSError:
            fresh = False
        if not fresh:
            began = time.monotonic()
            say(f"building {venv} ({len(wanted)} pinned packages; once, then reused)")
            old = os.umask(0o022)  # readable by the multi-user tests' users
            try:
                python = make_venv(venv, base)
                with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as c:
                    c.write(text)
                try:
                    pip_install(python, "-c", c.name, "-e", f".[{EXTRAS}]", *MORE)
                finally:
                    os.unlink(c.name)
                wrong = differences(python, wanted)
                if wrong:
                    die(f"{venv} does not hold what {CONSTRAINTS} pins:\n  " + "\n  ".join(wrong))
                with open(stamp, "w") as f:
                    f.write(k + "\n")
            finally:
                os.umask(old)
            say(f"built in {time.monotonic() - began:.0f} s")
        elif not editable_here(python):
            # another checkout used this venv last: hpctrain itself points here again
            pip_install(python, "--no-deps", "-e", ".")
    return venv


def check() -> int:
    venv = venv_dir()
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        say(f"no test environment at {venv} (`python3 scripts/test_env.py ensure` builds it)")
        return 1
    wrong = differences(python, pins(constraints_text()))
    for line in wrong:
        say(line)
    if not wrong:
        say(f"{venv} holds every version {os.path.relpath(CONSTRAINTS, ROOT)} pins")
    return 1 if wrong else 0


def lock(base: str) -> None:
    """Resolve the extras again (newest releases pip may take, torch held at the current pin
    unless HPCTRAIN_TEST_TORCH names another) and write tests/constraints.txt."""
    torch = os.environ.get("HPCTRAIN_TEST_TORCH", "").strip()
    if not torch and os.path.exists(CONSTRAINTS):
        with open(CONSTRAINTS) as f:
            torch = "torch==" + pins(f.read()).get("torch", "")
    with tempfile.TemporaryDirectory(prefix="hpctrain-lock-") as tmp:
        python = make_venv(os.path.join(tmp, "venv"), base)
        held = os.path.join(tmp, "held.txt")
        with open(held, "w") as f:
            f.write("".join(f"{name}{spec}\n" for name, (spec, _) in HELD.items()))
        pip_install(python, "-c", held, "-e", f".[{EXTRAS}]", *MORE,
                    *([torch] if torch != "torch==" else []))
        have = installed(python)
    have.pop("hpctrain", None)
    lines = [(f"# {HELD[n][1]}\n" if n in HELD else "") + f"{n}=={v.split('+', 1)[0]}"
             for n, v in sorted(have.items())]
    machine = " ".join(os.uname()[i] for i in (0, 4))
    with open(CONSTRAINTS, "w") as f:
        f.write(HEADER.format(when=time.strftime("%Y-%m-%d"), python=sys.version.split()[0],
                              machine=machine))
        f.write("\n".join(lines) + "\n")
    say(f"wrote {len(lines)} pins to {CONSTRAINTS}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("ensure", "check", "lock"))
    parser.add_argument("--python", default=sys.executable,
                        help="the Python the venv is made from (default: this one)")
    args = parser.parse_args()
    # the venv's base: the real interpreter, even when this runs from inside another venv
    base = args.python
    if args.action == "ensure":
        print(ensure(base))
        return 0
    if args.action == "check":
        return check()
    lock(base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
