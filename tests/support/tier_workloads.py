"""Training functions of the node-local checkpoint tier tests (imported by the workers).

No model: the state is the step number, written into a 1 MiB ``model.bin`` that every rank
saves (as DDP replicas do), so that a restored checkpoint proves which step it holds."""
import glob
import json
import os
import time

import hpctrain
from hpctrain import Checkpoint
from hpctrain.train import collective

SIZE = 1 << 20


def payload(step):
    head = f"step={step}\n".encode()
    return head + b"." * (SIZE - len(head))


def step_of(path):
    with open(os.path.join(path, "model.bin"), "rb") as f:
        return int(f.readline().decode().split("=")[1])


def _note(ctx, name, data):
    d = os.path.join(ctx.get_run_dir(), "test-out")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "w") as f:
        json.dump(data, f)


def _committed(run_dir, iteration):
    """The committed checkpoint of report ``iteration`` once its digests are written."""
    for d in glob.glob(os.path.join(run_dir, "checkpoints", "checkpoint_*")):
        try:
            with open(os.path.join(d, ".hpctrain_checkpoint.json")) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            continue
        if meta.get("iteration") == iteration and os.path.exists(
                os.path.join(d, ".hpctrain_digest.rank-0.json")):
            return d
    return None


def _flip(path):
    with open(path, "r+b") as f:
        f.seek(SIZE // 2)
        byte = f.read(1)
        f.seek(SIZE // 2)
        f.write(bytes([byte[0] ^ 0xFF]))


def counter(config):
    """Checkpoint ``model.bin`` at every step. In attempt 1, after the checkpoint of
    step ``fail_at`` is committed (drained and published), damage ``config["damage"]``
    ("shared": every committed payload's bytes on the shared copy, same size; "local":
    one byte of rank 0's local copy; "none"), then fail on every rank. ``hold``: instead
    of failing, rank 0 writes test-out/holding and the ranks wait there (a test requeues
    the job). Each attempt notes what its ranks restored."""
    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    ck = hpctrain.get_checkpoint()
    start = step_of(ck.path) + 1 if ck else 0
    if ck:
        _note(ctx, f"restored-{ctx.get_attempt()}-rank-{rank}.json",
              {"path": ck.path, "step": start - 1, "host": os.environ.get("SLURMD_NODENAME"),
               "job": os.environ.get("SLURM_JOB_ID")})
    src = os.path.join(ctx.get_run_dir(), "test-out", f"src-{rank}")
    for step in range(start, config["steps"]):
        os.makedirs(src, exist_ok=True)
        with open(os.path.join(src, "model.bin"), "wb") as f:
            f.write(payload(step))
        hpctrain.report({"step": step}, checkpoint=Checkpoint.from_directory(src))
        if ctx.get_attempt() == 1 and step == config.get("fail_at"):
            _fail_after_commit(ctx, rank, step + 1, config)


def _fail_after_commit(ctx, rank, iteration, config):
    run_dir = ctx.get_run_dir()
    # reports (no checkpoint) until rank 0 has published the checkpoint: the same number
    # on every rank (rank 0 decides)
    while not collective.broadcast_from_rank_zero(_committed(run_dir, iteration)
                                                  if rank == 0 else None):
        time.sleep(0.05)
        hpctrain.report({"waiting": 1})
    committed = collective.broadcast_from_rank_zero(_committed(run_dir, iteration))
    collective.barrier()
    if rank == 0:
        if config.get("damage") == "shared":
            with open(os.path.join(committed, "model.bin"), "r+b") as f:
                f.write(b"X" * SIZE)  # same size: only the content shows it
        elif config.get("damage") == "local":
            local = glob.glob(os.path.join(config["local_glob"], "rank-0",
                                           f"ckpt-{iteration:06d}", "model.bin"))
            assert len(local) == 1, local
            _flip(local[0])
    collective.barrier()
    if config.get("hold"):
        if rank == 0:
            _note(ctx, "holding", {"job": os.environ.get("SLURM_JOB_ID")})
        time.sleep(600)
    raise RuntimeError(f"rank {rank}: failing on purpose after report {iteration}")


def torch_state(config):
    """Torch state handed over without files (``state_dict_checkpoint``): written in the
    background, into the local tier, then drained. Notes each local copy's manifest."""
    import torch

    from hpctrain.worker.session import get_session
    from hpctrain.torch.checkpoints import state_dict_checkpoint

    ctx = hpctrain.get_context()
    seen = []
    for step in range(3):
        hpctrain.report({"step": step},
                        checkpoint=state_dict_checkpoint({"w": torch.full((4,), step)}))
        get_session().wait_for_commit()
        seen += [json.load(open(p))["files"] for p in glob.glob(os.path.join(
            config["local_glob"], "rank-0", f"ckpt-{step + 1:06d}", ".hpctrain_local.json"))]
    _note(ctx, "local-manifests.json", seen)
