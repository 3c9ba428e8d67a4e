#!/usr/bin/env python3
"""hpctrain on a GPU machine: the checks ``scripts/gpu-check.sh`` runs, and one table.

    python3 scripts/gpu_check.py                 # every check, then the table (≤ 8 min)
    python3 scripts/gpu_check.py --only fsdp     # one check
    python3 scripts/gpu_check.py --cpu           # the same code paths on CPU ranks (Gloo,
                                                 # fp32): to try the script where no GPU is

Each check runs in a process of its own with its own time limit, so one that fails or hangs
leaves the others their say; every check trains through hpctrain's public API
(``TorchTrainer`` with ``ScalingConfig(use_gpu=True)``, ``report(..., checkpoint=)``,
``FailureConfig``), asserts an outcome a user cares about (the backend the ranks got, the
device each rank is bound to, the final weights after a crash and a resume against an
uninterrupted run, the state a checkpoint holds), and prints one line ``GPUCHECK {json}``.

The table goes to stdout (Markdown) and, with ``--out DIR``, to ``DIR/gpu-check.md`` and
``DIR/gpu-check.json``. Exit status: 0 when no check failed (skips are not failures).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOTAL_BUDGET_S = 480.0  # the whole script, start to table (the device check's size)
# this checkout's hpctrain, installed or not (a GPU machine may get a bare copy of the tree);
# the ranks and the bench's runs inherit it
sys.path.insert(0, ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)


# -- what every check shares (runs inside the check's own process) ---------------------------
def _scaling(device: str, workers: int = 1):
    from hpctrain import ScalingConfig

    return ScalingConfig(num_workers=workers, use_gpu=(device == "cuda"))


def _run_config(name: str, storage: str, **kw):
    from hpctrain import RunConfig

    return RunConfig(name=name, storage_path=storage, **kw)


def _digest(state: Dict[str, Any]) -> str:
    """sha256 of a state dict's tensors, in key order, as bytes on the host."""
    import torch

    h = hashlib.sha256()
    for key in sorted(state):
        value = state[key]
        if hasattr(value, "full_tensor"):  # a DTensor (FSDP's sharded state)
            value = value.full_tensor()
        if isinstance(value, torch.Tensor):
            h.update(key.encode())
            h.update(value.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def _deterministic() -> None:
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def _model(device):
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 4)).to(device)


def _data(device, n: int = 256):
    import torch

    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 32, generator=g)
    y = (x[:, :4] * 3).argmax(1)
    return x.to(device), y.to(device)


# -- the checks -----------------------------------------------------------------------------------
def check_gpu(device: str, storage: str) -> Tuple[str, str]:
    import torch

    if device != "cuda":
        return "ok", f"CPU dry run: torch {torch.__version__}"
    n = torch.cuda.device_count()
    names = sorted({torch.cuda.get_device_name(i) for i in range(n)})
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else "?"
    return "ok", (f"{n} × {', '.join(names)}; torch {torch.__version__}, CUDA "
                  f"{torch.version.cuda}, NCCL {nccl}")


def _pg_train(config):
    import torch
    import torch.distributed as dist

    import hpctrain
    from hpctrain.torch import get_device, get_devices

    ctx = hpctrain.get_context()
    dev = get_device()
    t = torch.full((4,), float(ctx.get_world_rank() + 1), device=dev)
    dist.all_reduce(t)
    hpctrain.report({
        "backend": dist.get_backend(), "world": ctx.get_world_size(),
        "devices": [str(d) for d in get_devices()],
        "current": torch.cuda.current_device() if dev.type == "cuda" else -1,
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)"),
        "allreduce": t.tolist(), "tensor_device": str(t.device),
        "bound": str(getattr(dist.group.WORLD, "bound_device_id", None))})


