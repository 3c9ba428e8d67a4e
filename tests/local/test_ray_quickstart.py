"""Ray Train's PyTorch quick start (examples/pytorch_quickstart.py), run as a user runs
it: every rank saves model.pt and reports it; the checkpoint keeps rank 0's copy, written
once. The 2-node Slurm run of the same training function is in test_slurm_jobs.py."""
import os
import subprocess
import sys

from helpers import ROOT, assert_quickstart_checkpoints

SMALL = {"QUICKSTART_WIDTH": "8", "QUICKSTART_SAMPLES": "128", "QUICKSTART_EPOCHS": "2"}


def test_ray_pytorch_quickstart_keeps_one_model_pt_from_rank_0(storage):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "pytorch_quickstart.py"),
                        "--workers", "2", "--storage", storage], capture_output=True,
                       text=True, timeout=300, env={**os.environ, **SMALL})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "loss after 2 epochs" in p.stdout
    (run,) = os.listdir(storage)
    assert_quickstart_checkpoints(os.path.join(storage, run), epochs=2, world_size=2, width=8)
