"""The training loop of ``bench_restart.py``: the DDP loop of ``_recovery_loop.py``
(MLP 8→16→1, ``enable_reproducibility``, ``sleep`` s of idle time per step, as a GPU step
leaves the CPU) with a checkpoint every step, whose rank 1 kills itself with SIGKILL at
step ``kill_at`` of the first attempt.

Before the kill it waits (untimed) until ``wait_spares`` warm spares are ready, then
``settle`` s more: the kill happens in the steady state of a long training, where the pool
was refilled long ago. Rank 0 (and rank 1 for ``kill``) appends to ``config["trace"]``::

    kill   1 <step> <time>                  rank 1, just before os.kill(SIGKILL)
    enter  <attempt> -1 <time> <process start time>   training function entered
    start  <attempt> <first step> <time>    DDP model built, checkpoint loaded
    post   <attempt> <step> <time>          report() returned
"""
from __future__ import annotations

import glob
import os
import shutil
import signal
import tempfile
import time

import hpctrain
from hpctrain import Checkpoint
from _recovery_loop import _process_started


def loop(config):
    import torch
    import torch.nn as nn

    from hpctrain.torch import enable_reproducibility, prepare_model

    entered = time.time()
    enable_reproducibility(0)
    ctx = hpctrain.get_context()
    rank, attempt = ctx.get_world_rank(), ctx.get_attempt()
    model = prepare_model(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    ck = hpctrain.get_checkpoint()
    if ck:
        st = torch.load(os.path.join(ck.path, "state.pt"))
        model.module.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start = st["step"] + 1
    trace = open(config["trace"], "a", buffering=1)
    if rank == 0:
        trace.write(f"enter {attempt} -1 {entered:.6f} {_process_started():.6f}\n")
        trace.write(f"start {attempt} {start} {time.time():.6f}\n")
    for step in range(start, config["steps"]):
        g = torch.Generator().manual_seed(step * 10 + rank)
        x = torch.randn(32, 8, generator=g)
        loss = ((model(x) - torch.sin(x.sum(1, keepdim=True))) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(config.get("sleep", 0.05))
        if attempt == 1 and rank == 1 and step == config["kill_at"]:
            _wait_spares(ctx, config.get("wait_spares", 0))
            time.sleep(config.get("settle", 1.0))
            trace.write(f"kill {attempt} {step} {time.time():.6f}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        ckpt = None
        if rank == 0:
            d = tempfile.mkdtemp()
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                        "step": step}, os.path.join(d, "state.pt"))
            ckpt = Checkpoint.from_directory(d)
        try:
            hpctrain.report({"loss": loss.item(), "step": step}, checkpoint=ckpt)
        finally:
            if ckpt is not None:
                shutil.rmtree(ckpt.path, ignore_errors=True)
        if rank == 0:
            trace.write(f"post {attempt} {step} {time.time():.6f}\n")


def _wait_spares(ctx, count, timeout=300.0):
    pattern = os.path.join(ctx.get_run_dir(), ".hpctrain", "spares", "*.ready")
    deadline = time.monotonic() + timeout
    while count and len(glob.glob(pattern)) < count and time.monotonic() < deadline:
        time.sleep(0.1)
