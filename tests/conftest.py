"""The suite's shared setup. Layout: unit/ (pure functions, parsing, rendering: no
training run), local/ (real runs on this machine: processes, frameworks), cluster/ (the
test Slurm cluster, the real OpenPBS server, the fake PBS and LSF commands), support/ (the
helpers and the workload modules, imported by name here, in the workers and in batch jobs)."""
import fcntl
import os
import subprocess
import sys
import tempfile

import pytest

# support/ first on sys.path: ``import workloads``, ``from helpers import ...`` in the tests,
# and the same names in the workers a run starts (they get the driver's sys.path additions)
SUPPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support")
sys.path.insert(0, SUPPORT)
from helpers import ROOT  # noqa: E402 - found on the path set just above
from slurm import start_cluster  # noqa: E402

#: ``pytest.mark.cluster(name)``: the test uses one shared test cluster, name -> the fixture
#: that brings it up (or skips) and the xdist group its tests share. Under pytest-xdist
#: (scripts/test.sh runs ``-n 2 --dist loadgroup``) the tests of one group all go to one
#: worker, one after another, as they assume a cluster nobody else is using.
CLUSTERS = {"slurm": ("slurm_cluster", "slurm-cluster"), "pbs": ("pbs_server", "pbs-server")}


def _cluster_name(item):
    marker = item.get_closest_marker("cluster")
    if marker is None:
        return None
    if len(marker.args) != 1 or marker.args[0] not in CLUSTERS:
        raise pytest.UsageError(f"{item.nodeid}: pytest.mark.cluster expects one of "
                                f"{sorted(CLUSTERS)}, got {marker.args!r}")
    return marker.args[0]


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    first, rest = [], []
    for item in items:
        name = _cluster_name(item)
        if name is None:
            rest.append(item)
        else:
            item.add_marker(pytest.mark.xdist_group(CLUSTERS[name][1]))
            first.append(item)
    # the longest pieces of work first, so that the rest can run beside them
    first.sort(key=lambda item: list(CLUSTERS).index(_cluster_name(item)))
    items[:] = first + rest


@pytest.fixture(autouse=True)
def _cluster(request):
    """Brings up the cluster a ``pytest.mark.cluster(name)`` test asks for."""
    name = _cluster_name(request.node)
    if name is not None:
        request.getfixturevalue(CLUSTERS[name][0])


@pytest.fixture(scope="session")
def slurm_cluster():
    """The test Slurm cluster (scripts/slurm-cluster.sh: nodes n1, n2 on this machine),
    started if it is not running."""
    start_cluster()


@pytest.fixture(scope="session")
def pbs_server():
    """The client commands' directory of the real OpenPBS server (scripts/pbs-server.sh);
    the tests hold its lock (/tmp/pbs-server.lock). Skips without a running server."""
    server_dir = os.environ.get("HPCTRAIN_PBS_DIR", "/var/spool/hpctrain-pbs")
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "pbs-server.sh"), "status"],
                       capture_output=True, text=True,
                       env={**os.environ, "HPCTRAIN_PBS_DIR": server_dir})
    if p.returncode != 0:
        pytest.skip(reason="no real PBS server running (`scripts/pbs-server.sh status`: "
                    f"{(p.stdout + p.stderr).strip().splitlines()[:1]}); the fake-based PBS "
                    "tests cover these paths")
    with open("/tmp/pbs-server.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield os.path.join(server_dir, "bin")

# The user's own defaults (hpctrain.userconfig) stay out of the tests: no config file,
# no default site; tests that need them set their own...
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="hpctrain-tests-xdg-")
os.environ.pop("HPCTRAIN_SITE", None)
# ... and so does the center's /etc/hpctrain/config.toml: a path where none is
os.environ["HPCTRAIN_CENTER_CONFIG"] = os.path.join(os.environ["XDG_CONFIG_HOME"],
                                                    "no-center-config.toml")

# Workers inherit these: keep CPU runs small and quiet on a 2-core machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


@pytest.fixture
def storage(tmp_path):
    """A storage_path for runs of one test."""
    d = tmp_path / "runs"
    d.mkdir()
    return str(d)


@pytest.fixture
def small_disk(tmp_path):
    """A 20 MiB tmpfs (a disk that fills up), unmounted afterwards."""
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(small)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(reason=f"a 20 MiB tmpfs could not be mounted (needs root, as CI has): "
                    f"{mounted.stderr.strip()}")
    try:
        yield str(small)
    finally:
        subprocess.run(["umount", "-l", str(small)])


SIGNAL_LEAKS = "/tmp/hpctrain-signal-leaks.txt"


@pytest.fixture(autouse=True)
def _no_signal_state_leaks(request):
    """A test that leaves signals blocked (or SIGINT ignored) in this pytest process hands
    that to every process started afterwards: a driver that never sees Ctrl-C, ranks that
    never see SIGTERM. After each test, restore what it found and name the test in
    SIGNAL_LEAKS, so that the source can be fixed."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    sigint = signal.getsignal(signal.SIGINT)
    yield
    leaked = []
    now = signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if now != mask:
        leaked.append(f"blocked {sorted(s.name for s in now - mask)}")
    if signal.getsignal(signal.SIGINT) is not sigint:
        leaked.append(f"SIGINT handler {signal.getsignal(signal.SIGINT)!r}")
        signal.signal(signal.SIGINT, sigint)
    if leaked:
        with open(SIGNAL_LEAKS, "a") as f:
            f.write(f"{request.node.nodeid}: {'; '.join(leaked)}\n")
