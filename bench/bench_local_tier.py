#!/usr/bin/env python
"""The node-local checkpoint tier (``CheckpointConfig(local_dir=...)``), one run.

    python bench/bench_local_tier.py               # 256 MiB, 3 timed checkpoints each
    python bench/bench_local_tier.py --quick       # 64 MiB, 2 timed checkpoints
    python bench/bench_local_tier.py --local /mnt/nvme --dir /lustre/me/tmp

Blocking time per checkpoint: the training loop of bench_async_checkpoint.py (rank 0
saves 4 files into a directory it reuses, on the local tier's filesystem, as a loop that
saves to $TMPDIR does, and reports it; medians of the timed checkpoints) with the local
tier, against the shared tier (a synchronous commit into the run directory) and against
plain ``shutil.copytree`` of the same files to the shared path (and copytree + fsync).

Restart time: what a restart does before the training function has its state back, on
the checkpoint the local-tier run committed — from the shared tier: the supervisor's
verification (sizes and content digests), then reading every file; from the local tier:
the supervisor's size check, the rank's restore (its local copy's digests checked, the
restore directory made), then reading every file through it. Both read through the page
cache: where the shared tier is a parallel filesystem, its read costs far more than here.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from bench_async_checkpoint import copytree_fsync  # noqa: E402


def run(label: str, mode, args, root: str, src_root: str, local_dir=None) -> dict:
    from hpctrain import CheckpointConfig, RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    import _async_loop

    out = os.path.join(root, f"{label}.json")
    config = {"mode": mode, "src": src_root, "files": 4, "file_mib": args.mib // 4,
              "workers": args.workers, "warmup": 1, "checkpoints": args.checkpoints,
              "between": args.between, "work": args.work, "out": out,
              "settle": args.settle}
    result = TorchTrainer(
        _async_loop.loop, train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=args.workers),
        run_config=RunConfig(name=f"tier-bench-{label}", storage_path=root, verbose=0,
                             checkpoint_config=CheckpointConfig(num_to_keep=1,
                                                                local_dir=local_dir))).fit()
    if result.error:
        raise SystemExit(f"{label} run failed: {result.error}")
    with open(out) as f:
        data = json.load(f)
    timed = [r for r in data["records"] if not r["warmup"]]
    return {"blocked_s": statistics.median(r["ckpt_report_s"] for r in timed),
            "background_s": (statistics.median(r["background_s"] for r in timed)
                             if all(r["background_s"] is not None for r in timed) else None),
            "end_wait_s": data["end_wait_s"], "path": result.path,
            "drained_before_next": sum(r["commit_done_before_next"] for r in timed),
            "timed": len(timed),
            "checkpoint": result.checkpoint.path}


def _read_all(path: str) -> int:
    n = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            if name.startswith(".hpctrain"):
                continue
            with open(os.path.join(dirpath, name), "rb", buffering=0) as f:
                while True:
                    chunk = f.read(8 << 20)
                    if not chunk:
                        break
                    n += len(chunk)
    return n


def restart_times(shared: str, run_path: str, local_root: str, repeats: int) -> dict:
    """Median seconds to get the state back: from the shared tier, from the local tier."""
    from hpctrain.common.fsutil import walk_files
    from hpctrain.rundir.commit import verify_checkpoint
    from hpctrain.rundir.layout import RunDir
    from hpctrain.rundir.local_tier import LocalTier, restore

    run = RunDir(run_path)
    meta = json.load(open(os.path.join(shared, ".hpctrain_checkpoint.json")))
    iteration = meta["iteration"]
    tier = LocalTier.open(local_root, run, rank=0, node="bench", job_id="bench")
    local = tier.fresh(iteration)  # the copy the local-tier run made (removed at its end)
    for rel in walk_files(shared):
        if not os.path.basename(rel).startswith(".hpctrain"):
            os.makedirs(os.path.dirname(os.path.join(local, rel)), exist_ok=True)
            shutil.copyfile(os.path.join(shared, rel), os.path.join(local, rel))
    tier.seal(iteration, 1)
    from_shared, from_local = [], []
    try:
        for i in range(repeats):
            t = time.perf_counter()
            assert verify_checkpoint(shared) == []
            size = _read_all(shared)
            from_shared.append(time.perf_counter() - t)
            t = time.perf_counter()
            assert verify_checkpoint(shared, contents=False) == []
            path = restore(tier, shared, iteration, run=run, attempt=100 + i, rank=0)
            assert path.startswith(tier.base), path
            assert _read_all(path) == size
            from_local.append(time.perf_counter() - t)
    finally:
        tier.remove()
    return {"shared_s": statistics.median(from_shared),
            "local_s": statistics.median(from_local), "bytes": size}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="64 MiB, 2 timed checkpoints")
    p.add_argument("--mib", type=int, default=None, help="checkpoint size (256)")
    p.add_argument("--checkpoints", type=int, default=None, help="timed checkpoints (3)")
    p.add_argument("--between", type=int, default=6,
                   help="work chunks + metrics reports between checkpoints")
    p.add_argument("--work", type=int, default=150, help="matmuls per work chunk")
    p.add_argument("--dir", default=tempfile.gettempdir(),
                   help="the shared tier: storage_path of the runs (default: %(default)s)")
    p.add_argument("--local", default="/dev/shm",
                   help="the node-local tier: local_dir (default: %(default)s)")
    p.add_argument("--settle", action="store_true",
                   help="wait (untimed) for the previous drain before each timed checkpoint: "
                        "the local commit alone, as when the interval exceeds the drain")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3, help="restarts timed (3)")
    p.add_argument("--json", metavar="FILE", help="also write the numbers here")
    args = p.parse_args(argv)
    args.mib = args.mib or (64 if args.quick else 256)
    args.checkpoints = args.checkpoints or (2 if args.quick else 3)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    root = tempfile.mkdtemp(prefix="hpctrain-tier-bench-", dir=args.dir)
    local_root = tempfile.mkdtemp(prefix="hpctrain-tier-local-", dir=args.local)
    src_root = tempfile.mkdtemp(prefix="src-", dir=local_root)  # the loop's save dir
    try:
        floor_src = os.path.join(src_root, "floor")
        os.makedirs(floor_src)
        block = os.urandom(1 << 20) * (args.mib // 4)
        copies, synced = [], []
        for i in range(args.checkpoints):
            for f in range(4):
                with open(os.path.join(floor_src, f"part-{f}.bin"), "wb") as fh:
                    fh.write(block)
            dst = os.path.join(root, f"floor-{i}")
            t = time.perf_counter()
            shutil.copytree(floor_src, dst)
            copies.append(time.perf_counter() - t)
            shutil.rmtree(dst)
            synced.append(copytree_fsync(floor_src, dst))
            shutil.rmtree(dst)
        shutil.rmtree(floor_src)
        del block
        figures = {"copytree_s": statistics.median(copies),
                   "copytree_fsync_s": statistics.median(synced),
                   "shared": run("shared", "sync", args, root, src_root),
                   "local": run("local", None, args, root, src_root, local_dir=local_root)}
        figures["restart"] = restart_times(figures["local"]["checkpoint"],
                                           figures["local"]["path"], local_root, args.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(local_root, ignore_errors=True)

    ms = lambda v: "-" if v is None else f"{v * 1000:.1f}"  # noqa: E731
    sh, lo, rs = figures["shared"], figures["local"], figures["restart"]
    print(f"checkpoint {args.mib} MiB (4 files) on rank 0 of {args.workers} worker(s)"
          f"{', previous drain waited for untimed (--settle)' if args.settle else ''}; "
          f"{args.checkpoints} timed checkpoints, medians; shared tier {args.dir}, local tier "
          f"{args.local}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'training blocked per checkpoint (ms)':46} {'':>10}")
    print(f"{'  local tier (then drained in the background)':46} {ms(lo['blocked_s']):>10}"
          f"   drain {ms(lo['background_s'])} ms ({lo['drained_before_next']} of "
          f"{lo['timed']} done before the next checkpoint: a checkpoint report waits for "
          f"the drain in flight)")
    print(f"{'  shared tier (synchronous commit)':46} {ms(sh['blocked_s']):>10}")
    print(f"{'  shutil.copytree to the shared path':46} {ms(figures['copytree_s']):>10}")
    print(f"{'  shutil.copytree + fsync':46} {ms(figures['copytree_fsync_s']):>10}")
    print(f"{'restart: state back in the loop (ms)':46}")
    print(f"{'  from the local tier':46} {ms(rs['local_s']):>10}")
    print(f"{'  from the shared tier':46} {ms(rs['shared_s']):>10}")
    print(f"local / shared blocked: {lo['blocked_s'] / sh['blocked_s']:.3f}×; local / "
          f"copytree: {lo['blocked_s'] / figures['copytree_s']:.3f}×; restart local / "
          f"shared: {rs['local_s'] / rs['shared_s']:.2f}×")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"figures": figures, "args": vars(args)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