def _process_group(device: str, storage: str, workers: int) -> Tuple[str, str]:
    from hpctrain.torch import TorchTrainer

    result = TorchTrainer(_pg_train, scaling_config=_scaling(device, workers),
                          run_config=_run_config(f"pg-{workers}", storage)).fit()
    m = result.metrics
    want_backend = "nccl" if device == "cuda" else "gloo"
    want_sum = float(workers * (workers + 1) // 2)
    want_dev = f"{device}:0" if device == "cuda" else "cpu"
    problems = []
    if m["backend"] != want_backend:
        problems.append(f"backend {m['backend']}, expected {want_backend}")
    if m["allreduce"] != [want_sum] * 4:
        problems.append(f"allreduce gave {m['allreduce']}, expected {want_sum}")
    if m["devices"][0] != want_dev or not m["tensor_device"].startswith(device):
        problems.append(f"rank 0 devices {m['devices']}, expected [{want_dev}]")
    if device == "cuda" and m["bound"] != want_dev:  # else NCCL guesses the GPU from the rank
        problems.append(f"the process group is bound to {m['bound']}, expected {want_dev}")
    detail = (f"backend {m['backend']}, world {m['world']}, rank 0 get_devices() = "
              f"{m['devices']}, group bound to {m['bound']}, CUDA_VISIBLE_DEVICES="
              f"{m['visible']}, all_reduce = "
              f"{m['allreduce'][0]:g}")
    return ("FAIL", "; ".join(problems) + f" ({detail})") if problems else ("ok", detail)


def check_pg1(device: str, storage: str) -> Tuple[str, str]:
    return _process_group(device, storage, 1)


def check_pg2(device: str, storage: str) -> Tuple[str, str]:
    import torch

    if device == "cuda" and torch.cuda.device_count() < 2:
        return "skip", f"{torch.cuda.device_count()} GPU here; needs 2"
    return _process_group(device, storage, 2)


def _ddp_train(config):
    import tempfile as tf

    import torch
    from torch.nn.parallel import DistributedDataParallel

    import hpctrain
    from hpctrain import Checkpoint
    from hpctrain.torch import get_device

    _deterministic()
    dev = get_device()
    model = DistributedDataParallel(_model(dev), device_ids=[dev.index] if dev.type == "cuda"
                                    else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = _data(dev)
    start, resumed_from = 0, -1
    ckpt = hpctrain.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), map_location=dev)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = resumed_from = state["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        if epoch == config.get("crash_at") and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError("planted crash")
        for i in range(0, len(x), 32):
            loss = torch.nn.functional.cross_entropy(model(x[i:i + 32]), y[i:i + 32])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with tf.TemporaryDirectory() as d:
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                        "epoch": epoch}, os.path.join(d, "state.pt"))
            hpctrain.report({"epoch": epoch, "loss": loss.item(), "resumed_from": resumed_from,
                             "digest": _digest(model.module.state_dict())},
                            checkpoint=Checkpoint.from_directory(d))


def check_ddp(device: str, storage: str) -> Tuple[str, str]:
    from hpctrain import FailureConfig
    from hpctrain.torch import TorchTrainer

    def fit(name, **cfg):
        return TorchTrainer(_ddp_train, train_loop_config=dict(epochs=4, **cfg),
                            scaling_config=_scaling(device),
                            run_config=_run_config(name, storage,
                                                   failure_config=FailureConfig(max_failures=1))
                            ).fit()

    plain = fit("ddp-plain")
    crashed = fit("ddp-crash", crash_at=2, marker=os.path.join(storage, "crashed"))
    a, b = plain.metrics, crashed.metrics
    detail = (f"crash in epoch 2 → restarted from the checkpoint of epoch "
              f"{b['resumed_from'] - 1}; final weights {b['digest']} vs uninterrupted "
              f"{a['digest']}")
    if b["resumed_from"] != 2 or b["epoch"] != 3:
        return "FAIL", f"resumed at epoch {b['resumed_from']}, ended at {b['epoch']} ({detail})"
    if a["digest"] != b["digest"]:
        return "FAIL", "final weights differ: " + detail
    return "ok", detail + " (bit-identical)"


