"""Training functions used by the multi-process tests (imported by the workers too)."""
import os
import signal
import socket
import tempfile

import torch
from torch import nn

import hpctrain
from hpctrain import Checkpoint


def _out(name):
    ctx = hpctrain.get_context()
    d = os.path.join(ctx.get_run_dir(), "test-out")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def ddp_sync(config):
    """Each rank trains on different data; DDP must keep the replicas identical."""
    from hpctrain.torch import prepare_model

    ctx = hpctrain.get_context()
    torch.manual_seed(0)  # same initial weights everywhere
    model = prepare_model(nn.Linear(8, 1))
    initial = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + ctx.get_world_rank())  # rank-dependent data
    for step in range(config["steps"]):
        x = torch.randn(16, 8, generator=g)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        hpctrain.report({"loss": loss.item(), "step": step})
    torch.save({"params": [p.detach() for p in model.parameters()], "initial": initial,
                "last_local_loss": loss.item(), "info": repr(ctx),
                "ranks": (ctx.get_world_rank(), ctx.get_local_rank(), ctx.get_node_rank(),
                          ctx.get_world_size(), ctx.get_local_world_size())},
               _out(f"rank-{ctx.get_world_rank()}.pt"))


def _wait_until_committed(ctx, iteration):
    """Wait (bounded) until the checkpoint of report ``iteration`` is committed. A rank
    other than 0 passes a report's agreement before rank 0 has published the checkpoint;
    a crash in that moment rightly loses the not-yet-committed checkpoint, which would
    make the tests' "resumed from checkpoint N" depend on timing."""
    import time

    from hpctrain.rundir.layout import RunDir

    run = RunDir(ctx.get_run_dir())
    for _ in range(400):
        latest = run.latest_checkpoint()
        if iteration == 0 or (latest is not None and latest.iteration >= iteration):
            return
        time.sleep(0.05)


def _resumable(key):
    """The deterministic loops' DDP model and optimizer, restored from the checkpoint to
    resume from: ``(model, opt, first index to train, checkpoint or None)``; the
    checkpoint's ``state.pt`` holds the last trained index under ``key``."""
    from hpctrain.torch import enable_reproducibility, prepare_model

    enable_reproducibility(0)
    model = prepare_model(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ck = hpctrain.get_checkpoint()
    if ck is None:
        return model, opt, 0, None
    st = torch.load(os.path.join(ck.path, "state.pt"))
    model.module.load_state_dict(st["model"])
    opt.load_state_dict(st["opt"])
    return model, opt, st[key] + 1, ck


def _train_step(model, opt, index, rank):
    """One step on this rank's data for ``index`` (the same data whatever the resume)."""
    g = torch.Generator().manual_seed(index * 10 + rank)
    x = torch.randn(32, 8, generator=g)
    loss = ((model(x) - torch.sin(x.sum(1, keepdim=True))) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def _save_state(model, opt, key, index, directory):
    torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), key: index},
               os.path.join(directory, "state.pt"))
    return Checkpoint.from_directory(directory)


def _crashes(config):
    """``[(attempt, rank, epoch, how)]``: ``crashes`` as given, else ``crash_at`` (rank
    ``crash_rank``, first attempt, ``crash_how``)."""
    if config.get("crashes"):
        return [tuple(c) for c in config["crashes"]]
    if config.get("crash_at") is None:
        return []
    return [(1, config.get("crash_rank", 1), config["crash_at"], config.get("crash_how"))]


def _crash_here(config, ctx, epoch):
    return any(attempt == ctx.get_attempt() and rank == ctx.get_world_rank() and at == epoch
               for attempt, rank, at, _ in _crashes(config))


def _crash_how(config, ctx):
    return next((how for attempt, rank, _, how in _crashes(config)
                if attempt == ctx.get_attempt() and rank == ctx.get_world_rank()), None)


