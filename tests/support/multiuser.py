"""A shared machine for real: three test users (``scripts/test-users.sh``) and a directory
tree they share, as a center's filesystem is. Used by tests/local/test_multiuser.py (a
hostile co-user) and tests/cluster/test_center_install.py (a center-wide install).

``hpct-alice`` is the user, ``hpct-bob`` a member of alice's project group ``hpct-proj``,
``hpct-eve`` an outsider. Needs root (to run processes as those users)."""
from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap
from typing import Dict, Optional

import pytest

USERS = ("hpct-alice", "hpct-bob", "hpct-eve")
NEEDS_USERS = ("needs root and the test users of scripts/test-users.sh (the test command "
               "makes them)")


def have_users() -> bool:
    try:
        for u in USERS:
            pwd.getpwnam(u)
        grp.getgrnam("hpct-proj")
    except KeyError:
        return False
    return os.geteuid() == 0


class Machine:
    """A directory tree shared by the three users, as a center's filesystem is:
    ``proj/`` a setgid project directory of ``hpct-proj`` (2770), ``scratch/`` a
    world-writable sticky scratch (1777), ``evidence/`` where an attacker's code, if it
    ever ran, leaves ``id -u``."""

    def __init__(self, base: str):
        self.base = base
        self.proj = os.path.join(base, "proj")
        self.scratch = os.path.join(base, "scratch")
        self.evidence = os.path.join(base, "evidence")
        os.chmod(base, 0o755)
        os.mkdir(self.proj)
        os.chown(self.proj, 0, grp.getgrnam("hpct-proj").gr_gid)
        os.chmod(self.proj, 0o2770)
        for d in (self.scratch, self.evidence):
            os.mkdir(d)
            os.chmod(d, 0o1777)
        for u in USERS:
            home = self.home(u)
            os.mkdir(home, 0o700)
            os.chown(home, pwd.getpwnam(u).pw_uid, pwd.getpwnam(u).pw_gid)

    def home(self, user: str) -> str:
        return os.path.join(self.base, "home-" + user)

    def run(self, user: str, code: str, *, umask: int = 0o022, stdin: str | None = None,
            args=None, timeout: float = 300, program: Optional[str] = None,
            env: Optional[Dict[str, Optional[str]]] = None) -> subprocess.CompletedProcess:
        """``python -c code`` (or ``python args...``) as ``user`` with ``umask``;
        ``program`` instead of this Python (another environment's, a console script);
        ``env``: more variables (None: leave that one out)."""
        pw = pwd.getpwnam(user)
        groups = [g.gr_gid for g in grp.getgrall() if user in g.gr_mem]
        home = self.home(user)
        environ = {"PATH": os.environ["PATH"], "HOME": home, "XDG_CONFIG_HOME": home,
                   "OMP_NUM_THREADS": "1", "LANG": "C.UTF-8", "BASE": self.base,
                   "EVIDENCE": self.evidence}
        if os.environ.get("PYTHONPATH"):  # (another checkout of hpctrain, to compare)
            environ["PYTHONPATH"] = os.environ["PYTHONPATH"]
        for key, value in (env or {}).items():
            if value is None:
                environ.pop(key, None)
            else:
                environ[key] = value
        argv = [program or sys.executable] + (args or ["-c", textwrap.dedent(code)])
        return subprocess.run(argv, user=pw.pw_uid, group=pw.pw_gid, extra_groups=groups,
                              umask=umask, env=environ, cwd=home, input=stdin,
                              capture_output=True, text=True, timeout=timeout)

    def evidence_files(self):
        return sorted(os.listdir(self.evidence))


@pytest.fixture
def machine():
    base = tempfile.mkdtemp(prefix="hpct-mu-", dir="/tmp")
    try:
        yield Machine(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