def _fsdp_train(config):
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         set_model_state_dict)
    from torch.distributed.fsdp import FullyShardedDataParallel

    import hpctrain
    from hpctrain.torch import get_device
    from hpctrain.torch.checkpoints import dcp_checkpoint

    dev = get_device()
    model = FullyShardedDataParallel(_model(dev), device_id=dev if dev.type == "cuda" else None,
                                     use_orig_params=True)
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    ckpt = hpctrain.get_checkpoint()
    if ckpt is not None:  # the second run: load what the first committed
        state = {"model": get_model_state_dict(model)}
        dcp.load(state, checkpoint_id=ckpt.path)
        set_model_state_dict(model, state["model"])
        hpctrain.report({"loaded": _digest(get_model_state_dict(model, options=full))})
        return
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = _data(dev)
    for step in range(10):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 0:
            first = loss.item()
    digest = _digest(get_model_state_dict(model, options=full))
    hpctrain.report({"saved": digest, "first_loss": first, "loss": loss.item(),
                     "sharded_type": type(next(iter(get_model_state_dict(model).values()))
                                          ).__name__},
                    checkpoint=dcp_checkpoint({"model": get_model_state_dict(model)}),
                    checkpoint_upload_mode="async")


def check_fsdp(device: str, storage: str) -> Tuple[str, str]:
    from hpctrain.torch import TorchTrainer

    if device != "cuda":
        return "skip", "FSDP needs an accelerator"

    first = TorchTrainer(_fsdp_train, scaling_config=_scaling(device),
                         run_config=_run_config("fsdp", storage)).fit()
    second = TorchTrainer(_fsdp_train, scaling_config=_scaling(device),
                          run_config=_run_config("fsdp-load", storage),
                          resume_from_checkpoint=first.checkpoint).fit()
    a, b = first.metrics, second.metrics
    detail = (f"FullyShardedDataParallel, 10 AdamW steps (loss {a['first_loss']:.3f} → "
              f"{a['loss']:.3f}), DCP async checkpoint ({a['sharded_type']}) loaded by a new "
              f"run: {b['loaded']} vs saved {a['saved']}")
    if a["loss"] >= a["first_loss"] or a["saved"] != b["loaded"]:
        return "FAIL", detail
    return "ok", detail


def _ds_train(config):
    import tempfile as tf

    import deepspeed
    import torch

    import hpctrain
    from hpctrain import Checkpoint
    from hpctrain.torch import get_device

    dev = get_device()
    fp16 = dev.type == "cuda"
    ds_config = {"train_micro_batch_size_per_gpu": 32, "gradient_accumulation_steps": 1,
                 "zero_optimization": {"stage": 2},
                 "fp16": {"enabled": fp16, "initial_scale_power": 8},
                 "steps_per_print": 1000}
    model = _model(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_config)
    x, y = _data(dev)
    if fp16:
        x = x.half()
    ckpt = hpctrain.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            engine.load_checkpoint(d, tag="ds")
        hpctrain.report({"loaded": _digest(engine.module.state_dict()),
                         "step": engine.global_steps})
        return
    losses = []
    for epoch in range(3):
        for i in range(0, len(x), 32):
            loss = torch.nn.functional.cross_entropy(engine(x[i:i + 32]).float(), y[i:i + 32])
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
    with tf.TemporaryDirectory() as d:
        engine.save_checkpoint(d, tag="ds")
        hpctrain.report({"saved": _digest(engine.module.state_dict()), "first_loss": losses[0],
                         "loss": losses[-1], "step": engine.global_steps, "fp16": fp16,
                         "zero": engine.zero_optimization_stage(),
                         "skipped": engine.skipped_steps},
                        checkpoint=Checkpoint.from_directory(d))