def deterministic(config):
    """A resumable deterministic loop: checkpoints every epoch; with ``crash_at`` set it
    crashes rank ``crash_rank`` at that epoch in the first attempt only; ``crashes``:
    ``[[attempt, rank, epoch, how], ...]`` (how ``"sigkill"``, ``"sigusr2"`` or None: an
    exception)."""
    ctx = hpctrain.get_context()
    model, opt, start, ck = _resumable("epoch")
    if ck:
        with open(_out(f"resumed-attempt-{ctx.get_attempt()}-rank-{ctx.get_world_rank()}"), "w") as f:
            f.write(f"{ck.path}\n{start}\n{ctx.get_restart_count()}\n")
    for epoch in range(start, config["epochs"]):
        loss = _train_step(model, opt, epoch, ctx.get_world_rank())
        if _crash_here(config, ctx, epoch):
            _wait_until_committed(ctx, iteration=epoch)
            how = _crash_how(config, ctx)
            if how in ("sigkill", "sigusr2"):  # USR2: a signal hpctrain does not handle
                os.kill(os.getpid(), getattr(signal, how.upper()))
            raise RuntimeError(f"injected failure at epoch {epoch}")
        with tempfile.TemporaryDirectory() as d:
            ckpt = _save_state(model, opt, "epoch", epoch, d) if ctx.get_world_rank() == 0 \
                else None
            hpctrain.report({"loss": loss.item(), "epoch": epoch}, checkpoint=ckpt)
    if ctx.get_world_rank() == 0:
        torch.save(model.module.state_dict(), _out("final.pt"))


def scored(config):
    """Reports a checkpoint per score in config["scores"] (rank 0's files)."""
    ctx = hpctrain.get_context()
    for i, score in enumerate(config["scores"]):
        with tempfile.TemporaryDirectory() as d:
            ckpt = None
            if ctx.get_world_rank() == 0:
                with open(os.path.join(d, "value.txt"), "w") as f:
                    f.write(str(score))
                ckpt = Checkpoint.from_directory(d)
            hpctrain.report({"score": score, "i": i}, checkpoint=ckpt)


def sharded(config):
    """Every rank reports its own shard of one distributed checkpoint."""
    ctx = hpctrain.get_context()
    r = ctx.get_world_rank()
    for step in range(config.get("steps", 2)):
        d = ctx.get_checkpoint_staging_dir() if config.get("staged") else tempfile.mkdtemp()
        with open(os.path.join(d, f"shard-{r}.bin"), "wb") as f:
            f.write(bytes([r]) * (1000 + r) + bytes([step]))
        only = config.get("only_rank")
        hpctrain.report({"step": step}, checkpoint=Checkpoint.from_directory(d)
                        if only is None or only == r else None)


def same_names(config):
    """Every rank saves ``model.pt`` (as Ray's PyTorch quick start does), its own bytes:
    rank r's are ``bytes([r]) * model_size`` then the step; ranks 1 and up also save
    ``extra.bin`` (rank 0 does not), and every rank its own ``shard-<r>.bin`` (1001 bytes
    each, rank r's bytes then the step)."""
    ctx = hpctrain.get_context()
    r = ctx.get_world_rank()
    sizes = {"model.pt": config.get("model_size", 1000), f"shard-{r}.bin": 1000}
    if r > 0:
        sizes["extra.bin"] = 1000
    for step in range(config.get("steps", 3)):
        d = ctx.get_checkpoint_staging_dir() if config.get("staged") else tempfile.mkdtemp()
        for name, size in sizes.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(bytes([r]) * size + bytes([step]))
        hpctrain.report({"step": step}, checkpoint=Checkpoint.from_directory(d))


def fail_on_rank(config):
    ctx = hpctrain.get_context()
    hpctrain.report({"ok": 1})
    if ctx.get_world_rank() == config["rank"]:
        raise ValueError(f"boom on rank {ctx.get_world_rank()}")
    hpctrain.report({"ok": 2})  # the other ranks wait in the collective until stopped


def kill_during_checkpoint(config):
    """Commit checkpoint 0, then SIGKILL this rank while checkpoint 1's files are being
    copied (after the first file); the restart must resume from checkpoint 0."""
    import hpctrain.rundir.commit as commit

    ctx = hpctrain.get_context()
    ck = hpctrain.get_checkpoint()
    if ck is not None:
        with open(_out(f"resumed-from-{ctx.get_world_rank()}"), "w") as f:
            f.write(os.path.basename(ck.path) + "\n" + open(os.path.join(ck.path, "a.bin"), "rb").read()[:1].hex())
        hpctrain.report({"step": 99})
        return
    for step in range(2):
        d = tempfile.mkdtemp()
        for name in ("a.bin", "b.bin", "c.bin"):
            with open(os.path.join(d, name), "wb") as f:
                f.write(bytes([step]) * 100_000)
        if step == 1 and ctx.get_world_rank() == 0:
            real = commit.copy_file
            calls = []

            def copy_then_die(src, dst, *mode):
                calls.append(src)
                if len(calls) == 2:
                    os.kill(os.getpid(), signal.SIGKILL)
                return real(src, dst, *mode)

            commit.copy_file = copy_then_die
        hpctrain.report({"step": step},
                        checkpoint=Checkpoint.from_directory(d) if ctx.get_world_rank() == 0 else None)


