"""A Ray Train 1.x script ("train_linear" style) running on hpctrain.

The only changes from the Ray 1.x original are the imports:

    from ray import train                          ->  from hpctrain import train
    from ray.train import Trainer, TrainingCallback ->  from hpctrain.train import ...
    from ray.train.callbacks import JsonLoggerCallback -> from hpctrain.train.callbacks import ...

Two workers fit y = 2x + 5 with a one-neuron linear model under DistributedDataParallel
(Gloo on CPU), report the validation loss every epoch, checkpoint the weights, and a
callback prints every worker's results on the driver. A second run resumes from the
first run's last checkpoint.

    python examples/legacy_api.py [--num-workers 2] [--epochs 4] [--logdir DIR]
"""
import argparse

import numpy as np
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from hpctrain import train
from hpctrain.train import Trainer, TrainingCallback
from hpctrain.train.callbacks import JsonLoggerCallback


class LinearDataset(torch.utils.data.Dataset):
    """Points on y = a * x + b."""

    def __init__(self, a, b, size=1000):
        x = np.linspace(0, 10, size, dtype=np.float32)
        self.x = torch.from_numpy(x).unsqueeze(1)
        self.y = torch.from_numpy(a * x + b).unsqueeze(1)

    def __getitem__(self, index):
        return self.x[index], self.y[index]

    def __len__(self):
        return len(self.x)


def train_epoch(loader, model, loss_fn, optimizer):
    model.train()
    for x, y in loader:
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def validate_epoch(loader, model, loss_fn):
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            total += loss_fn(model(x), y).item() * len(x)
            count += len(x)
    return {"loss": total / count}


def train_func(config):
    train_set = LinearDataset(2, 5, size=config["data_size"])
    val_set = LinearDataset(2, 5, size=config["val_size"])
    train_loader = DataLoader(train_set, batch_size=config["batch_size"],
                              sampler=DistributedSampler(train_set))
    val_loader = DataLoader(val_set, batch_size=config["batch_size"],
                            sampler=DistributedSampler(val_set))

    model = nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    start_epoch = 0
    checkpoint = train.load_checkpoint()
    if checkpoint:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        start_epoch = checkpoint["epoch"] + 1
    model = DistributedDataParallel(model)
    loss_fn = nn.MSELoss()

    results = []
    for epoch in range(start_epoch, start_epoch + config["epochs"]):
        train_loader.sampler.set_epoch(epoch)
        train_epoch(train_loader, model, loss_fn, optimizer)
        result = validate_epoch(val_loader, model, loss_fn)
        result["epoch"] = epoch
        train.report(**result)
        train.save_checkpoint(epoch=epoch, model=model.module.state_dict(),
                              optimizer=optimizer.state_dict())
        results.append(result)
    if train.world_rank() == 0:
        w, b = model.module.weight.item(), model.module.bias.item()
        print(f"fitted y = {w:.3f} x + {b:.3f} after epoch {epoch}")
    return results


class PrintingCallback(TrainingCallback):
    def handle_result(self, results, **info):
        losses = ", ".join(f"worker {i}: {r['loss']:.4f}" for i, r in enumerate(results))
        print(f"epoch {results[0]['epoch']} ({results[0]['_training_iteration']}) | {losses}")


def train_linear(num_workers=2, use_gpu=False, epochs=4, logdir=None):
    trainer = Trainer(backend="torch", num_workers=num_workers, use_gpu=use_gpu, logdir=logdir)
    config = {"lr": 1e-2, "batch_size": 32, "epochs": epochs, "data_size": 1000,
              "val_size": 400}
    trainer.start()
    results = trainer.run(train_func, config, callbacks=[PrintingCallback(),
                                                         JsonLoggerCallback()])
    print(f"run 1: final validation loss per worker: {[r[-1]['loss'] for r in results]}")
    print(f"run 1: checkpoints in {trainer.latest_checkpoint_dir}, "
          f"best {trainer.best_checkpoint_path}")

    # Continue training from the last checkpoint of the first run.
    results = trainer.run(train_func, config, callbacks=[PrintingCallback()],
                          checkpoint=trainer.latest_checkpoint)
    print(f"run 2: final validation loss per worker: {[r[-1]['loss'] for r in results]}")
    print(f"results in {trainer.logdir}")
    trainer.shutdown()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-workers", "-n", type=int, default=2)
    parser.add_argument("--use-gpu", action="store_true")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--logdir", default=None,
                        help="default: train_<date> under $HPCTRAIN_STORAGE_PATH or "
                             "~/hpctrain_results")
    args = parser.parse_args()
    train_linear(args.num_workers, args.use_gpu, args.epochs, args.logdir)
