import os
import subprocess
import tempfile

import pytest

# Files whose tests submit to the one test Slurm cluster (scripts/slurm-cluster.sh). Under
# pytest-xdist (scripts/test.sh runs ``-n 2 --dist loadgroup``) they all go to one worker,
# one after another, as they assume a cluster nobody else is using; the other tests share
# the second worker's time with them.
CLUSTER_FILES = {"test_slurm_env.py", "test_slurm_jobs.py", "test_slurm_recovery.py",
                 "test_slurm_backends.py", "test_tune_slurm.py", "test_slurm_job_handle.py",
                 "test_slurm_frameworks.py", "test_slurm_gbdt.py",
                 "test_slurm_tune_schedulers.py", "test_slurm_fast_restart.py"}


# Files whose tests use the one real PBS server (scripts/pbs-server.sh): likewise one after
# another on one worker (and under /tmp/pbs-server.lock, which their fixture takes).
PBS_SERVER_FILES = {"test_pbs_server.py"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    groups = [("slurm-cluster", CLUSTER_FILES), ("pbs-server", PBS_SERVER_FILES)]
    first = []
    for group, files in groups:
        for item in items:
            if item.path.name in files:
                item.add_marker(pytest.mark.xdist_group(group))
                first.append(item)
    # the longest pieces of work first, so that the rest can run beside them
    grouped = set(CLUSTER_FILES) | PBS_SERVER_FILES
    items[:] = first + [item for item in items if item.path.name not in grouped]

# The user's own defaults (hpctrain.userconfig) stay out of the tests: no config file,
# no default site; tests that need them set their own.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="hpctrain-tests-xdg-")
os.environ.pop("HPCTRAIN_SITE", None)

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