def return_rank(config):
    hpctrain.report({"x": 1})
    return hpctrain.get_context().get_world_rank()


def data_shards(config):
    """Records which samples each rank saw in two epochs of a prepared DataLoader."""
    from torch.utils.data import DataLoader, TensorDataset

    from hpctrain.torch import get_device, prepare_data_loader

    ctx = hpctrain.get_context()
    ds = TensorDataset(torch.arange(config["n"]))
    loader = prepare_data_loader(DataLoader(ds, batch_size=3, shuffle=True))
    seen = []
    for epoch in range(2):
        seen.append([int(v) for (batch,) in loader for v in batch])
        hpctrain.report({"epoch": epoch})
    torch.save({"seen": seen, "device": str(get_device())}, _out(f"seen-{ctx.get_world_rank()}.pt"))


def slow_forever(config):
    import time

    for i in range(10_000):
        hpctrain.report({"i": i})
        time.sleep(0.05)


def slow_forever_deaf(config):
    """slow_forever in a rank that ignores SIGTERM (only SIGKILL ends it)."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    slow_forever(config)


#: What Ray's TorchTrainer sets in every worker's environment.
RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK")


def deterministic_with_info(config):
    """``deterministic``, after recording where this rank runs and what it derived."""
    import json

    ctx = hpctrain.get_context()
    info = {"rank": ctx.get_world_rank(), "local_rank": ctx.get_local_rank(),
            "node_rank": ctx.get_node_rank(), "world_size": ctx.get_world_size(),
            "local_world_size": ctx.get_local_world_size(),
            "node": os.environ.get("SLURMD_NODENAME", socket.gethostname()),
            "master_addr": os.environ.get("MASTER_ADDR"),
            "master_port": os.environ.get("MASTER_PORT"), "cwd": os.getcwd(),
            "job_id": ctx.get_job_id() if hasattr(ctx, "get_job_id") else None,
            "env": {k: os.environ.get(k) for k in RANK_VARS}}
    with open(_out(f"info-rank-{ctx.get_world_rank()}.json"), "w") as f:
        json.dump(info, f)
    print(f"rank {info['rank']} runs on {info['node']}", flush=True)
    deterministic(config)


def slow_checkpointing(config):
    """Runs until stopped, committing a checkpoint every 10 reports."""
    import time

    ctx = hpctrain.get_context()
    for i in range(100_000):
        ckpt = None
        if i % 10 == 0 and ctx.get_world_rank() == 0:
            ckpt = Checkpoint.from_dict({"i": i})
        hpctrain.report({"i": i}, checkpoint=ckpt)
        time.sleep(0.05)


def fill_disk(config):
    """Every rank hands in config["mib"] MiB of random bytes per report, forever: on a
    small filesystem a checkpoint eventually meets a full disk."""
    ctx = hpctrain.get_context()
    for epoch in range(config["epochs"]):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, f"shard-{ctx.get_world_rank()}.bin"), "wb") as f:
                f.write(os.urandom(config["mib"] << 20))
            hpctrain.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(d))


def on_demand(config):
    """A deterministic loop that checkpoints when the scheduler warned
    (``should_checkpoint()``) and, with ``every`` > 0, every ``every`` steps. Each rank
    records where each attempt started (``starts-rank-R.txt``) and the steps at which it
    saw the warning (``warned-rank-R.txt``). ``ignore_warning`` makes it a loop that does
    not checkpoint on demand (it is then stopped at the deadline). With ``sleep_attempts``
    only the first that many attempts sleep ``sleep`` per step (the last one then runs
    the remaining steps at full speed)."""
    import time

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    model, opt, start, ck = _resumable("step")
    with open(_out(f"starts-rank-{rank}.txt"), "a") as f:
        f.write(f"{ctx.get_attempt()} {start} {os.path.basename(ck.path) if ck else '-'} "
                f"{ctx.get_restart_count()} {ctx.get_job_id()}\n")
    with open(_out(f"hosts-rank-{rank}.txt"), "a") as f:  # where each attempt ran
        f.write(f"{ctx.get_attempt()} {socket.gethostname()}\n")
    every = config.get("every", 0)
    for step in range(start, config["steps"]):
        loss = _train_step(model, opt, step, rank)
        if ctx.get_attempt() <= config.get("sleep_attempts", ctx.get_attempt()):
            time.sleep(config.get("sleep", 0.0))
        warned = ctx.should_checkpoint() and not config.get("ignore_warning")
        if warned:
            with open(_out(f"warned-rank-{rank}.txt"), "a") as f:
                f.write(f"{ctx.get_attempt()} {step}\n")
        ckpt = None
        if rank == 0 and (warned or (every and (step + 1) % every == 0)):
            ckpt = _save_state(model, opt, "step", step, tempfile.mkdtemp())
        hpctrain.report({"loss": loss.item(), "step": step}, checkpoint=ckpt)
    if rank == 0:
        torch.save(model.module.state_dict(), _out("final.pt"))


def late_rank(config):
    """Fast reports behind a step that every rank takes together (an all_reduce, as DDP
    does), rank 1 ``late`` seconds late at every report; at step ``warn_at`` rank 1
    sends itself the warning signal. Rank 0 checkpoints when ``should_checkpoint()``.
    Each rank writes ``agreement-rank-R.json``: the reports at which its agreement
    waited for the other ranks (a blocking collective), the agreement rounds it took part
    in (report, the gap to the next agreement it chose), the step at which it saw the
    warning, and the report at which it stopped."""
    import json
    import time

    import torch.distributed as dist

    from hpctrain.common.context import get_session

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    session = get_session()
    coordinator, waited = session.coordinator, []
    blocking = coordinator.allreduce_max

    def counted(values):
        waited.append(session.iteration + 1)  # the report in progress
        return blocking(values)

    coordinator.allreduce_max = counted
    rounds, values_of = [], session._local_values

    def noted(iteration, *args, **kwargs):
        vote = values_of(iteration, *args, **kwargs)
        rounds.append([iteration, vote.gap])  # rank 0's gap: from the reports' pace
        return vote

    session._local_values = noted
    step_sync, warned = torch.ones(1), None
    try:
        for step in range(config["steps"]):
            dist.all_reduce(step_sync)
            if rank == 1:
                time.sleep(config["late"])
                if step == config["warn_at"]:
                    os.kill(os.getpid(), signal.SIGUSR1)
            ckpt = None
            if ctx.should_checkpoint():
                warned = step if warned is None else warned
                if rank == 0:
                    d = tempfile.mkdtemp()
                    with open(os.path.join(d, "step.txt"), "w") as f:
                        f.write(str(step))
                    ckpt = Checkpoint.from_directory(d)
            hpctrain.report({"step": step}, checkpoint=ckpt)
    finally:
        with open(_out(f"agreement-rank-{rank}.json"), "w") as f:
            json.dump({"waited": waited, "warned": warned, "stopped": session.iteration,
                       "rounds": rounds}, f)


#: A file only the container test's image holds (scripts/container-image.sh).
IMAGE_MARKER = "/etc/hpctrain-test-image"


def contained(config):
    """:func:`on_demand`, each rank first recording where it runs
    (``container-rank-R.txt``: the attempt, its node, and the test image's marker text, or
    ``host`` when the rank does not see the image)."""
    ctx = hpctrain.get_context()
    inside = "host"
    if os.path.exists(IMAGE_MARKER):
        with open(IMAGE_MARKER) as f:
            inside = f.read().strip()
    with open(_out(f"container-rank-{ctx.get_world_rank()}.txt"), "a") as f:
        f.write(f"{ctx.get_attempt()} {os.environ.get('SLURMD_NODENAME')} {inside}\n")
    on_demand(config)


def epoch_order(config):
    """Records the sample indices each rank sees in each epoch (``order-rank-R.jsonl``,
    one line per epoch and attempt) over a prepared, shuffled DataLoader or a shuffled
    dataset shard (``source``: "loader" or "shard"), resuming at the epoch after the
    checkpoint's. ``set_epoch``: "none" (the loop never sets it), "sampler" (Ray's
    ``train_loader.sampler.set_epoch(epoch)``) or "loader" (``loader.set_epoch``). With
    ``crash_at`` rank 1 fails after that epoch's pass in the first attempt."""
    import json

    from torch.utils.data import DataLoader

    from hpctrain.torch import prepare_data_loader

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    ck = hpctrain.get_checkpoint()
    start = ck.to_dict()["epoch"] + 1 if ck else 0
    if config.get("source") == "shard":
        shard = hpctrain.get_dataset_shard("train")
        passes = lambda: (int(v) for batch in shard.iter_batches(3) for v in batch)  # noqa: E731
    else:
        loader = prepare_data_loader(DataLoader(list(range(config["n"])), batch_size=3,
                                                shuffle=True))
        passes = lambda: (int(v) for batch in loader for v in batch)  # noqa: E731
    for epoch in range(start, config["epochs"]):
        if config.get("set_epoch") == "sampler":
            loader.sampler.set_epoch(epoch)
        elif config.get("set_epoch") == "loader":
            loader.set_epoch(epoch)
        seen = list(passes())
        with open(_out(f"order-rank-{rank}.jsonl"), "a") as f:
            f.write(json.dumps({"attempt": ctx.get_attempt(), "epoch": epoch,
                                "indices": seen}) + "\n")
        if config.get("crash_at") == epoch and rank == 1 and ctx.get_attempt() == 1:
            _wait_until_committed(ctx, iteration=epoch)
            raise RuntimeError(f"injected failure after epoch {epoch}")
        hpctrain.report({"epoch": epoch},
                        checkpoint=Checkpoint.from_dict({"epoch": epoch}) if rank == 0 else None)