def check_deepspeed(device: str, storage: str) -> Tuple[str, str]:
    try:
        import deepspeed
    except ImportError as e:
        return "skip", f"deepspeed not importable here ({e})"
    from hpctrain.torch import TorchTrainer

    first = TorchTrainer(_ds_train, scaling_config=_scaling(device),
                         run_config=_run_config("deepspeed", storage)).fit()
    second = TorchTrainer(_ds_train, scaling_config=_scaling(device),
                          run_config=_run_config("deepspeed-load", storage),
                          resume_from_checkpoint=first.checkpoint).fit()
    a, b = first.metrics, second.metrics
    detail = (f"DeepSpeed {deepspeed.__version__} ZeRO-{a['zero']}, fp16={a['fp16']}, "
              f"{a['step']} steps ({a['skipped']} skipped by the loss scaler), loss "
              f"{a['first_loss']:.3f} → {a['loss']:.3f}; checkpoint loaded by a new run at step "
              f"{b['step']}: {b['loaded']} vs saved {a['saved']}")
    if a["loss"] >= a["first_loss"] or a["saved"] != b["loaded"] or b["step"] != a["step"]:
        return "FAIL", detail
    return "ok", detail


def _async_train(config):
    import torch

    import hpctrain
    from hpctrain.torch import get_device
    from hpctrain.torch.checkpoints import state_dict_checkpoint

    dev = get_device()
    model = _model(dev)
    big = torch.nn.Parameter(torch.randn(config["mib"] << 18, device=dev))  # MiB of float32
    took = []
    for i in range(4):
        state = {"model": model.state_dict(), "big": big.data}
        digest = _digest(state)
        t = time.perf_counter()
        hpctrain.report({"i": i, "digest": digest, "on": str(big.device)},
                        checkpoint=state_dict_checkpoint(state),
                        checkpoint_upload_mode="async")
        took.append((time.perf_counter() - t) * 1e3)
        with torch.no_grad():  # the training changes the tensors as soon as report() returns
            big.add_(1.0)
            for p in model.parameters():
                p.mul_(0.5)
        time.sleep(config["step_s"])  # the training between two checkpoints
    hpctrain.report({"report_ms": took, "on": str(big.device)})


def check_async(device: str, storage: str) -> Tuple[str, str]:
    import torch

    from hpctrain import CheckpointConfig
    from hpctrain.torch import TorchTrainer

    mib = 256 if device == "cuda" else 16
    result = TorchTrainer(_async_train, train_loop_config={"mib": mib, "step_s": 1.0},
                          scaling_config=_scaling(device),
                          run_config=_run_config("async", storage, checkpoint_config=
                                                 CheckpointConfig(num_to_keep=None))).fit()
    bad, ms = [], result.metrics["report_ms"]
    for ckpt, metrics in result.best_checkpoints:
        with ckpt.as_directory() as d:
            held = _digest(torch.load(os.path.join(d, "state.pt"), map_location="cpu"))
        if held != metrics["digest"]:
            bad.append(f"checkpoint {metrics['i']} holds {held}, reported {metrics['digest']}")
    detail = (f"{len(result.best_checkpoints)} async checkpoints of {mib} MiB on "
              f"{result.metrics['on']}, each changed in place right after report(), 1 s apart; report() "
              f"took {ms[0]:.1f} ms the first time, then {min(ms[1:]):.1f}–{max(ms[1:]):.1f} ms "
              "(the copy to host memory included); every committed file holds the state at "
              "its report" if not bad else "; ".join(bad))
    return ("FAIL" if bad or len(result.best_checkpoints) != 4 else "ok"), detail


def check_frameworks(device: str, storage: str) -> Tuple[str, str]:
    """The Lightning, Accelerate and Transformers examples, 1 worker, 1 epoch."""
    done, failed = [], []
    for example in ("lightning_quickstart", "accelerate_quickstart", "transformers_quickstart"):
        cmd = [sys.executable, os.path.join(ROOT, "examples", example + ".py"), "--workers", "1",
               "--epochs", "1", "--storage", storage, "--name", example]
        if device == "cuda":
            cmd.append("--gpu")
        t = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
        took = f"{example.split('_')[0]} {time.time() - t:.0f} s"
        if p.returncode == 0:
            done.append(took)
        else:
            print(p.stdout[-3000:], p.stderr[-3000:], file=sys.stderr)
            last = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["?"]
            failed.append(f"{took}: exit {p.returncode}: {last[0][:200]}")
    detail = "examples/*_quickstart.py --workers 1 --epochs 1" + (" --gpu" if device == "cuda"
                                                                  else "") + ": "
    if failed:
        return "FAIL", detail + "; ".join(failed + [d + " ok" for d in done])
    return "ok", detail + ", ".join(done) + ", each exit 0"


