"""Small helpers shared by the tests that run whole trainings and the CLI."""
import os
import subprocess
import sys


def final_state(run_path):
    """The model state ``workloads.deterministic`` saved at the end of a run."""
    import torch

    return torch.load(os.path.join(run_path, "test-out", "final.pt"))


def assert_same_state(a, b):
    import torch

    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def cli(*args, timeout=300, check=True, env=None, cwd=None):
    """Run ``hpctrain ARGS`` in a fresh process; with ``check``, fail on a non-zero exit."""
    p = subprocess.run([sys.executable, "-m", "hpctrain.cli", *args], capture_output=True,
                       text=True, timeout=timeout, env=env, cwd=cwd)
    if check and p.returncode != 0:
        raise AssertionError(f"hpctrain {' '.join(args)} exited {p.returncode}:\n"
                             f"{p.stdout}\n{p.stderr}")
    return p
