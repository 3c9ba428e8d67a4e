"""What to install, said for the environment this hpctrain runs in.

A HINT names the packages themselves (``torch``, ``mpi4py``), never ``hpctrain[extra]``:
hpctrain is not published on PyPI, and whoever holds that name there would be installed
instead. It names this Python's own pip (``/opt/hpctrain/0.1.0/bin/python -m pip``), and
when this environment is not the user's to change (a center's install under ``/opt``), the
way to add packages over it: a venv of their own (docs/sites.md, "Your own packages").
"""
from __future__ import annotations

import os
import shlex
import sys
import sysconfig


def pip_install(packages: str) -> str:
    """How to install ``packages`` (pip requirement words, space-separated) here."""
    python = sys.executable or "python3"
    if os.access(sysconfig.get_path("purelib"), os.W_OK):
        return f"{shlex.quote(python)} -m pip install {packages}"
    return (f"{sys.prefix} is not yours to change (a center-wide install): make a venv of "
            f"your own over it (docs/sites.md, 'Your own packages') and pip install "
            f"{packages} there")
