"""The training loop of ``bench_recovery.py``: ``tests/support/workloads.py:on_demand`` with a
timing trace.

A deterministic DDP loop (MLP 8→16→1, SGD with momentum, ``sleep`` seconds of idle time per
step, as a GPU step leaves the CPU) that checkpoints when the scheduler warned
(``get_context().should_checkpoint()``) and, with ``every`` > 0, every ``every`` steps.
``ignore_warning`` makes it a loop that never checkpoints on demand.

Rank 0 appends one line per event to ``config["trace"]`` (``time.time()``, since the
``_timestamp`` of ``result.json`` is whole seconds)::

    enter  <attempt> -1 <time> <when this process started>  training function entered
    start  <attempt> <start step> <time> <restart count> <job id> <resumed checkpoint or ->
    warned <attempt> <step> <time>     should_checkpoint() turned True (first time)
    pre    <attempt> <step> <time>     the step is trained; report() is called
    post   <attempt> <step> <time>     report() returned
    cpu    <attempt> <step> <time> <s> after the attempt's first report: the CPU time (user
                                       + system) this process used since it started
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time

import hpctrain
from hpctrain import Checkpoint

from _procmem import process_started as _process_started  # noqa: F401 - _restart_loop too


def loop(config):
    import torch
    import torch.nn as nn

    from hpctrain.torch import enable_reproducibility, prepare_model

    entered = time.time()
    enable_reproducibility(0)
    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    attempt = ctx.get_attempt()
    model = prepare_model(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    ck = hpctrain.get_checkpoint()
    if ck:
        st = torch.load(os.path.join(ck.path, "state.pt"))
        model.module.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start = st["step"] + 1
    trace = None
    if rank == 0:
        trace = open(config["trace"], "a", buffering=1)
        trace.write(f"enter {attempt} -1 {entered:.6f} {_process_started():.6f}\n")
        trace.write(f"start {attempt} {start} {time.time():.6f} {ctx.get_restart_count()} "
                    f"{ctx.get_job_id()} {os.path.basename(ck.path) if ck else '-'}\n")
    every = config.get("every", 0)
    ignore = config.get("ignore_warning", False)
    sleep = config.get("sleep", 0.1)
    seen_warning = False
    for step in range(start, config["steps"]):
        g = torch.Generator().manual_seed(step * 10 + rank)
        x = torch.randn(32, 8, generator=g)
        loss = ((model(x) - torch.sin(x.sum(1, keepdim=True))) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(sleep)
        should = ctx.should_checkpoint()
        if should and not seen_warning:
            seen_warning = True
            if trace:
                trace.write(f"warned {attempt} {step} {time.time():.6f}\n")
        ckpt = None
        if rank == 0 and ((should and not ignore) or (every and (step + 1) % every == 0)):
            d = tempfile.mkdtemp()
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                        "step": step}, os.path.join(d, "state.pt"))
            ckpt = Checkpoint.from_directory(d)
        if trace:
            trace.write(f"pre {attempt} {step} {time.time():.6f}\n")
        try:
            hpctrain.report({"loss": loss.item(), "step": step}, checkpoint=ckpt)
        finally:
            if ckpt is not None:
                shutil.rmtree(ckpt.path, ignore_errors=True)
        if trace:
            trace.write(f"post {attempt} {step} {time.time():.6f}\n")
            if step == start:  # this process's CPU (user + system) until its first report
                trace.write(f"cpu {attempt} {step} {time.time():.6f} {time.process_time():.6f}\n")
