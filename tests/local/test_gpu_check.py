"""``scripts/gpu-check.sh``, the GPU machine's one script, kept working between the sessions
that are lent a GPU: without one it says so and exits 0, and its checks run their code paths
on CPU ranks (``--cpu``), each asserting what it asserts on the GPU."""
import os
import subprocess
import sys

import pytest

from helpers import ROOT


def _cpu_only_env():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # no GPU, even on a machine with one
    env.pop("OUT", None)
    return env


def test_without_a_gpu_the_check_says_so_and_exits_0(tmp_path):
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu-check.sh")],
                       capture_output=True, text=True, timeout=120, env=_cpu_only_env(),
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "no GPU here" in p.stdout and "nothing to check" in p.stdout


@pytest.mark.slow
def test_the_checks_dry_run_on_cpu_ranks_and_print_one_table(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu_check.py"), "--cpu",
                        "--only", "nccl-1", "--only", "ddp-resume", "--only", "async-ckpt",
                        "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=240, env=_cpu_only_env())
    assert p.returncode == 0, p.stdout + p.stderr
    rows = {line.split("|")[1].strip(): line for line in p.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| check")}
    assert set(rows) == {"nccl-1", "ddp-resume", "async-ckpt"}
    assert all("| ok |" in row for row in rows.values()), p.stdout
    assert "bit-identical" in rows["ddp-resume"]
    assert "restarted from the checkpoint of epoch 1" in rows["ddp-resume"]
    assert "every committed file holds the state at its report" in rows["async-ckpt"]
    assert "backend gloo" in rows["nccl-1"]
    with open(tmp_path / "gpu-check.md") as f:
        assert f.read().strip() == p.stdout.strip()


@pytest.mark.slow
def test_the_hang_check_dry_runs_on_cpu_ranks(tmp_path):
    """``hang-nccl`` with Gloo ranks: rank 1 never joins an all_reduce; the watchdog
    (FailureConfig(hang_timeout=15)) ends the attempt within its limit, both ranks' stacks
    are written, and the run resumes from the last checkpoint with the right total."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu_check.py"), "--cpu",
                        "--only", "hang-nccl", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=240, env=_cpu_only_env())
    assert p.returncode == 0, p.stdout + p.stderr
    row = next(line for line in p.stdout.splitlines() if line.startswith("| hang-nccl |"))
    assert "| ok |" in row, row
    assert "2 ranks (Gloo), rank 1 never joins an all_reduce: hang: rank " in row
    assert "over the configured limit of 15 s; the stacks of ranks 0–1 written; attempt 2 " \
           "resumed from checkpoint_000001 and finished, total 20 as uninterrupted" in row
