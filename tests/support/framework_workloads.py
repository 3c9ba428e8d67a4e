"""Training functions for the framework integrations (Lightning, Transformers,
Accelerate, DeepSpeed), imported by the worker processes of tests/local/test_frameworks.py."""
import json
import os
import signal
import time

import torch

import hpctrain


def _out(name):
    d = os.path.join(hpctrain.get_context().get_run_dir(), "test-out")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def _handler_name(signum):
    h = signal.getsignal(signum)
    return h.name if isinstance(h, signal.Handlers) else getattr(h, "__qualname__", repr(h))


def _regression_data(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = torch.sin(x.sum(1, keepdim=True))
    return torch.utils.data.TensorDataset(x, y)


# ----------------------------------------------------------------------------- Lightning
def lightning_deterministic(config):
    """A small deterministic Lightning fit (no dropout, seeded init and shuffling) with
    the Ray-style callbacks; resumes from hpctrain's checkpoint. ``step_sleep`` slows the
    steps (the weights do not depend on it) so that a test can warn mid-run. Records,
    from inside ``fit``, which signal handlers and cluster environment are in force."""
    import lightning.pytorch as pl
    from lightning.fabric.plugins.environments import SLURMEnvironment
    from torch.utils.data import DataLoader

    from hpctrain.lightning import (RayDDPStrategy, RayLightningEnvironment,
                                    RayTrainReportCallback, prepare_trainer)

    class Regressor(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                           torch.nn.Linear(16, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("loss", loss, on_step=False, on_epoch=True, sync_dist=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=config.get("lr", 0.01))

    class Probe(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            rank = trainer.global_rank
            with open(_out(f"probe-rank-{rank}.json"), "w") as f:
                json.dump({"sigusr1": _handler_name(signal.SIGUSR1),
                           "sigterm": _handler_name(signal.SIGTERM),
                           "environment": type(trainer.strategy.cluster_environment).__name__,
                           "world_size": trainer.world_size, "global_rank": rank,
                           "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                           # what Lightning would have picked by itself
                           "slurm_detected": SLURMEnvironment.detect(),
                           "host": os.environ.get("SLURMD_NODENAME"),
                           "node_rank": trainer.node_rank}, f)

        def on_train_batch_end(self, *args, **kwargs):
            time.sleep(config.get("step_sleep", 0.0))

    pl.seed_everything(0, verbose=False)
    model = Regressor()
    loader = DataLoader(_regression_data(config.get("samples", 64)), batch_size=8, shuffle=True)
    trainer = pl.Trainer(
        max_epochs=config["epochs"], devices="auto", accelerator="auto",
        strategy=RayDDPStrategy(), plugins=[RayLightningEnvironment()],
        callbacks=[RayTrainReportCallback(), Probe()], enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, logger=False,
        deterministic=True)
    trainer = prepare_trainer(trainer)
    ckpt = hpctrain.get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d:
            path = os.path.join(d, RayTrainReportCallback.CHECKPOINT_NAME)
            with open(_out(f"resumed-attempt-{hpctrain.get_context().get_attempt()}"), "w") as f:
                f.write(path)
            trainer.fit(model, train_dataloaders=loader, ckpt_path=path)
    else:
        trainer.fit(model, train_dataloaders=loader)


# -------------------------------------------------------------------------- Transformers
def transformers_resumable(config):
    """examples/transformers_quickstart.py's training function, with ``step_sleep``
    seconds added to each step (the weights do not depend on it) so that a test can
    warn mid-run."""
    import sys

    import transformers

    sys.path.insert(0, os.path.normpath(os.path.join(
        os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "examples")))
    import transformers_quickstart

    class Slow(transformers.TrainerCallback):
        def on_step_end(self, *args, **kwargs):
            time.sleep(config.get("step_sleep", 0.0))

    real_train = transformers.Trainer.train

    def train(self, *args, **kwargs):  # the example's trainer, slowed down
        self.add_callback(Slow())
        return real_train(self, *args, **kwargs)

    transformers.Trainer.train = train
    transformers_quickstart.train_func(config)


# ----------------------------------------------------------------------------- DeepSpeed
def deepspeed_resumable(config):
    """Ray's DeepSpeed loop on a small regression model: ZeRO stage ``zero_stage`` with
    torch's AdamW, every rank saves its shards with ``model.save_checkpoint`` and reports
    them; resumes with ``model.load_checkpoint``. With ``crash_at`` rank 1 fails after
    that epoch's checkpoint in the first attempt. ``step_sleep`` slows the steps (the weights
do not depend on it) so that a test can warn mid-run. Rank 0 writes the final weights."""
    import tempfile

    import deepspeed

    from workloads import _wait_until_committed

    ctx = hpctrain.get_context()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    ds_config = {
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "torch_adam": True}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3}},
        "zero_optimization": {"stage": config.get("zero_stage", 2)},
        "train_micro_batch_size_per_gpu": 8,
        "steps_per_print": 10**9,
    }
    model, optimizer, loader, lr_scheduler = deepspeed.initialize(
        model=net, model_parameters=net.parameters(), training_data=_regression_data(64),
        config=ds_config)
    from deepspeed.accelerator import get_accelerator

    with open(_out(f"deepspeed-rank-{ctx.get_world_rank()}"), "w") as f:
        f.write(f"DS_ACCELERATOR={os.environ.get('DS_ACCELERATOR')} "
                f"{get_accelerator().device_name()} {torch.distributed.get_backend()}")
    start = 0
    checkpoint = hpctrain.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            path, client_state = model.load_checkpoint(d)
        start = client_state["epoch"] + 1
        with open(_out(f"resumed-attempt-{ctx.get_attempt()}-rank-{ctx.get_world_rank()}"),
                  "w") as f:
            f.write(f"{os.path.relpath(path, d)} {start}")
    for epoch in range(start, config["epochs"]):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            model.backward(loss)
            model.step()
            time.sleep(config.get("step_sleep", 0.0))
        if (config.get("crash_at") == epoch and ctx.get_world_rank() == 1
                and ctx.get_attempt() == 1):
            _wait_until_committed(ctx, iteration=epoch)
            raise RuntimeError(f"injected failure at epoch {epoch}")
        with tempfile.TemporaryDirectory() as d:
            model.save_checkpoint(d, client_state={"epoch": epoch})
            torch.distributed.barrier()
            hpctrain.report({"loss": loss.item(), "epoch": epoch,
                             "lr": lr_scheduler.get_last_lr()[0]},
                            checkpoint=hpctrain.Checkpoint.from_directory(d))
    if ctx.get_world_rank() == 0:
        torch.save(model.module.state_dict(), _out("final.pt"))


# ---------------------------------------------------------------------------- Accelerate
def accelerate_resumable(config):
    """A small deterministic regression loop with an ``Accelerator`` (seeded init and
    shuffling by epoch, Adam, a step learning-rate schedule). It reports every epoch and checkpoints
    only when hpctrain asks (``get_context().should_checkpoint()``, after a warning) and
    at the last epoch, with ``accelerator.save_state(dir)`` on every rank (rank 0 writes
    the model, optimizer and scheduler, each rank its RNG states); it resumes with
    ``accelerator.load_state(dir)``. ``step_sleep`` slows the steps (the weights do not
    depend on it) so that a test can warn mid-run."""
    import tempfile

    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, set_seed

    ctx = hpctrain.get_context()
    set_seed(0)
    # the shuffled order follows from the seed and the epoch alone (loader.set_epoch)
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(
        use_seedable_sampler=True))
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.7)
    loader = torch.utils.data.DataLoader(_regression_data(64), batch_size=8, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(net, optimizer, loader, scheduler)
    start = 0
    checkpoint = hpctrain.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            accelerator.load_state(d)
            with open(os.path.join(d, "epoch.json")) as f:
                start = json.load(f)["epoch"] + 1
        with open(_out(f"resumed-attempt-{ctx.get_attempt()}-rank-{ctx.get_world_rank()}"),
                  "w") as f:
            f.write(f"epoch {start} of {accelerator.num_processes} processes")
    for epoch in range(start, config["epochs"]):
        loader.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            time.sleep(config.get("step_sleep", 0.0))
        metrics = {"loss": loss.item(), "epoch": epoch}
        if not (ctx.should_checkpoint() or epoch == config["epochs"] - 1):
            hpctrain.report(metrics)
            continue
        with tempfile.TemporaryDirectory() as d:
            accelerator.save_state(d)
            if accelerator.is_main_process:
                with open(os.path.join(d, "epoch.json"), "w") as f:
                    json.dump({"epoch": epoch}, f)
            hpctrain.report(metrics, checkpoint=hpctrain.Checkpoint.from_directory(d))
