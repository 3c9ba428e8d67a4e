"""Small helpers shared by the tests that run whole trainings and the CLI."""
import os
import shutil
import subprocess
import sys
import time

import pytest

#: Tests that start real Open MPI ranks.
needs_mpirun = pytest.mark.skipif(
    shutil.which("mpirun") is None,
    reason="Open MPI's mpirun is not installed (apt-get install -y openmpi-bin; "
           "scripts/slurm-cluster.sh installs it)")


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


def assert_full_disk_failure(error, run_path):
    """A run met a full disk: the worker's error says so with its HINT, and every
    committed checkpoint (there is at least one) is intact."""
    from hpctrain._internal.commit import verify_checkpoint

    assert "No space left on device" in error.worker_traceback
    # the disk fills while a checkpoint is written (usually) or, when the checkpoint
    # fitted to the byte, while its report's metrics are appended to result.json
    assert ("This checkpoint is discarded; the last committed one is untouched" in
            error.worker_traceback or "Its metrics are not recorded; committed checkpoints "
            "are untouched" in error.worker_traceback), error.worker_traceback
    assert "HINT: the filesystem (or your quota) is full" in error.worker_traceback
    committed = sorted(os.listdir(os.path.join(run_path, "checkpoints")))
    assert committed and all(c.startswith("checkpoint_") for c in committed)
    for name in committed:
        assert verify_checkpoint(os.path.join(run_path, "checkpoints", name)) == []


def wait_for(predicate, timeout, what, *, proc=None, poll_s=0.1):
    """Poll ``predicate`` until it is true; fail the test after ``timeout`` seconds (a
    bound on waiting, not a speed check), or at once if ``proc`` (a Popen) has exited,
    with its output."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"{what}: the process exited {proc.returncode} first:\n{out}\n{err}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(poll_s)


def fit(func, storage, *, workers=2, config=None, name=None, ckpt=None, max_failures=0, **kw):
    """``TorchTrainer(func, ...).fit()`` with ``workers`` ranks under ``storage``."""
    from hpctrain import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    trainer = TorchTrainer(
        func, train_loop_config=config or {},
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(name=name, storage_path=storage, verbose=0,
                             checkpoint_config=ckpt or CheckpointConfig(),
                             failure_config=FailureConfig(max_failures=max_failures)), **kw)
    return trainer.fit()


def out(result, name):
    """A file the workloads wrote under the run's ``test-out/``."""
    return os.path.join(result.path, "test-out", name)
