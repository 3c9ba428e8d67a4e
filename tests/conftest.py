import os

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
