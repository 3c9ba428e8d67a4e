"""The one workload every launcher runs (torchrun, hpctrain, Ray Train).

Model, data, training loop, the report-latency loop and the checkpoint-commit loop live
here once. Each launcher script (``_loop_torchrun.py``, ``_loop_hpctrain.py``,
``_loop_ray.py``) only supplies an :class:`Adapter`: how to wrap the model and the data
loader, how to report, how to commit a checkpoint. Rank 0 writes what it measured to a
JSON file the bench reads back (``write_record``).

Phases (``cfg["mode"]``):

* ``train``: 3 epochs of DDP training (MLP 784→256→10, batch 64, SGD), one report per
  epoch; records the wall time of rank 0's first report and steps/s after the warm-up
  epoch. Then ``report_n`` back-to-back reports without checkpoint, timed on rank 0.
  Then ``empty_passes`` passes through a prepared loader with an empty step (the
  launcher's per-batch overhead, alone).
* ``ckpt``: ``ckpt_files`` × ``ckpt_file_mib`` MiB of checkpoint files committed from an
  ordinary directory (page cache warm) and from a directory written in place (staged).
"""
from __future__ import annotations

import gc
import json
import os
import time
from typing import Any, Dict, Iterator, List, Optional

import torch
from torch import nn
from torch.utils.data import TensorDataset

from _sizes import SIZES  # noqa: E402  (one table, also read by bench_core.py)

_WRITE_CHUNK = 8 << 20


def proc_start_time() -> float:
    """Wall-clock time this process was created (from /proc, 10 ms resolution)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - started)
    except (OSError, ValueError, IndexError):
        return float("nan")


def _per_thread(name: str) -> Iterator[str]:
    """The text of ``/proc/self/task/<tid>/<name>`` for each thread of this process (none
    where /proc is missing or a thread ended meanwhile)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/{name}") as f:
                yield f.read()
        except OSError:
            continue


def thread_cpu() -> Dict[str, float]:
    """CPU seconds of each thread of this process so far, by thread name (Linux /proc;
    {} elsewhere): which threads the per-step CPU time goes to."""
    out: Dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for text in _per_thread("stat"):
        try:
            head, rest = text.rsplit(")", 1)
            name = head.split("(", 1)[1]
            fields = rest.split()
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
        except (ValueError, IndexError):
            continue
    return out


def thread_switches() -> Dict[str, List[int]]:
    """Context switches of each thread of this process so far, by thread name: [voluntary
    (the thread waited: a wake-up per message or lock), involuntary (preempted)] (Linux
    /proc; {} elsewhere)."""
    out: Dict[str, List[int]] = {}
    for text in _per_thread("status"):
        try:
            fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
            counts = out.setdefault(fields["Name"].strip(), [0, 0])
            counts[0] += int(fields["voluntary_ctxt_switches"])
            counts[1] += int(fields["nonvoluntary_ctxt_switches"])
        except (ValueError, KeyError):
            continue
    return out


class GcClock:
    """The time Python's garbage collector takes in this process while it is on, and its
    collections by generation (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds, self.collections = 0.0, [0, 0, 0]
        self._t = 0.0

    def __enter__(self) -> "GcClock":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: Dict[str, int]) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t
            self.collections[info["generation"]] += 1


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def make_dataset(n: int, seed: int = 0) -> TensorDataset:
    """Synthetic 28×28 "images" labelled by a fixed random teacher (as the quickstart)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 784, generator=g)
    teacher = torch.randn(784, 10, generator=g)
    y = (x @ teacher).argmax(dim=1)
    return TensorDataset(x, y)