HANG_LIMIT_S = 15  # FailureConfig(hang_timeout=...): above a healthy start-up's imports
HANG_EPOCHS, HANG_AT = 4, 2


def _spin_gpu_forever() -> None:
    """Queue GPU kernels that spin for minutes, then wait for them: the host thread is
    blocked in ``synchronize()`` as in a collective whose peer never comes."""
    import torch

    for _ in range(200):
        torch.cuda._sleep(1_000_000_000)  # about half a second each, in GPU clock cycles
    torch.cuda.synchronize()


def _hang_train(config):
    """``epochs`` epochs, each an all_reduce and a checkpoint of the running total (rank 0);
    in the first attempt, at epoch ``stall_at``: with 2 ranks the last never joins the
    all_reduce (rank 0 waits inside it), with 1 rank its GPU stream never finishes."""
    import tempfile

    import torch
    import torch.distributed as dist

    import hpctrain
    from hpctrain.torch import get_device

    ctx = hpctrain.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    dev = get_device()
    start, total = 0, 0.0
    ckpt = hpctrain.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            with open(os.path.join(d, "state.json")) as f:
                saved = json.load(f)
        start, total = saved["epoch"] + 1, saved["total"]
    for epoch in range(start, config["epochs"]):
        time.sleep(0.3)  # a step
        stall = ctx.get_attempt() == 1 and epoch == config["stall_at"]
        if stall and world > 1 and rank == world - 1:
            time.sleep(3600)  # never joins the all_reduce below
        if stall and world == 1:
            _spin_gpu_forever()
        t = torch.full((4,), float(epoch + 1), device=dev)
        dist.all_reduce(t)
        total += t[0].item()  # the host waits for the collective's result
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"epoch": epoch, "total": total}, f)
            hpctrain.report({"epoch": epoch, "total": total},
                            checkpoint=hpctrain.Checkpoint.from_directory(d) if rank == 0
                            else None)


def check_hang(device: str, storage: str) -> Tuple[str, str]:
    """A hang inside a collective: detected by the watchdog within its limit, every rank's
    stack written, the run restarted from its last checkpoint and finished with the total
    of an uninterrupted run. 2 ranks where 2 GPUs (or the CPU dry run's Gloo ranks) are; on
    1 GPU, 1 rank whose GPU stream never finishes."""
    import re

    import torch

    from hpctrain import FailureConfig
    from hpctrain.rundir.layout import RunDir
    from hpctrain.torch import TorchTrainer

    world = 2 if device == "cpu" or torch.cuda.device_count() >= 2 else 1
    result = TorchTrainer(
        _hang_train, train_loop_config={"epochs": HANG_EPOCHS, "stall_at": HANG_AT},
        scaling_config=_scaling(device, world),
        run_config=_run_config("hang", storage, failure_config=FailureConfig(
            max_failures=1, hang_timeout=HANG_LIMIT_S))).fit()
    state = RunDir(result.path).read_state()
    attempts = state.get("attempts", [])
    problems: List[str] = []
    if [a.get("outcome") for a in attempts] != ["FAILED", "FINISHED"]:
        return "FAIL", f"attempts {[a.get('outcome') for a in attempts]}, expected FAILED " \
                       f"(the hang) then FINISHED: {attempts[0].get('error') if attempts else ''}"
    first, second = attempts
    hang = first.get("hang") or {}
    error = first.get("error") or ""
    idle = re.search(r"made no progress for (\d+) s", error)
    if not hang or not idle:
        return "FAIL", f"the first attempt failed, but not as a hang: {error}"
    if int(idle.group(1)) > HANG_LIMIT_S + 10:
        problems.append(f"detected after {idle.group(1)} s idle, limit {HANG_LIMIT_S} s")
    want_stacks = [f"stacks.rank-{r}.txt" for r in range(world)]
    if hang.get("stacks") != want_stacks:
        problems.append(f"stacks {hang.get('stacks')}, expected {want_stacks}")
    else:
        adir = RunDir(result.path).attempt_dir(1)
        where = "_spin_gpu_forever" if world == 1 else "_hang_train"
        for r, name in enumerate(want_stacks):  # the stalled rank, and the one waiting on it
            with open(os.path.join(adir, name)) as f:
                if where not in f.read():
                    problems.append(f"rank {r}'s stack does not name {where}")
    if not str(second.get("resumed_from") or "").endswith(f"checkpoint_{HANG_AT - 1:06d}"):
        problems.append(f"attempt 2 resumed from {second.get('resumed_from')}, expected the "
                        f"checkpoint of epoch {HANG_AT - 1}")
    want_total = float(world * sum(e + 1 for e in range(HANG_EPOCHS)))
    if result.metrics.get("total") != want_total:
        problems.append(f"final total {result.metrics.get('total')}, expected {want_total}")
    how = (f"{world} ranks ({'NCCL' if device == 'cuda' else 'Gloo'}), rank {world - 1} never "
           "joins an all_reduce" if world > 1
           else "1 rank, its GPU stream spins (torch.cuda._sleep) and the host waits in "
                "synchronize()")
    stacks = "the stack of rank 0" if world == 1 else f"the stacks of ranks 0–{world - 1}"
    detail = (f"{how}: {error}; {stacks} written; attempt 2 resumed "
              f"from {os.path.basename(str(second.get('resumed_from')))} and finished, "
              f"total {result.metrics.get('total'):g} as uninterrupted")
    return ("FAIL", "; ".join(problems) + f" ({detail})") if problems else ("ok", detail)