class HoldsALock(Exception):
    """An exception that cannot be pickled (it holds a lock)."""

    def __init__(self, message):
        import threading

        super().__init__(message)
        self.lock = threading.Lock()


def fail_with(config):
    """Rank 1 raises ``KeyError`` (``error="key"``) or :class:`HoldsALock` after one
    report; the other ranks wait in the next one until stopped."""
    hpctrain.report({"ok": 1})
    if hpctrain.get_context().get_world_rank() == 1:
        if config["error"] == "key":
            raise KeyError("no such column: 'label'")
        raise HoldsALock("the lock was held")
    hpctrain.report({"ok": 2})


def handed_in_then_end(config):
    """Ray's persistence-test pattern: ``rounds`` times a metrics-only report, then a report
    with a checkpoint from rank 0 (its file ``i`` holds the round); then the training ends
    as ``config["end"]`` says: "raise" (every rank), "kill" (rank 1 SIGKILLs itself),
    "hang" (every rank sleeps). A resumed attempt (``get_checkpoint()``) records the round
    it resumed from in test-out/resumed and returns."""
    import signal
    import tempfile
    import time

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    ckpt = hpctrain.get_checkpoint()
    if ckpt is not None:
        if rank == 0:
            with open(_out("resumed"), "w") as f:
                f.write(open(os.path.join(ckpt.path, "i")).read())
        return
    for i in range(config.get("rounds", 5)):
        hpctrain.report({"i": i, "kind": "metrics"})
        with tempfile.TemporaryDirectory() as d:
            if rank == 0:
                with open(os.path.join(d, "i"), "w") as f:
                    f.write(str(i))
            hpctrain.report({"i": i, "kind": "checkpoint"},
                            checkpoint=hpctrain.Checkpoint.from_directory(d) if rank == 0
                            else None)
    end = config["end"]
    if end == "raise":
        raise RuntimeError("the training function raised after its last report")
    if end == "kill" and rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    if end == "hang":
        time.sleep(3600)


