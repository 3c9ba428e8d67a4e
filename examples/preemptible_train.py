"""A step-based training loop that survives time limits and preemption.

It reports every step (cheap: one line on rank 0) and hands in a checkpoint every
``checkpoint_every`` steps *or* as soon as ``get_context().should_checkpoint()`` says
the scheduler warned. That report commits the checkpoint and ends the loop on every rank
at once; the job is requeued and the next allocation resumes from the step after it, so
no step is trained twice. Run it with examples/preemptible.toml.
"""
import os
import tempfile

import torch
from torch import nn

import hpctrain
from hpctrain import Checkpoint
from hpctrain.torch import enable_reproducibility, prepare_model


def train_func(config):
    enable_reproducibility(config.get("seed", 0))
    ctx = hpctrain.get_context()
    model = prepare_model(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=config.get("lr", 1e-3))
    start = 0
    ckpt = hpctrain.get_checkpoint()           # the last committed checkpoint, or None
    if ckpt:
        state = torch.load(os.path.join(ckpt.path, "state.pt"))
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"] + 1
        if ctx.get_world_rank() == 0:
            print(f"resumed from {os.path.basename(ckpt.path)} at step {start} "
                  f"(restart {ctx.get_restart_count()})", flush=True)
    for step in range(start, config["steps"]):
        g = torch.Generator().manual_seed(step * 1000 + ctx.get_world_rank())
        x = torch.randn(64, 32, generator=g)
        loss = ((model(x) - x.pow(2).sum(1, keepdim=True).sqrt()) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        # the same answer on every rank after the same report: safe to branch on
        due = (step + 1) % config.get("checkpoint_every", 500) == 0
        if (due or ctx.should_checkpoint()) and ctx.get_world_rank() == 0:
            with tempfile.TemporaryDirectory() as d:
                torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                            "step": step}, os.path.join(d, "state.pt"))
                hpctrain.report({"loss": loss.item(), "step": step},
                                checkpoint=Checkpoint.from_directory(d))
        else:
            hpctrain.report({"loss": loss.item(), "step": step})
