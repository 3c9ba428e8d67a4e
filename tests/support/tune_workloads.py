"""Training functions for the sweep tests (tests/local/test_tune.py, test_tune_slurm.py):
tiny, so a trial costs little more than its process start."""
import os
import time

import hpctrain
import hpctrain.callbacks


def docs_example(config):
    """The Ray Train docs' sweep example: nothing changes over the epochs, and the
    reported output is the input."""
    for _ in range(config["num_epochs"]):
        hpctrain.report({"output": config["input"]})


def gated(config):
    """The docs example, recording every start of the trial in <run>/starts.log; a trial
    whose input is in ``config["gated"]`` waits (at most 120 s) for the file
    ``config["gate"]`` before it reports its output, meanwhile reporting ``waiting`` and,
    when asked to (the scheduler's warning), a checkpoint."""
    ctx = hpctrain.get_context()
    with open(os.path.join(ctx.get_run_dir(), "starts.log"), "a") as f:
        f.write(f"{ctx.get_job_id()} {time.time()}\n")
    if config["input"] in config.get("gated", []):
        deadline = time.monotonic() + 120
        while not os.path.exists(config["gate"]) and time.monotonic() < deadline:
            ckpt = None
            if ctx.should_checkpoint():
                staging = ctx.get_checkpoint_staging_dir()
                with open(os.path.join(staging, "waited"), "w") as f:
                    f.write("1")
                ckpt = hpctrain.Checkpoint.from_directory(staging)
            hpctrain.report({"waiting": 1}, checkpoint=ckpt)
            time.sleep(0.25)
    for _ in range(config["num_epochs"]):
        hpctrain.report({"output": config["input"]})


def fails_on(config):
    """The docs example, raising for the input ``config["bad"]``."""
    if config["input"] == config["bad"]:
        raise ValueError(f"input {config['input']} is bad")
    docs_example(config)


def tune_function(config):
    """A Ray Tune function trainable: Ray 2's ``tune.report(dict)``, then Ray 1's
    ``tune.report(**kw)``."""
    from hpctrain import tune

    tune.report({"score": config["a"] * 10})
    tune.report(score=config["a"] * 10 + config["b"])


def frameworks_loaded(config):
    """A function trainable reporting which frameworks its worker process has imported."""
    import sys

    from hpctrain import tune

    import hpctrain

    for step in range(2):  # (two reports: with two ranks, two agreements)
        tune.report({"score": config["a"] + step,
                     "world_size": hpctrain.get_context().get_world_size(),
                     "loaded": ",".join(m for m in ("torch", "tensorflow")
                                        if m in sys.modules) or "none"})


def torch_regression(config):
    """A function trainable that uses torch itself, through hpctrain.torch's helpers
    (one rank): a line fitted for a few epochs; reports the loss, whether the model was
    wrapped and whether a process group exists."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset

    import hpctrain.torch
    from hpctrain import tune

    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 64).unsqueeze(1)
    loader = hpctrain.torch.prepare_data_loader(
        DataLoader(TensorDataset(x, 3 * x + 1), batch_size=16, shuffle=True))
    model = hpctrain.torch.prepare_model(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    for _ in range(config["epochs"]):
        for xb, yb in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
    tune.report({"loss": float(loss), "model": type(model).__name__,
                 "process_group": dist.is_initialized(), "batches": len(loader)})


def mpi_size(config):
    """The docs example under the mpi backend, also reporting the MPI world's size."""
    from mpi4py import MPI

    for _ in range(config["num_epochs"]):
        hpctrain.report({"output": config["input"], "size": MPI.COMM_WORLD.Get_size()})


class SetupRecorder(hpctrain.callbacks.Callback):
    """Writes, when its run ends, every run directory this instance was set up for into
    that run's ``setups.json``."""

    def __init__(self):
        self.runs = []

    def setup(self, run):
        self.runs.append(run.path)

    def on_end(self, status):
        import json

        with open(os.path.join(self.runs[-1], "setups.json"), "w") as f:
            json.dump(self.runs, f)
