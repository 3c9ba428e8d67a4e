#!/usr/bin/env python3
"""A Lightning fit under hpctrain against the same fit under plain ``torchrun``, side by side.

The same LightningModule (the MLP 784→256→10 of DESIGN.md's workload), data, seeds and
per-epoch Lightning checkpoint in both:

* ``torchrun``: ``torchrun --nproc-per-node N this_file --role torchrun``; Lightning's own
  ``DDPStrategy`` (it detects torchrun's environment), a callback that saves
  ``checkpoint.ckpt`` each epoch with ``trainer.save_checkpoint``;
* ``hpctrain``: ``TorchTrainer(...).fit()`` (local launcher) running ``RayDDPStrategy`` +
  ``RayLightningEnvironment`` + ``RayTrainReportCallback`` (report + committed checkpoint
  each epoch), as Ray's Lightning guide does.

Figures (rank 0): start → end of the first epoch (from just before the launcher process
starts), and training steps/s over the epochs after the first. Ratios are hpctrain /
torchrun (≤ 1 is better for the first, ≥ 1 for the second).

    python bench/bench_lightning.py [--repeats 3] [--epochs 4] [--samples 8192] [--workers 2]
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------ the workload (both)
def build(samples, epochs, strategy, plugins, callbacks):
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    class MLP(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256),
                                           torch.nn.ReLU(), torch.nn.Linear(256, 10))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    pl.seed_everything(0, verbose=False)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(samples, 1, 28, 28, generator=g)
    teacher = torch.randn(784, 10, generator=torch.Generator().manual_seed(1234))
    loader = DataLoader(TensorDataset(x, (x.flatten(1) @ teacher).argmax(1)), batch_size=64,
                        shuffle=True)
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", strategy=strategy,
                         plugins=plugins, callbacks=callbacks, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, logger=False,
                         **({"devices": int(os.environ["WORLD_SIZE"])}
                            if os.environ.get("BENCH_ROLE") == "torchrun" else {"devices": "auto"}))
    return trainer, MLP(), loader


def timing_callback(out_file):
    import lightning.pytorch as pl

    class Timing(pl.Callback):
        def __init__(self):
            self.first_end = None
            self.after_first = None
            self.steps_at = 0

        def on_train_epoch_end(self, trainer, pl_module):
            if trainer.current_epoch == 0:
                self.first_end = time.time()

        def on_train_epoch_start(self, trainer, pl_module):
            if trainer.current_epoch == 1:
                self.after_first, self.steps_at = time.perf_counter(), trainer.global_step

        def on_train_end(self, trainer, pl_module):
            if trainer.global_rank == 0:
                steps = trainer.global_step - self.steps_at
                with open(out_file, "w") as f:
                    json.dump({"first_epoch_end": self.first_end,
                               "steps_per_s": steps / (time.perf_counter() - self.after_first)}, f)

    return Timing()


def torchrun_role(args):
    import lightning.pytorch as pl

    class SaveEachEpoch(pl.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            d = os.path.join(args.workdir, "torchrun-ckpt", str(trainer.current_epoch))
            os.makedirs(d, exist_ok=True)
            trainer.save_checkpoint(os.path.join(d, "checkpoint.ckpt"))

    trainer, model, loader = build(args.samples, args.epochs, "ddp", None,
                                   [SaveEachEpoch(), timing_callback(args.out)])
    trainer.fit(model, train_dataloaders=loader)


def hpctrain_train_func(config):
    from hpctrain.lightning import (RayDDPStrategy, RayLightningEnvironment,
                                    RayTrainReportCallback, prepare_trainer)

    trainer, model, loader = build(config["samples"], config["epochs"], RayDDPStrategy(),
                                   [RayLightningEnvironment()],
                                   [RayTrainReportCallback(), timing_callback(config["out"])])
    prepare_trainer(trainer).fit(model, train_dataloaders=loader)


def hpctrain_role(args):
    sys.path.insert(0, HERE)
    from bench_lightning import hpctrain_train_func
    from hpctrain import RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    TorchTrainer(hpctrain_train_func,
                 train_loop_config={"samples": args.samples, "epochs": args.epochs,
                                    "out": args.out},
                 scaling_config=ScalingConfig(num_workers=args.workers),
                 run_config=RunConfig(name="bench", storage_path=args.workdir, verbose=0)).fit()


# ------------------------------------------------------------------------ the driver
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(launcher, args, workdir):
    out = os.path.join(workdir, f"{launcher}.json")
    common = ["--samples", str(args.samples), "--epochs", str(args.epochs), "--workers",
              str(args.workers), "--workdir", workdir, "--out", out, "--role", launcher]
    if launcher == "torchrun":
        exe = os.path.join(os.path.dirname(sys.executable), "torchrun")
        exe = [exe] if os.access(exe, os.X_OK) else [sys.executable, "-m", "torch.distributed.run"]
        cmd = exe + ["--nproc-per-node", str(args.workers), "--master-port", str(free_port()),
                     os.path.abspath(__file__)] + common
    else:
        cmd = [sys.executable, os.path.abspath(__file__)] + common
    env = dict(os.environ, OMP_NUM_THREADS="1", BENCH_ROLE=launcher)
    t0 = time.time()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=args.timeout)
    with open(out) as f:
        r = json.load(f)
    return {"start_to_first_epoch_s": r["first_epoch_end"] - t0, "steps_per_s": r["steps_per_s"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--samples", type=int, default=8192)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", default=None)
    ap.add_argument("--role", choices=["torchrun", "hpctrain"], default=None)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.role == "torchrun":
        return torchrun_role(args)
    if args.role == "hpctrain":
        return hpctrain_role(args)
    runs = {"torchrun": [], "hpctrain": []}
    for i in range(args.repeats):
        for launcher in (("torchrun", "hpctrain") if i % 2 == 0 else ("hpctrain", "torchrun")):
            workdir = tempfile.mkdtemp(prefix="hpctrain-bench-lightning-")
            try:
                runs[launcher].append(one_run(launcher, args, workdir))
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
    med = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in runs.items()}
    print(f"Lightning fit, MLP 784-256-10, {args.samples} samples, {args.epochs} epochs, "
          f"{args.workers} Gloo workers, medians of {args.repeats}")
    print(f"{'figure':28} {'torchrun':>10} {'hpctrain':>10} {'ratio':>7}")
    for m, unit in (("start_to_first_epoch_s", "s"), ("steps_per_s", "/s")):
        a, b = med["torchrun"][m], med["hpctrain"][m]
        print(f"{m:28} {a:9.2f}{unit:<1} {b:9.2f}{unit:<1} {b / a:7.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "medians": med}, f, indent=1)


if __name__ == "__main__":
    main()
