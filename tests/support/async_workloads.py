"""Training functions of the asynchronous-checkpoint tests (imported by the workers too)."""
import errno
import json
import os
import signal
import threading
import time

import torch

import hpctrain
from hpctrain import Checkpoint
from workloads import _out, _resumable, _train_step


def _note(name, data):
    with open(_out(name), "w") as f:
        json.dump(data, f)


def _fixed_dir(ctx, name="src", root=None):
    """One directory this rank reuses for every checkpoint (as a loop that saves to the
    same path each epoch does): async reports must leave it free to reuse. ``root``:
    where (another filesystem, e.g. /dev/shm), else the run's test-out/."""
    d = os.path.join(root or os.path.join(ctx.get_run_dir(), "test-out"),
                     f"{name}-rank-{ctx.get_world_rank()}")
    os.makedirs(d, exist_ok=True)
    return d


def deterministic(config):
    """``workloads.deterministic`` with every rank saving its own state file into one
    reused directory and reporting it with ``config["mode"]``. ``kill_in_commit``:
    rank 0 of the first attempt SIGKILLs itself in the background commit of that epoch's
    checkpoint (after the previous checkpoint was committed)."""
    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    model, opt, start, ck = _resumable("epoch")
    if ck:
        _note(f"resumed-attempt-{ctx.get_attempt()}-rank-{rank}",
              {"checkpoint": os.path.basename(ck.path), "start": start})
    src = _fixed_dir(ctx, root=config.get("src_root"))
    for epoch in range(start, config["epochs"]):
        loss = _train_step(model, opt, epoch, rank)
        if epoch == config.get("kill_in_commit") and ctx.get_attempt() == 1 and rank == 0:
            # the previous epoch's checkpoint (report ``epoch``) is published by this
            # very report, while this one's commit runs; then this rank dies in it
            _wait_for_own_commit()  # the previous epoch's, so that only this one dies
            _die_in_background_commit(ctx, committed=epoch)
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                    "epoch": epoch}, os.path.join(src, "state.pt"))
        with open(os.path.join(src, f"rank-{rank}.txt"), "w") as f:
            f.write(f"{epoch}\n")
        hpctrain.report({"loss": loss.item(), "epoch": epoch},
                        checkpoint=Checkpoint.from_directory(src),
                        checkpoint_upload_mode=config.get("mode"))
        if config.get("mode") == "async":
            # the files were taken: the directory is the loop's own again
            assert os.listdir(src) == [], os.listdir(src)
    if rank == 0:
        torch.save(model.module.state_dict(), _out("final.pt"))


def _wait_for_own_commit():
    from hpctrain.worker.session import get_session

    get_session().wait_for_commit()


def _wait_committed(ctx, iteration):
    from hpctrain.rundir.layout import RunDir

    run = RunDir(ctx.get_run_dir())
    for _ in range(600):
        latest = run.latest_checkpoint()
        if iteration == 0 or (latest is not None and latest.iteration >= iteration):
            return
        time.sleep(0.05)


def _die_in_background_commit(ctx, committed):
    """SIGKILL this process from the commit thread, after its first file is placed and
    once the checkpoint of report ``committed`` is published."""
    import hpctrain.rundir.commit as commit

    real = commit._place

    def place_then_die(src, dst, move, run):
        real(src, dst, move, run)
        if threading.current_thread() is not threading.main_thread():
            _wait_committed(ctx, committed)
            os.kill(os.getpid(), signal.SIGKILL)

    commit._place = place_then_die


def _gate_commits(release_file, log):
    """From now on this rank's background commits wait (bounded) for ``release_file``
    before placing their files; ``log`` records whether each was released or timed out."""
    import hpctrain.rundir.commit as commit

    real = commit._place

    def gated(src, dst, move, run):
        if threading.current_thread() is not threading.main_thread():
            for _ in range(1200):  # 60 s at most: a report that waited would time out
                if os.path.exists(release_file):
                    log.append("released")
                    break
                time.sleep(0.05)
            else:
                log.append("timed out")
        real(src, dst, move, run)

    commit._place = gated


