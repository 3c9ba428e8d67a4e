"""Ray Train's "Get Started with PyTorch Lightning" guide, ported to hpctrain: the imports
changed, and the data.

Ray's guide trains a ResNet-18 on FashionMNIST downloaded by torchvision; this machine has
no network and no torchvision, so a synthetic FashionMNIST-shaped data set (28x28 images,
10 classes from a fixed random teacher) and a small convolutional network stand in. The
rest is the guide's code: Ray's strategy, environment, report callback and
``prepare_trainer``, under their Ray names. Like the guide's fault-tolerance section,
``train_func`` resumes from the run's latest checkpoint when there is one (after a
preemption or a requeue).

    python examples/lightning_quickstart.py [--workers 2] [--epochs 10] [--storage DIR]
"""
import argparse
import os

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

import hpctrain                              # was: import ray.train
import hpctrain.lightning                    # was: import ray.train.lightning
from hpctrain.torch import TorchTrainer      # was: from ray.train.torch import TorchTrainer


def fashion_mnist_like(n, seed):             # was: FashionMNIST(root=..., download=True, ...)
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 1, 28, 28, generator=g)
    teacher = torch.randn(28 * 28, 10, generator=torch.Generator().manual_seed(1234))
    labels = (images.flatten(1) @ teacher).argmax(1)
    return TensorDataset((images - 0.28604) / 0.32025, labels)


# Model, Loss, Optimizer
class ImageClassifier(pl.LightningModule):
    def __init__(self):
        super(ImageClassifier, self).__init__()
        self.model = torch.nn.Sequential(    # was: resnet18(num_classes=10)
            torch.nn.Conv2d(1, 8, kernel_size=5, stride=2), torch.nn.ReLU(),
            torch.nn.Flatten(), torch.nn.Linear(8 * 12 * 12, 10))
        self.criterion = torch.nn.CrossEntropyLoss()

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        outputs = self.forward(x)
        loss = self.criterion(outputs, y)
        self.log("loss", loss, on_step=True, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.model.parameters(), lr=0.001)


def train_func(config):
    # Data
    train_data = fashion_mnist_like(config.get("samples", 1024), seed=0)
    train_dataloader = DataLoader(train_data, batch_size=128, shuffle=True)

    # Training
    model = ImageClassifier()
    # [1] Configure PyTorch Lightning Trainer.
    trainer = pl.Trainer(
        max_epochs=config["epochs"],
        devices="auto",
        accelerator="auto",
        strategy=hpctrain.lightning.RayDDPStrategy(),
        plugins=[hpctrain.lightning.RayLightningEnvironment()],
        callbacks=[hpctrain.lightning.RayTrainReportCallback()],
        # [1a] Optionally, disable the default checkpointing behavior
        # in favor of the `RayTrainReportCallback` above.
        enable_checkpointing=False,
    )
    trainer = hpctrain.lightning.prepare_trainer(trainer)
    # [1b] Resume from the latest checkpoint after a preemption (Ray's fault-tolerance guide).
    checkpoint = hpctrain.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as ckpt_dir:
            ckpt_path = os.path.join(ckpt_dir, hpctrain.lightning.RayTrainReportCallback.CHECKPOINT_NAME)
            trainer.fit(model, train_dataloaders=train_dataloader, ckpt_path=ckpt_path)
    else:
        trainer.fit(model, train_dataloaders=train_dataloader)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--storage", default=None, help="storage path (default ~/hpctrain_results)")
    ap.add_argument("--name", default=None)
    ap.add_argument("--gpu", action="store_true", help="one GPU per worker (Ray's example: use_gpu=True)")
    args = ap.parse_args()

    # [2] Configure scaling and resource requirements.
    scaling_config = hpctrain.ScalingConfig(num_workers=args.workers, use_gpu=args.gpu)

    # [3] Launch distributed training job.
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"epochs": args.epochs},
        scaling_config=scaling_config,
        # [3a] On a cluster, the run's storage is a shared filesystem path.
        run_config=hpctrain.RunConfig(storage_path=args.storage, name=args.name),
    )
    result: hpctrain.Result = trainer.fit()

    # [4] Load the trained model.
    with result.checkpoint.as_directory() as checkpoint_dir:
        model = ImageClassifier.load_from_checkpoint(
            os.path.join(
                checkpoint_dir,
                hpctrain.lightning.RayTrainReportCallback.CHECKPOINT_NAME,
            ),
        )
    print(f"final loss {result.metrics['loss']:.4f} after epoch {result.metrics['epoch']}; "
          f"reloaded the model from {os.path.basename(result.checkpoint.path)}/"
          f"{hpctrain.lightning.RayTrainReportCallback.CHECKPOINT_NAME}")
