"""A metric aggregated across workers with TorchMetrics, as the Ray Train docs show it,
on data sharded from an HDF5 file.

Each rank trains on its shard of ``train`` (shuffled per epoch, equal shards) and
evaluates its shard of ``val`` (``shuffle=False``: every row exactly once, shards differ
by at most one row, nothing padded). ``MulticlassAccuracy.compute()`` gathers the
metric's state from every rank, so every rank gets the accuracy of the *whole*
validation set — not an average of per-rank accuracies — and rank 0 reports it.

    python examples/torchmetrics_eval.py [--storage-path DIR] [--workers 2] [--epochs 3]

Needs ``pip install '.[torch,data]' torchmetrics``. The data (a small synthetic
classification problem) is written next to the runs the first time.
"""
import argparse
import os
import tempfile

import hpctrain
from hpctrain import Checkpoint, RunConfig, ScalingConfig
from hpctrain.data import HDF5Dataset
from hpctrain.torch import TorchTrainer

FEATURES, CLASSES = 16, 4


def make_data(path, rows, seed):
    """x ~ N(0, 1); y = the class a fixed linear map scores highest."""
    import h5py
    import numpy as np

    rng = np.random.default_rng(seed)
    w = np.random.default_rng(0).normal(size=(FEATURES, CLASSES))
    x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    y = (x @ w).argmax(axis=1).astype(np.int64)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=x, chunks=(128, FEATURES))
        f.create_dataset("y", data=y, chunks=(128,))


def make_model():
    import torch

    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, CLASSES))


def train_func(config):
    import torch
    import torchmetrics

    from hpctrain.torch import get_device, prepare_model

    torch.manual_seed(0)
    model = prepare_model(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    train = hpctrain.get_dataset_shard("train")
    val = hpctrain.get_dataset_shard("val")
    accuracy = torchmetrics.classification.MulticlassAccuracy(
        num_classes=CLASSES, average="micro").to(get_device())

    for epoch in range(config["epochs"]):
        model.train()
        for batch in train.iter_torch_batches(batch_size=64):
            loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
            opt.zero_grad()
            loss.backward()
            opt.step()

        # Evaluate with the bare module: a DDP forward may run collectives, and the
        # ranks' validation shards can differ by one row (so by one batch).
        net = getattr(model, "module", model)
        net.eval()
        accuracy.reset()
        rows = 0
        with torch.no_grad():
            for batch in val.iter_torch_batches(batch_size=128):
                accuracy.update(net(batch["x"]), batch["y"])
                rows += len(batch["y"])
        val_accuracy = accuracy.compute().item()  # gathered from every rank: all agree

        with tempfile.TemporaryDirectory() as d:
            checkpoint = None
            if hpctrain.get_context().get_world_rank() == 0:
                torch.save(net.state_dict(), os.path.join(d, "model.pt"))
                checkpoint = Checkpoint.from_directory(d)
            hpctrain.report({"epoch": epoch, "loss": loss.item(),
                             "val_accuracy": val_accuracy, "val_rows_rank0": rows},
                            checkpoint=checkpoint)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--storage-path", default=os.path.expanduser("~/hpctrain_results"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--name", default="torchmetrics_eval")
    args = p.parse_args(argv)

    data = os.path.join(args.storage_path, "torchmetrics_data")
    os.makedirs(data, exist_ok=True)
    train_h5, val_h5 = os.path.join(data, "train.h5"), os.path.join(data, "val.h5")
    if not os.path.exists(val_h5):
        make_data(train_h5, 4000, seed=1)
        make_data(val_h5, 1001, seed=2)  # 1001 rows: does not divide by the workers

    result = TorchTrainer(
        train_func, train_loop_config={"lr": 0.2, "epochs": args.epochs},
        scaling_config=ScalingConfig(num_workers=args.workers),
        run_config=RunConfig(name=args.name, storage_path=args.storage_path),
        datasets={"train": f"{train_h5}:x,y",
                  "val": HDF5Dataset(val_h5, ["x", "y"], shuffle=False)},
    ).fit()
    print(f"validation accuracy over all {args.workers} workers: "
          f"{result.metrics['val_accuracy']:.4f}")
    return result


if __name__ == "__main__":
    main()