def waits(config):
    """Rank 0's background commits are held until the loop releases them:

    1. report(A, async) returns while A's commit is held (else it would time out);
    2. a report without a checkpoint returns too, and publishes nothing;
    3. after the release, report(B, async) waits for A's commit: A's shard is complete
       when it returns."""
    from hpctrain.rundir.layout import RunDir

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    run = RunDir(ctx.get_run_dir())
    release = _out("release")
    log = []
    if rank == 0:
        _gate_commits(release, log)
    seen = {}

    def shard(step):
        d = ctx.get_checkpoint_staging_dir() if config.get("staged") else _fixed_dir(ctx)
        with open(os.path.join(d, f"shard-{rank}.bin"), "wb") as f:
            f.write(bytes([step]) * (1 << 20))
        return Checkpoint.from_directory(d)

    hpctrain.report({"step": 0}, checkpoint=shard(0), checkpoint_upload_mode="async")
    seen["after_A"] = {"log": list(log), "committed": len(run.list_checkpoints())}
    hpctrain.report({"step": 1})
    seen["after_metrics"] = {"log": list(log), "committed": len(run.list_checkpoints())}
    if rank == 0:
        open(release, "w").close()
    hpctrain.report({"step": 2}, checkpoint=shard(2), checkpoint_upload_mode="async")
    manifest = os.path.join(run.staging_tmp(1), f".hpctrain_shard.rank-{rank}.json")
    published = [c for c in run.list_checkpoints() if c.iteration == 1]
    seen["after_B"] = {"log": list(log), "A_complete": os.path.exists(manifest) or bool(
        published and os.path.exists(os.path.join(published[0].path, f"shard-{rank}.bin")))}
    hpctrain.report({"step": 3})
    _note(f"waits-rank-{rank}", seen)


def fails(config):
    """Checkpoint 1 commits; the background commit of checkpoint 2 fails on rank
    ``fail_rank`` (EIO on its second file); the loop goes on reporting."""
    import hpctrain.rundir.commit as commit

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    src = _fixed_dir(ctx)
    for step in range(config.get("steps", 4)):
        for name in ("a.bin", "b.bin"):
            with open(os.path.join(src, f"{rank}-{name}"), "wb") as f:
                f.write(bytes([step]) * 100_000)
        if step == 1 and rank == config["fail_rank"]:
            _wait_for_own_commit()  # step 0's: only step 1's fails
            real, calls = commit._place, []

            def place_or_fail(s, d, move, run):
                calls.append(s)
                if len(calls) == 2:
                    raise OSError(errno.EIO, "Input/output error (injected)")
                real(s, d, move, run)

            commit._place = place_or_fail
        hpctrain.report({"step": step}, checkpoint=Checkpoint.from_directory(src)
                        if step < 2 else None, checkpoint_upload_mode="async")


def told(config):
    """Checkpoints when ``should_checkpoint()`` says so (rank 0's files, every rank asks
    and reports); each rank notes the reports after which it was told."""
    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    told_after = []
    for step in range(config["steps"]):
        ckpt = None
        if ctx.should_checkpoint():
            told_after.append(ctx.get_iteration())
            if rank == 0:
                d = _fixed_dir(ctx)
                with open(os.path.join(d, "step.txt"), "w") as f:
                    f.write(str(step))
                ckpt = Checkpoint.from_directory(d)
        time.sleep(config.get("sleep", 0))
        hpctrain.report({"step": step}, checkpoint=ckpt,
                        checkpoint_upload_mode=config.get("mode"))
    _note(f"told-rank-{rank}", told_after)


