"""The training function behind examples/quickstart.toml.

An MLP (784 → 256 → 10) learns to classify synthetic 28×28 "images" whose labels come
from a fixed random teacher network, so nothing needs downloading. Every epoch reports
the loss and accuracy and a checkpoint; after a restart it resumes from the latest one.
"""
import os
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import hpctrain
from hpctrain import Checkpoint
from hpctrain.torch import enable_reproducibility, get_device, prepare_data_loader, prepare_model


def make_dataset(n: int, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 784, generator=g)
    teacher = torch.randn(784, 10, generator=g)
    y = (x @ teacher).argmax(dim=1)
    return TensorDataset(x, y)


def train_func(config):
    enable_reproducibility(config.get("seed", 0))
    ctx = hpctrain.get_context()
    model = prepare_model(nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    loader = prepare_data_loader(DataLoader(make_dataset(config["samples"]),
                                            batch_size=config["batch_size"], shuffle=True))
    start_epoch = 0
    checkpoint = hpctrain.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), map_location=get_device())
        model.module.load_state_dict(state["model"]) if hasattr(model, "module") else \
            model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"] + 1

    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(start_epoch, config["epochs"]):
        loader.set_epoch(epoch)
        total, correct, loss_sum = 0, 0, 0.0
        for x, y in loader:
            out = model(x)
            loss = loss_fn(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            total += len(y)
        metrics = {"epoch": epoch, "loss": loss_sum / total, "accuracy": correct / total}
        with tempfile.TemporaryDirectory() as d:
            checkpoint = None
            if ctx.get_world_rank() == 0:  # DDP keeps replicas equal: rank 0 saves
                inner = model.module if hasattr(model, "module") else model
                torch.save({"model": inner.state_dict(), "optimizer": optimizer.state_dict(),
                            "epoch": epoch}, os.path.join(d, "state.pt"))
                checkpoint = Checkpoint.from_directory(d)
            hpctrain.report(metrics, checkpoint=checkpoint)
