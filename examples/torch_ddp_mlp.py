"""The Ray Train PyTorch quick start, ported to hpctrain: only the imports changed.

Ray's version trains on FashionMNIST downloaded by torchvision; this machine has no
network and no CPU torchvision, so a synthetic FashionMNIST-shaped data set (28×28
images, 10 classes from a fixed random teacher) stands in.

    python examples/torch_ddp_mlp.py [--workers 2] [--epochs 3]
"""
import argparse
import os
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import hpctrain                                   # was: import ray.train
from hpctrain import Checkpoint, RunConfig, ScalingConfig        # was: from ray.train import ...
from hpctrain.torch import TorchTrainer, prepare_data_loader, prepare_model  # was: ray.train.torch


def fashion_mnist_like(n, seed):
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 1, 28, 28, generator=g)
    teacher = torch.randn(28 * 28, 10, generator=torch.Generator().manual_seed(1234))
    labels = (images.flatten(1) @ teacher).argmax(1)
    return TensorDataset(images, labels)


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(28 * 28, 512), nn.ReLU(),
            nn.Linear(512, 512), nn.ReLU(),
            nn.Linear(512, 10),
        )

    def forward(self, x):
        return self.linear_relu_stack(self.flatten(x))


def train_func(config):
    model = prepare_model(NeuralNetwork())
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    train_loader = prepare_data_loader(
        DataLoader(fashion_mnist_like(8192, seed=0), batch_size=config["batch_size"], shuffle=True))
    test_loader = prepare_data_loader(
        DataLoader(fashion_mnist_like(2048, seed=1), batch_size=config["batch_size"]))

    for epoch in range(config["epochs"]):
        model.train()
        for images, labels in train_loader:
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        model.eval()
        test_loss, correct, total = 0.0, 0, 0
        with torch.no_grad():
            for images, labels in test_loader:
                pred = model(images)
                test_loss += loss_fn(pred, labels).item() * len(labels)
                correct += (pred.argmax(1) == labels).sum().item()
                total += len(labels)

        metrics = {"loss": test_loss / total, "accuracy": correct / total, "epoch": epoch}
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if hpctrain.get_context().get_world_rank() == 0:
                torch.save(model.module.state_dict() if hasattr(model, "module")
                           else model.state_dict(), os.path.join(tmp, "model.pt"))
                checkpoint = Checkpoint.from_directory(tmp)
            hpctrain.report(metrics, checkpoint=checkpoint)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--storage", default=None, help="storage path (default ~/hpctrain_results)")
    args = ap.parse_args()
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"lr": 1e-2, "batch_size": 64, "epochs": args.epochs},
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=False),
        run_config=RunConfig(storage_path=args.storage),
    )
    result = trainer.fit()
    print(f"Training result: {result}")
    print(f"accuracy after {args.epochs} epochs: {result.metrics['accuracy']:.3f}")