def torch_state(config):
    """``deterministic`` with the state handed over as a host-memory state dict
    (``state_dict_checkpoint``) or through ``torch.distributed.checkpoint.async_save``
    (``dcp_checkpoint``), committed asynchronously; the model changes right after each
    report (the next step) while the commit runs."""
    from hpctrain.torch.checkpoints import dcp_checkpoint, state_dict_checkpoint

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    model, opt, start, ck = _resumable("epoch")
    for epoch in range(start, config["epochs"]):
        loss = _train_step(model, opt, epoch, rank)
        if config["how"] == "dcp":
            ckpt = dcp_checkpoint({"model": model.module.state_dict()})
        else:
            ckpt = state_dict_checkpoint({"model": model.module.state_dict(),
                                          "opt": opt.state_dict(), "epoch": epoch}) \
                if rank == 0 else None
        hpctrain.report({"loss": loss.item(), "epoch": epoch}, checkpoint=ckpt,
                        checkpoint_upload_mode="async")
        with torch.no_grad():  # what the commit must not see
            kept = [p.detach().clone() for p in model.parameters()]
            for p in model.parameters():
                p.fill_(float("nan"))
            for p, k in zip(model.parameters(), kept):
                p.copy_(k)
    if rank == 0:
        torch.save(model.module.state_dict(), _out("final.pt"))


def stopped(config):
    """``deterministic`` with async checkpoints at every epoch, rank 0's background
    commits slowed (0.3 s before each file), and, in the first attempt, rank 1 asking for
    a stop (what the scheduler's warning signal does) just before the report of epoch
    ``stop_at``: that report must wait for epoch ``stop_at - 1``'s commit in flight and
    commit its own; the next report's checkpoint (every rank was told by then) is the
    stop's, and the training ends there."""
    import hpctrain.rundir.commit as commit
    from hpctrain.worker.session import request_stop

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    if rank == 0 and ctx.get_attempt() == 1:
        real = commit._place

        def slow(src, dst, move, run):
            if threading.current_thread() is not threading.main_thread():
                time.sleep(0.3)
            real(src, dst, move, run)

        commit._place = slow
    model, opt, start, ck = _resumable("epoch")
    if ck:
        _note(f"resumed-attempt-{ctx.get_attempt()}-rank-{rank}",
              {"checkpoint": os.path.basename(ck.path), "start": start})
    src = _fixed_dir(ctx)
    for epoch in range(start, config["epochs"]):
        loss = _train_step(model, opt, epoch, rank)
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                    "epoch": epoch}, os.path.join(src, "state.pt"))
        with open(os.path.join(src, f"rank-{rank}.txt"), "w") as f:
            f.write(f"{epoch}\n")
        if epoch == config["stop_at"] and ctx.get_attempt() == 1 and rank == 1:
            request_stop()
        hpctrain.report({"loss": loss.item(), "epoch": epoch},
                        checkpoint=Checkpoint.from_directory(src),
                        checkpoint_upload_mode="async")
    if rank == 0:
        torch.save(model.module.state_dict(), _out("final.pt"))


def hands_back(config):
    """Commits a checkpoint, then hands the committed directory back in (asynchronously)
    as the next report's checkpoint: it must be copied, not taken apart. A symbolic link
    in a directory of the loop's own is committed as the content it points at."""
    from hpctrain.rundir.layout import RunDir

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    src = _fixed_dir(ctx)
    with open(os.path.join(src, f"{rank}.bin"), "wb") as f:
        f.write(bytes([rank]) * 5000)
    target = os.path.join(ctx.get_run_dir(), "test-out", f"target-{rank}.txt")
    with open(target, "w") as f:
        f.write("pointed at\n")
    os.symlink(target, os.path.join(src, f"link-{rank}.txt"))
    hpctrain.report({"step": 0}, checkpoint=Checkpoint.from_directory(src),
                    checkpoint_upload_mode="async")
    _wait_for_own_commit()  # every rank: the next agreement publishes it
    hpctrain.report({"step": 1})
    _wait_committed(ctx, 1)
    latest = RunDir(ctx.get_run_dir()).latest_checkpoint()
    hpctrain.report({"step": 2}, checkpoint=latest.checkpoint() if rank == 0 else None,
                    checkpoint_upload_mode="async")