def check_bench(device: str, storage: str) -> Tuple[str, str]:
    out = os.path.join(storage, "bench-core.json")
    cmd = [sys.executable, os.path.join(ROOT, "bench", "bench_core.py"), "--quick", "--no-ray",
           "--workers", "1", "--device", device, "--wait-idle", "0", "--dir", storage,
           "--json", out]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0 or not os.path.exists(out):
        return "FAIL", f"{shlex.join(cmd)} exited {p.returncode}: {p.stderr[-600:]}"
    with open(out) as f:
        rows = {r["key"]: r for r in json.load(f)["figures"]}

    def cell(key, unit, fmt="{:.1f}"):
        r = rows.get(key)
        if not r or r.get("floor") is None or r.get("hpctrain") is None:
            return f"{key}: ?"
        ratio = r["hpctrain"] / r["floor"] if r["floor"] else float("nan")
        return (f"{r['figure'].strip()}: {fmt.format(r['floor'])} vs {fmt.format(r['hpctrain'])} {unit} "
                f"({ratio:.2f}×)")
    return "ok", "torchrun vs hpctrain, 1 rank on the GPU, --quick: " + "; ".join([
        cell("steps_per_s", "steps/s"), cell("cpu_ms_per_step", "ms", "{:.2f}"),
        cell("report_p50_us", "µs"), cell("report_p99_us", "µs"),
        cell("start_first_report_s", "s", "{:.2f}"), cell("ckpt_sync_staged_ms", "ms")])


CHECKS: List[Tuple[str, str, Callable[[str, str], Tuple[str, str]], float]] = [
    # (name, what it shows, function, time limit in seconds)
    ("gpu", "the GPU, torch, CUDA and NCCL seen", check_gpu, 60),
    ("nccl-1", "NCCL process group, 1 rank; get_devices() and binding", check_pg1, 90),
    ("nccl-2", "NCCL process group, 2 ranks (2 GPUs)", check_pg2, 90),
    ("ddp-resume", "DDP: crash, restart from the last checkpoint, same final weights",
     check_ddp, 120),
    ("fsdp", "FSDP training, DCP async checkpoint, loaded by a new run", check_fsdp, 120),
    ("deepspeed", "DeepSpeed ZeRO-2 fp16, checkpoint saved and loaded", check_deepspeed, 150),
    ("async-ckpt", "asynchronous checkpoint of CUDA tensors", check_async, 90),
    ("frameworks", "Lightning, Accelerate, Transformers examples on the GPU", check_frameworks,
     240),
    ("hang-nccl", "a hang inside an NCCL collective: detected, stacks, resumed", check_hang,
     150),
    ("bench-core", "bench/bench_core.py against torchrun on the GPU", check_bench, 300),
]


