"""The training function behind examples/sweep.toml: a small regression whose best
learning rate and width the sweep looks for.

A linear teacher makes the targets, so nothing needs downloading; every epoch reports the
validation loss and a checkpoint (a trial that is preempted or requeued resumes from it).
"""
import os
import tempfile

import torch
from torch import nn

import hpctrain
from hpctrain import Checkpoint


def train_func(config):
    torch.manual_seed(config.get("seed", 0))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 16, generator=g)
    y = x @ torch.randn(16, 1, generator=g) + 0.1 * torch.randn(512, 1, generator=g)
    model = nn.Sequential(nn.Linear(16, config["width"]), nn.ReLU(), nn.Linear(config["width"], 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    start = 0
    if (ckpt := hpctrain.get_checkpoint()):
        state = torch.load(os.path.join(ckpt.path, "state.pt"))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        for i in range(0, 384, 32):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x[i:i + 32]), y[i:i + 32])
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            val_loss = nn.functional.mse_loss(model(x[384:]), y[384:]).item()
        with tempfile.TemporaryDirectory() as d:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch}, os.path.join(d, "state.pt"))
            hpctrain.report({"val_loss": val_loss, "epoch": epoch},
                            checkpoint=Checkpoint.from_directory(d))
