"""Training functions of test_fast_restart.py (imported by the workers too)."""
import glob
import os
import signal
import sys
import tempfile
import time

import hpctrain
from workloads import _out, _resumable, _save_state, _train_step, _wait_until_committed


def _spares_ready(ctx, count, timeout=180.0):
    """Wait (bounded) until ``count`` warm spares have finished their imports, so that the
    restart that follows can use them (how long it takes is not what is tested)."""
    pattern = os.path.join(ctx.get_run_dir(), ".hpctrain", "spares", "*.ready")
    deadline = time.monotonic() + timeout
    while len(glob.glob(pattern)) < count and time.monotonic() < deadline:
        time.sleep(0.1)


def killed_once(config):
    """``workloads.deterministic`` (same steps, data and checkpoints) whose rank
    ``crash_rank`` kills itself with SIGKILL at epoch ``crash_at`` of the first attempt,
    once the run's warm spares are ready. Every rank records which program it is
    (``__main__.py`` of ``python -m hpctrain.worker``: started cold, ``spare.py`` a warm spare)."""
    import torch

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    with open(_out(f"program-attempt-{ctx.get_attempt()}-rank-{rank}"), "w") as f:
        f.write(os.path.basename(sys.argv[0]) + "\n")
    model, opt, start, ck = _resumable("epoch")
    if ck:
        with open(_out(f"resumed-attempt-{ctx.get_attempt()}-rank-{rank}"), "w") as f:
            f.write(f"{ck.path}\n{start}\n{ctx.get_restart_count()}\n")
    for epoch in range(start, config["epochs"]):
        loss = _train_step(model, opt, epoch, rank)
        if ctx.get_attempt() == 1 and rank == config["crash_rank"] and \
                epoch == config["crash_at"]:
            _wait_until_committed(ctx, iteration=epoch)
            if config.get("wait_for_spares", True):
                _spares_ready(ctx, ctx.get_world_size())
            os.kill(os.getpid(), signal.SIGKILL)
        with tempfile.TemporaryDirectory() as d:
            ckpt = _save_state(model, opt, "epoch", epoch, d) if rank == 0 else None
            hpctrain.report({"loss": loss.item(), "epoch": epoch}, checkpoint=ckpt)
    if rank == 0:
        torch.save(model.module.state_dict(), _out("final.pt"))
