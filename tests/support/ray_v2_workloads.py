"""Training functions of tests/local/test_ray_v2.py (imported by the workers too)."""
import json
import os
import tempfile
import time

import hpctrain
from hpctrain import Checkpoint, train
from hpctrain.train import collective
from hpctrain.train.context import TrainContext


def _out(name):
    d = os.path.join(hpctrain.get_context().get_run_dir(), "test-out")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def _dump(name, value):
    with open(_out(name), "w") as f:
        json.dump(value, f)


def report_three_checkpoints(config):
    """Rank 0 checkpoints ``{"epoch": i}`` at three reports (loss 3, 1, 2); after each,
    every rank records what get_all_reported_checkpoints() gives. Returns a value."""
    rank = train.get_context().get_world_rank()
    seen = []
    for i, loss in enumerate(config.get("losses", [3.0, 1.0, 2.0])):
        if rank == 0:
            d = tempfile.mkdtemp()
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"epoch": i}, f)
            train.report({"epoch": i, "loss": loss}, checkpoint=Checkpoint.from_directory(d))
        else:
            train.report({"epoch": i, "loss": loss})
        got = train.get_all_reported_checkpoints()
        seen.append([{"type": type(r).__name__, "dir": os.path.basename(r.checkpoint.path),
                      "epoch": r.metrics.get("epoch"), "loss": r.metrics.get("loss"),
                      "state": json.load(open(os.path.join(r.checkpoint.path,
                                                           "state.json")))}
                     for r in got])
    _dump(f"seen-rank-{rank}.json", seen)
    return {"rank": rank, "answer": 42}


def collectives(config):
    """Rank 1 sleeps before the barrier; every rank records when it got past it. Then
    rank 0 broadcasts a dict (the others pass their own, which is ignored)."""
    ctx = train.get_context()
    rank = ctx.get_world_rank()
    record = {"is_train_context": isinstance(ctx, TrainContext)}
    if rank == 1:
        time.sleep(config["sleep_s"])
    record["arrived"] = time.time()
    collective.barrier()
    record["passed"] = time.time()
    data = {"seed": 1234, "from": rank, "pad": "x" * config.get("pad", 0)}
    got = collective.broadcast_from_rank_zero(data if rank == 0 else {"from": rank})
    record["got"] = {k: v for k, v in got.items() if k != "pad"}
    record["pad"] = len(got["pad"])
    _dump(f"collective-rank-{rank}.json", record)


def both_ranks_raise(config):
    """Both ranks pass a barrier, then raise: rank 0 a ValueError, rank 1 a KeyError."""
    rank = train.get_context().get_world_rank()
    collective.barrier()
    if rank == 0:
        raise ValueError("rank 0: bad value")
    raise KeyError("rank 1: no such column")


def local_mode(config):
    """Three reports with a checkpoint each (a file whose content depends on the epoch and
    the world size); records the process it ran in. Raises at ``fail_at``."""
    ctx = train.get_context()
    _dump(f"pid-{ctx.get_world_size()}.json", {"pid": os.getpid()})
    for epoch in range(3):
        if epoch == config.get("fail_at"):
            raise ValueError(f"failed at epoch {epoch}")
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"epoch": epoch, "w": epoch * 0.5, "world": ctx.get_world_size()}, f)
        train.report({"epoch": epoch, "loss": 1.0 / (epoch + 1)},
                     checkpoint=Checkpoint.from_directory(d))
    return "done"
