"""Training functions that stop making progress on purpose, for the hang watchdog's tests.

``stalls``: the deterministic loop of ``workloads.deterministic`` (same steps, same
checkpoints every epoch), with a prepared data loader read each epoch. In the first
attempt, rank ``stall_rank`` stops at epoch ``stall_at``, ``how``:

* ``"allreduce"``: it sleeps before its step, so its peer waits inside DDP's allreduce;
* ``"loader"``: its data loader's dataset sleeps (a stalled filesystem read).

``HPCTRAIN_TEST_STALL_AT_IMPORT=1`` in the environment: rank 1 of the first attempt sleeps
while this module is imported, which the worker does when it loads the training function,
before the process group forms.
"""
import os
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset

import hpctrain
from workloads import _out, _resumable, _save_state, _train_step

FOREVER = 3600

if os.environ.get("HPCTRAIN_TEST_STALL_AT_IMPORT") == "1" and os.environ.get("RANK") == "1" \
        and os.environ.get("HPCTRAIN_ATTEMPT") == "1":
    time.sleep(FOREVER)  # start-up: rank 0 waits for it to form the process group


class _Data(Dataset):
    def __init__(self, stall: bool):
        self.stall = stall

    def __len__(self):
        return 32

    def __getitem__(self, i):
        if self.stall:
            time.sleep(FOREVER)  # a read that never returns
        return torch.tensor([float(i)])


def stalls(config):
    from hpctrain.torch import prepare_data_loader

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    model, opt, start, _ = _resumable("epoch")
    data = _Data(stall=False)
    loader = prepare_data_loader(DataLoader(data, batch_size=4))
    for epoch in range(start, config["epochs"]):
        here = ctx.get_attempt() == 1 and rank == config.get("stall_rank", 1) \
            and epoch == config.get("stall_at")
        data.stall = here and config.get("how") == "loader"
        for _ in loader:
            pass
        if here and config.get("how") == "allreduce":
            time.sleep(FOREVER)
        loss = _train_step(model, opt, epoch, rank)
        with tempfile.TemporaryDirectory() as d:
            ckpt = _save_state(model, opt, "epoch", epoch, d) if rank == 0 else None
            hpctrain.report({"loss": loss.item(), "epoch": epoch}, checkpoint=ckpt)
    if rank == 0:
        torch.save(model.module.state_dict(), _out("final.pt"))