class Adapter:
    """What differs between launchers. ``rank``/``world`` are this process's place."""

    name = "?"
    rank = 0
    world = 1

    def prepare_model(self, model: nn.Module) -> nn.Module:
        raise NotImplementedError

    def prepare_loader(self, dataset, batch_size: int, seed: int):
        """A loader over this rank's shard, shuffled, with ``set_epoch(epoch)``."""
        raise NotImplementedError

    def report(self, metrics: Dict[str, Any]) -> None:
        raise NotImplementedError

    def commit(self, src_dir: str, index: int) -> None:
        """Commit the checkpoint in ``src_dir`` (rank 0's; other ranks pass nothing)."""
        raise NotImplementedError

    def staging_dir(self, index: int) -> str:
        """Rank 0: where to write a checkpoint so committing it needs no copy."""
        raise NotImplementedError

    def commit_staged(self, staged_dir: str, index: int) -> None:
        raise NotImplementedError

    def after_commit(self, index: int) -> None:
        """Untimed clean-up after a commit (e.g. retention the floor does by hand)."""

    def barrier(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()


# -- phases -------------------------------------------------------------------------------
def train_phase(ad: Adapter, cfg: Dict[str, Any], rec: Dict[str, Any]) -> None:
    torch.manual_seed(cfg["seed"])
    dev = (torch.device("cuda", torch.cuda.current_device()) if cfg.get("device") == "cuda"
           else torch.device("cpu"))
    model = ad.prepare_model(make_model().to(dev))
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
    loader = ad.prepare_loader(make_dataset(cfg["samples"], cfg["seed"]), cfg["batch_size"],
                               cfg["seed"])
    loss_fn = nn.CrossEntropyLoss()
    timed_steps, t_timed, cpu_timed = 0, None, 0.0
    for epoch in range(cfg["epochs"]):
        if epoch == cfg["warmup_epochs"]:
            t_timed, cpu_timed = time.perf_counter(), time.process_time()
            threads_before, switches_before = thread_cpu(), thread_switches()
            gc_clock = GcClock().__enter__()
        loader.set_epoch(epoch)
        total, correct, loss_sum = 0, 0, 0.0
        for x, y in loader:
            x, y = x.to(dev), y.to(dev)  # (a no-op where the prepared loader moved them)
            out = model(x)
            loss = loss_fn(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            total += len(y)
            if t_timed is not None:
                timed_steps += 1
        ad.report({"epoch": epoch, "loss": loss_sum / total, "accuracy": correct / total})
        if epoch == 0:
            rec["t_first_report"] = time.time()
    elapsed = time.perf_counter() - t_timed
    cpu = time.process_time() - cpu_timed
    gc_clock.__exit__()
    threads, switches = thread_cpu(), thread_switches()
    rec["train_gc"] = {"ms_per_step": gc_clock.seconds / timed_steps * 1e3,
                       "collections": gc_clock.collections}
    rec["train_thread_switches_per_step"] = {
        name: [round((v[i] - switches_before.get(name, [0, 0])[i]) / timed_steps, 2)
               for i in (0, 1)] for name, v in sorted(switches.items())}
    rec["train_thread_cpu_ms_per_step"] = {
        name: round((v - threads_before.get(name, 0.0)) / timed_steps * 1e3, 4)
        for name, v in sorted(threads.items())}
    rec["train"] = {"steps": timed_steps, "seconds": elapsed,
                    "steps_per_s": timed_steps / elapsed,
                    "cpu_ms_per_step": cpu / timed_steps * 1e3,
                    "final_loss": loss_sum / total, "final_accuracy": correct / total}


def report_phase(ad: Adapter, cfg: Dict[str, Any], rec: Dict[str, Any]) -> None:
    n, warm = cfg["report_n"], cfg["report_warmup"]
    ad.barrier()
    for i in range(warm):
        ad.report({"i": i, "loss": 0.5})
    ad.barrier()
    lat: List[int] = []
    clock = time.perf_counter_ns
    for i in range(n):
        t = clock()
        ad.report({"i": i, "loss": 0.5})
        lat.append(clock() - t)
    ad.barrier()
    lat.sort()
    # the same, with 1 ms between reports (a training step that leaves the CPU idle, as a
    # GPU step does): hpctrain's agreement collective then completes in the background
    paced: List[int] = []
    for i in range(max(1, n // 4)):
        time.sleep(0.001)
        t = clock()
        ad.report({"i": i, "loss": 0.5})
        paced.append(clock() - t)
    ad.barrier()
    paced.sort()
    rec["report"] = {"n": n, "p50_us": pct(lat, 50) / 1e3, "p99_us": pct(lat, 99) / 1e3,
                     "mean_us": sum(lat) / len(lat) / 1e3, "max_us": lat[-1] / 1e3,
                     "paced_p50_us": pct(paced, 50) / 1e3, "paced_p99_us": pct(paced, 99) / 1e3}


def empty_step_phase(ad: Adapter, cfg: Dict[str, Any], rec: Dict[str, Any]) -> None:
    """The loop of ``train`` with an empty step: what one pass through the launcher's
    prepared loader costs per batch (rank 0's CPU and wall time), so that per-step
    overhead of the launcher shows as a number apart from the model's step."""
    loader = ad.prepare_loader(make_dataset(cfg["samples"], cfg["seed"]), cfg["batch_size"],
                               cfg["seed"])
    ad.barrier()
    for _ in loader:  # warm-up pass
        pass
    batches = 0
    t, cpu = time.perf_counter(), time.process_time()
    for epoch in range(1, 1 + cfg["empty_passes"]):
        loader.set_epoch(epoch)
        for _ in loader:
            batches += 1
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    ad.barrier()
    rec["empty_step"] = {"batches": batches, "cpu_us_per_batch": cpu / batches * 1e6,
                         "wall_us_per_batch": wall / batches * 1e6}


def write_files(directory: str, files: int, file_mib: int, *, sync: bool) -> List[str]:
    os.makedirs(directory, exist_ok=True)
    chunk = os.urandom(_WRITE_CHUNK)
    paths = []
    for i in range(files):
        p = os.path.join(directory, f"shard-{i}.bin")
        with open(p, "wb") as f:
            left = file_mib << 20
            while left > 0:
                f.write(chunk[:min(left, len(chunk))])
                left -= len(chunk)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        paths.append(p)
    return paths


def warm_cache(paths: List[str]) -> None:
    buf = bytearray(_WRITE_CHUNK)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def ckpt_phase(ad: Adapter, cfg: Dict[str, Any], rec: Dict[str, Any]) -> None:
    """Copy-commit then staged-commit, ``ckpt_warmup`` + ``ckpt_iters`` times each."""
    src = os.path.join(cfg["workdir"], "ckpt_src")
    files, mib = cfg["ckpt_files"], cfg["ckpt_file_mib"]
    if ad.rank == 0:
        paths = write_files(src, files, mib, sync=True)  # clean pages, still cached
        warm_cache(paths)
    iters, warm = cfg["ckpt_iters"], cfg["ckpt_warmup"]
    copy_ms: List[float] = []
    index = 0
    for k in range(warm + iters):
        if ad.rank == 0:
            os.sync()  # the previous iteration's writeback must not land in this one
        ad.barrier()
        t = time.perf_counter()
        ad.commit(src, index)
        dt = (time.perf_counter() - t) * 1e3
        ad.barrier()
        ad.after_commit(index)
        index += 1
        if k >= warm:
            copy_ms.append(dt)
    staged_ms: List[float] = []
    for k in range(warm + iters):
        d = None
        if ad.rank == 0:
            os.sync()
            d = ad.staging_dir(index)
            write_files(d, files, mib, sync=False)  # dirty, as torch.save leaves them
        ad.barrier()
        t = time.perf_counter()
        ad.commit_staged(d, index)
        dt = (time.perf_counter() - t) * 1e3
        ad.barrier()
        ad.after_commit(index)
        index += 1
        if k >= warm:
            staged_ms.append(dt)
    rec["ckpt"] = {"sync_to_disk": cfg["sync"], "bytes": files * (mib << 20),
                   "copy_ms": copy_ms, "copy_ms_median": median(copy_ms),
                   "staged_ms": staged_ms, "staged_ms_median": median(staged_ms)}
    retention = getattr(ad, "retention_ms", None)  # the floor deletes old copies untimed
    if retention:
        rec["ckpt"]["retention_ms_median"] = median(retention)


def run(ad: Adapter, cfg: Dict[str, Any]) -> None:
    """The whole per-worker program; rank 0 writes the record to ``cfg["out"]``."""
    rec: Dict[str, Any] = {"launcher": ad.name, "mode": cfg["mode"], "world": ad.world,
                           "t_loop_entry": time.time(), "t_worker_proc_start": proc_start_time()}
    rec.update({k: v for k, v in cfg.items() if k.startswith("t_")})  # driver-side times
    if cfg["mode"] == "train":
        train_phase(ad, cfg, rec)
        report_phase(ad, cfg, rec)
        empty_step_phase(ad, cfg, rec)
    elif cfg["mode"] == "ckpt":
        ckpt_phase(ad, cfg, rec)
    else:
        raise ValueError(f"mode: {cfg['mode']!r}")
    if ad.rank == 0:
        write_record(cfg["out"], rec)


def write_record(path: str, rec: Dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec, f, indent=1)
    os.replace(tmp, path)


# -- small statistics (no numpy needed) -----------------------------------------------------
def pct(sorted_values: List[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = (len(sorted_values) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def median(values: List[float]) -> float:
    return pct(sorted(values), 50)


def common_args(argv: Optional[List[str]] = None):
    """Arguments every loop script takes (the bench passes them)."""
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("train", "ckpt"), required=True)
    p.add_argument("--size", choices=tuple(SIZES), default="full")
    p.add_argument("--out", required=True, help="rank 0 writes its measurements here (JSON)")
    p.add_argument("--workdir", required=True, help="scratch directory (run dirs, checkpoints)")
    p.add_argument("--sync", type=int, default=1, help="checkpoint sync_to_disk (1/0)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the model trains (cuda: one GPU per rank, NCCL)")
    p.add_argument("--t-launch", type=float, default=None)
    a = p.parse_args(argv)
    cfg = dict(SIZES[a.size])
    cfg.update(mode=a.mode, out=os.path.abspath(a.out), workdir=os.path.abspath(a.workdir),
               sync=bool(a.sync), workers=a.workers, device=a.device)
    return a, cfg
