import os
import subprocess

import pytest

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
