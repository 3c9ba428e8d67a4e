"""A Horovod PyTorch training (Ray Train's HorovodTrainer pattern) with checkpoints.

    bash scripts/install-horovod.sh     # once: Horovod 0.28.1 built for torch 2.x
    python examples/horovod_torch.py    # 2 ranks here, Horovod's Gloo controller

hpctrain starts the ranks and provides the rendezvous horovodrun would (Gloo), or lets
MPI do it when the ranks come from mpirun (HorovodConfig(controller="mpi")).
"""
import os
import tempfile

import horovod.torch as hvd
import torch
from torch import nn

import hpctrain
from hpctrain import Checkpoint, RunConfig, ScalingConfig
from hpctrain.horovod import HorovodTrainer


def train_func(config):
    hvd.init()
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size())
    start = 0
    checkpoint = hpctrain.get_checkpoint()
    if checkpoint:
        state = torch.load(os.path.join(checkpoint.path, "model.pt"))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    g = torch.Generator().manual_seed(hvd.rank())  # each rank its own data
    for epoch in range(start, config["epochs"]):
        x = torch.randn(64, 8, generator=g)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        avg = hvd.allreduce(loss.detach(), op=hvd.Average).item()
        with tempfile.TemporaryDirectory() as d:
            ckpt = None
            if hvd.rank() == 0:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "epoch": epoch}, os.path.join(d, "model.pt"))
                ckpt = Checkpoint.from_directory(d)
            hpctrain.report({"loss": avg, "epoch": epoch}, checkpoint=ckpt)


if __name__ == "__main__":
    result = HorovodTrainer(train_func, train_loop_config={"epochs": 10},
                            scaling_config=ScalingConfig(num_workers=2),
                            run_config=RunConfig(name=None)).fit()
    print(result.metrics["loss"], result.checkpoint)