# -- running them -----------------------------------------------------------------------------------
def run_one(name: str, device: str) -> None:
    """In the check's own process: run it, print ``GPUCHECK {json}`` last."""
    fn = {c[0]: c[2] for c in CHECKS}[name]
    storage = tempfile.mkdtemp(prefix=f"gpucheck-{name}-")
    try:
        status, detail = fn(device, storage)
    except Exception as e:  # the check's own failure is its result, with the reason
        import traceback

        traceback.print_exc()
        status, detail = "FAIL", f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
    print("GPUCHECK " + json.dumps({"status": status, "detail": detail}), flush=True)


def run_all(names: List[str], device: str, out: Optional[str]) -> int:
    t0 = time.time()
    rows: List[Dict[str, Any]] = []
    for name, what, _, limit in CHECKS:
        if name not in names:
            continue
        left = TOTAL_BUDGET_S - (time.time() - t0)
        if left < 15:
            rows.append(dict(check=name, what=what, status="not run",
                             detail=f"the script's {TOTAL_BUDGET_S:.0f} s were spent", seconds=0))
            continue
        t = time.time()
        cmd = [sys.executable, os.path.abspath(__file__), "--one", name,
               "--device", device]
        print(f"[gpu-check {t - t0:5.1f}s] {name} …", file=sys.stderr, flush=True)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=min(limit, left),
                               start_new_session=True)
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("GPUCHECK ")]
            if lines:
                res = json.loads(lines[-1][len("GPUCHECK "):])
            else:
                res = {"status": "FAIL", "detail": f"exit {p.returncode}, no result: "
                       + " | ".join((p.stderr or p.stdout).strip().splitlines()[-3:])}
            log = p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            res = {"status": "FAIL", "detail": f"did not finish in {min(limit, left):.0f} s"}
            log = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) \
                else (e.stdout or "")
            os.system(f"pkill -9 -f 'gpu_check.py --one {name}' 2>/dev/null")
        rows.append(dict(check=name, what=what, seconds=round(time.time() - t, 1), **res))
        if out:
            with open(os.path.join(out, f"gpu-check-{name}.log"), "w") as f:
                f.write(log)
        print(f"[gpu-check {time.time() - t0:5.1f}s] {name}: {res['status']}", file=sys.stderr,
              flush=True)
    table = render(rows, device, time.time() - t0)
    print(table)
    if out:
        with open(os.path.join(out, "gpu-check.md"), "w") as f:
            f.write(table + "\n")
        with open(os.path.join(out, "gpu-check.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any(r["status"] == "FAIL" for r in rows) else 0


def render(rows: List[Dict[str, Any]], device: str, seconds: float) -> str:
    head = (f"hpctrain GPU check ({'GPU' if device == 'cuda' else 'CPU dry run'}), "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {seconds:.0f} s, "
            f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    lines = [head, "", "| check | what it shows | result | s | detail |", "|---|---|---|---:|---|"]
    for r in rows:
        detail = str(r["detail"]).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r['check']} | {r['what']} | {r['status']} | {r['seconds']} | {detail} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", action="append", choices=[c[0] for c in CHECKS],
                   help="run this check (repeatable; default: all)")
    p.add_argument("--cpu", action="store_true",
                   help="run on CPU ranks (Gloo, fp32) to try the checks without a GPU")
    p.add_argument("--out", help="also write gpu-check.md, gpu-check.json and logs here")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--device", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        run_one(a.one, a.device)
        return 0
    device = "cpu" if a.cpu else "cuda"
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    return run_all(a.only or [c[0] for c in CHECKS], device, a.out)


if __name__ == "__main__":
    sys.exit(main())