def warned_while_checkpointing(config):
    """Rank 0 hands in a checkpoint at every ``every``-th report (1: each; whatever
    ``should_checkpoint()`` says); rank 1 sends itself the warning signal at step
    ``warn_at``. Each rank writes ``told-rank-R.json``: the steps before
    whose report ``should_checkpoint()`` and ``get_preemption_info()`` said so, and the
    report it stopped at."""
    import json
    import time

    from hpctrain.common.context import get_session

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    told, informed = [], []
    try:
        for step in range(config["steps"]):
            if rank == 1 and step == config["warn_at"]:
                os.kill(os.getpid(), signal.SIGUSR1)
            if ctx.should_checkpoint():
                told.append(step)
            if hpctrain.get_preemption_info() is not None:
                informed.append(step)
            ckpt = None
            if rank == 0 and step % config.get("every", 1) == 0:
                d = tempfile.mkdtemp()
                with open(os.path.join(d, "step.txt"), "w") as f:
                    f.write(str(step))
                ckpt = Checkpoint.from_directory(d)
            hpctrain.report({"step": step}, checkpoint=ckpt)
            time.sleep(config.get("pause", 0.0))
    finally:
        with open(_out(f"told-rank-{rank}.json"), "w") as f:
            json.dump({"told": told, "informed": informed,
                       "stopped": get_session().iteration}, f)
