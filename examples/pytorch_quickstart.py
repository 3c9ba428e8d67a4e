"""Ray Train's PyTorch quick start ("Get Started with Distributed Training using PyTorch",
docs.ray.io/en/latest/train/getting-started-pytorch.html), ported to hpctrain.

The training function is Ray's, step for step: a ResNet-18 with a one-channel first
convolution, ``prepare_model`` and ``prepare_data_loader``, and on every epoch *every
rank* saves ``model.pt`` and reports it. Only the imports changed: ``ray.train`` is
``hpctrain.train``, which mirrors its import paths. hpctrain keeps one ``model.pt`` in
the checkpoint — rank 0's — writes it to the run directory once, and warns once that
saving on rank 0 alone is cheaper.

Two stand-ins, because this machine has no network and no CPU torchvision:
``resnet18`` below is torchvision's ResNet-18 layout written with torch.nn, and
``FashionMNIST`` is a synthetic data set of the same shape (28×28 grayscale, 10
classes, fixed seed). Small by default so that it runs on a laptop CPU; the
environment variables QUICKSTART_SAMPLES, QUICKSTART_EPOCHS, QUICKSTART_BATCH and
QUICKSTART_WIDTH (64 is ResNet-18's) change the size.

    python examples/pytorch_quickstart.py [--workers 2] [--storage DIR]
"""
import argparse
import os
import tempfile

import torch
from torch.nn import CrossEntropyLoss
from torch.optim import Adam
from torch.utils.data import DataLoader, TensorDataset

import hpctrain.train.torch  # was: import ray.train.torch

SAMPLES = int(os.environ.get("QUICKSTART_SAMPLES", "256"))
EPOCHS = int(os.environ.get("QUICKSTART_EPOCHS", "2"))
BATCH = int(os.environ.get("QUICKSTART_BATCH", "32"))
WIDTH = int(os.environ.get("QUICKSTART_WIDTH", "64"))


# -- stand-ins for torchvision.models.resnet18 and torchvision.datasets.FashionMNIST --
class BasicBlock(torch.nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.relu = torch.nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = torch.nn.Sequential(
                torch.nn.Conv2d(cin, cout, 1, stride, bias=False), torch.nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(torch.nn.Module):
    """torchvision's ResNet-18 layout: stem, four stages of two basic blocks, head."""

    def __init__(self, num_classes=10, width=WIDTH):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(width)
        self.relu = torch.nn.ReLU(inplace=True)
        self.maxpool = torch.nn.MaxPool2d(3, 2, 1)
        stages, cin = [], width
        for i, cout in enumerate(width * m for m in (1, 2, 4, 8)):
            stages.append(torch.nn.Sequential(BasicBlock(cin, cout, 1 if i == 0 else 2),
                                              BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(num_classes=10):
    return ResNet18(num_classes)


def FashionMNIST(n=SAMPLES, seed=0):
    """28×28 grayscale images in 10 classes (labels from a fixed random teacher)."""
    images = torch.rand(n, 1, 28, 28, generator=torch.Generator().manual_seed(seed))
    teacher = torch.randn(28 * 28, 10, generator=torch.Generator().manual_seed(1234))
    return TensorDataset((images - 0.5) / 0.29, (images.flatten(1) @ teacher).argmax(1))


# -- Ray's quick start from here on ------------------------------------------------------
def train_func():
    # Model, Loss, Optimizer
    model = resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, WIDTH, kernel_size=(7, 7), stride=(2, 2),
                                  padding=(3, 3), bias=False)
    # [1] Prepare model.
    model = hpctrain.train.torch.prepare_model(model)
    criterion = CrossEntropyLoss()
    optimizer = Adam(model.parameters(), lr=0.001)

    # Data
    train_data = FashionMNIST()
    train_loader = DataLoader(train_data, batch_size=BATCH, shuffle=True)
    # [2] Prepare dataloader.
    train_loader = hpctrain.train.torch.prepare_data_loader(train_loader)

    # Training
    for epoch in range(EPOCHS):
        if hpctrain.train.get_context().get_world_size() > 1:
            train_loader.sampler.set_epoch(epoch)

        for images, labels in train_loader:
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        # [3] Report metrics and checkpoint: every rank saves model.pt, as in Ray's.
        metrics = {"loss": loss.item(), "epoch": epoch}
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            torch.save(model.module.state_dict(),
                       os.path.join(temp_checkpoint_dir, "model.pt"))
            hpctrain.train.report(
                metrics,
                checkpoint=hpctrain.train.Checkpoint.from_directory(temp_checkpoint_dir))
        if hpctrain.train.get_context().get_world_rank() == 0:
            print(metrics)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--storage", default=None, help="storage path (default ~/hpctrain_results)")
    args = ap.parse_args()

    # [4] Configure scaling and resource requirements.
    scaling_config = hpctrain.train.ScalingConfig(num_workers=args.workers, use_gpu=False)

    # [5] Launch distributed training job.
    trainer = hpctrain.train.torch.TorchTrainer(
        train_func,
        scaling_config=scaling_config,
        # [5a] On a cluster, the run directory goes on the shared filesystem.
        run_config=hpctrain.train.RunConfig(storage_path=args.storage),
    )
    result = trainer.fit()

    # [6] Load the trained model.
    with result.checkpoint.as_directory() as checkpoint_dir:
        model_state_dict = torch.load(os.path.join(checkpoint_dir, "model.pt"))
        model = resnet18(num_classes=10)
        model.conv1 = torch.nn.Conv2d(1, WIDTH, kernel_size=(7, 7), stride=(2, 2),
                                      padding=(3, 3), bias=False)
        model.load_state_dict(model_state_dict)
    print(f"checkpoint: {result.checkpoint.path}")
    print(f"loss after {EPOCHS} epochs: {result.metrics['loss']:.4f}")
