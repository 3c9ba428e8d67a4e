"""Training functions for tests/local/test_ray_names.py (imported by the workers too)."""
import json
import os
import tempfile
import time

import hpctrain
from hpctrain import Checkpoint


def _context(ctx):
    from hpctrain.torch import get_devices

    return {"experiment_name": ctx.get_experiment_name(), "trial_id": ctx.get_trial_id(),
            "trial_name": ctx.get_trial_name(), "trial_dir": ctx.get_trial_dir(),
            "metadata": ctx.get_metadata(), "world_size": ctx.get_world_size(),
            "devices": [str(d) for d in get_devices()]}


def context_and_metadata(config):
    """Three reports, rank 0 checkpointing each; the checkpoint of report 2 carries
    metadata set on it. Rank 1 crashes once, after report 2 of the first attempt, so
    that the second attempt resumes from it. Every rank records what get_context() says
    (per attempt), and the resumed attempt what get_checkpoint().get_metadata() says."""
    ctx = hpctrain.get_context()
    rank, attempt = ctx.get_world_rank(), ctx.get_attempt()
    out = os.path.join(ctx.get_trial_dir(), "test-out")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"context.rank-{rank}.attempt-{attempt}.json"), "w") as f:
        json.dump(_context(ctx), f)
    start = 0
    resumed = hpctrain.get_checkpoint()
    if resumed is not None:
        with open(os.path.join(resumed.path, "step.txt")) as f:
            start = int(f.read()) + 1
        if rank == 0:
            with open(os.path.join(out, "resumed-metadata.json"), "w") as f:
                json.dump(resumed.get_metadata(), f)
    for step in range(start, 3):
        with tempfile.TemporaryDirectory() as d:
            ckpt = None
            if rank == 0:
                with open(os.path.join(d, "step.txt"), "w") as f:
                    f.write(str(step))
                ckpt = Checkpoint.from_directory(d)
                if step == 1:  # set on the checkpoint: wins over the trainer's keys
                    ckpt.set_metadata({"note": "set on the checkpoint"})
                    ckpt.update_metadata({"step": step})
            time.sleep(0.05)  # reports this far apart: each one commits its checkpoint
            hpctrain.report({"step": step}, checkpoint=ckpt)
        if step == 1 and attempt == 1 and rank == 1:
            _wait_for_committed_step(ctx.get_trial_dir(), 1)
            raise RuntimeError("planned crash after report 2")


def _wait_for_committed_step(run_dir, step, timeout=60):
    """Until rank 0 has published the checkpoint of ``step`` (it does so after the
    report's agreement, which this rank has already left)."""
    import glob

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for d in glob.glob(os.path.join(run_dir, "checkpoints", "checkpoint_*")):
            try:
                if open(os.path.join(d, "step.txt")).read() == str(step):
                    return
            except OSError:
                pass
        time.sleep(0.05)
    raise TimeoutError(f"no committed checkpoint of step {step} in {run_dir}")


def report_context(config):
    """One report of what get_context() says (a sweep's trial)."""
    ctx = hpctrain.get_context()
    info = _context(ctx)
    info.pop("metadata")
    info["devices"] = ",".join(info["devices"])
    hpctrain.report({**info, "x": config["x"]})


def legacy_reports(config):
    """Seed-era: three reports whose values tell the worker apart."""
    from hpctrain import train

    for i in range(3):
        train.report(loss=1.0 / (i + 1) + train.world_rank(), nested={"m": i * 10},
                     label="text", nan=float("nan"))
