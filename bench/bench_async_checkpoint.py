#!/usr/bin/env python
"""Training time blocked by a checkpoint: synchronous vs asynchronous commit, one run.

    python bench/bench_async_checkpoint.py            # 256 MiB, 3 timed checkpoints each
    python bench/bench_async_checkpoint.py --quick    # 64 MiB, 2 timed checkpoints

Two Gloo workers (rank 0 hands in 4 files, rank 1 none), CheckpointConfig(num_to_keep=1,
sync_to_disk=True). Between two checkpoints the loop does ``--between`` chunks of fixed
CPU work, each followed by a metrics-only report. "Blocked" is the time rank 0 spends in
the checkpoint report (for async: the snapshot, plus any wait for the previous commit —
a later checkpoint report waits for the one in flight); a report without a checkpoint
just before it lines the ranks up. The metrics-only reports are agreements in both modes
(reports ~1 s apart); their time, mostly one rank waiting for the other on a loaded
machine, is printed apart, as is the fixed CPU work (contention with the background
commit). The floor is shutil.copytree + fsync of each file (the same files, the same
filesystems). Printed: medians over the timed checkpoints, and the async/sync ratio of
the blocked time (target ≤ 0.1).
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


def copytree_fsync(src: str, dst: str) -> float:
    t = time.perf_counter()
    shutil.copytree(src, dst)
    for name in os.listdir(dst):
        fd = os.open(os.path.join(dst, name), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    fd = os.open(dst, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    return time.perf_counter() - t


def run(mode: str, args, root: str, src_root: str) -> dict:
    from hpctrain import CheckpointConfig, RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    import _async_loop

    out = os.path.join(root, f"{mode}.json")
    config = {"mode": mode, "src": src_root, "files": 4, "file_mib": args.mib // 4,
              "workers": args.workers,
              "warmup": 1, "checkpoints": args.checkpoints, "between": args.between,
              "work": args.work, "out": out}
    result = TorchTrainer(
        _async_loop.loop, train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=args.workers),
        run_config=RunConfig(name=f"async-bench-{mode}", storage_path=root, verbose=0,
                             checkpoint_config=CheckpointConfig(num_to_keep=1))).fit()
    if result.error:
        raise SystemExit(f"{mode} run failed: {result.error}")
    with open(out) as f:
        data = json.load(f)
    data["path"] = result.path
    return data


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="64 MiB, 2 timed checkpoints")
    p.add_argument("--mib", type=int, default=None, help="checkpoint size (256)")
    p.add_argument("--checkpoints", type=int, default=None, help="timed checkpoints (3)")
    p.add_argument("--between", type=int, default=6,
                   help="work chunks + metrics reports between checkpoints")
    p.add_argument("--work", type=int, default=150, help="matmuls per work chunk")
    p.add_argument("--dir", default=tempfile.gettempdir(),
                   help="storage_path of the runs (default: %(default)s)")
    p.add_argument("--src", default=None,
                   help="where the loop saves its files before reporting them (default: "
                        "beside the runs, the same filesystem; e.g. /dev/shm for a "
                        "node-local disk)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--json", metavar="FILE", help="also write the numbers here")
    args = p.parse_args(argv)
    args.mib = args.mib or (64 if args.quick else 256)
    args.checkpoints = args.checkpoints or (2 if args.quick else 3)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    root = tempfile.mkdtemp(prefix="hpctrain-async-bench-", dir=args.dir)
    src_root = tempfile.mkdtemp(prefix="hpctrain-async-src-", dir=args.src or root)
    try:
        # the floor: copytree + fsync of the same files, the same filesystems
        floor_src = os.path.join(src_root, "floor")
        os.makedirs(floor_src)
        block = os.urandom(1 << 20) * (args.mib // 4)
        floors = []
        for i in range(args.checkpoints):
            for f in range(4):
                with open(os.path.join(floor_src, f"part-{f}.bin"), "wb") as fh:
                    fh.write(block)
            floors.append(copytree_fsync(floor_src, os.path.join(root, f"floor-{i}")))
            shutil.rmtree(os.path.join(root, f"floor-{i}"))
        shutil.rmtree(floor_src)
        figures = {"copytree_fsync_s": statistics.median(floors)}
        for mode in ("sync", "async"):
            data = run(mode, args, root, src_root)
            timed = [r for r in data["records"] if not r["warmup"]]
            figures[mode] = {
                "blocked_s": statistics.median(r["ckpt_report_s"] for r in timed),
                "ckpt_report_s": statistics.median(r["ckpt_report_s"] for r in timed),
                "other_reports_s": statistics.median(r["other_reports_s"] for r in timed),
                "work_s": statistics.median(r["work_s"] for r in timed),
                "background_s": (statistics.median(r["background_s"] for r in timed)
                                 if all(r["background_s"] is not None for r in timed)
                                 else None),
                "end_wait_s": data["end_wait_s"],
                "commits_done_before_next": sum(r["commit_done_before_next"] for r in timed),
                "timed": len(timed),
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(src_root, ignore_errors=True)

    s, a = figures["sync"], figures["async"]
    ratio = a["blocked_s"] / s["blocked_s"] if s["blocked_s"] else float("nan")
    ms = lambda v: "-" if v is None else f"{v * 1000:.1f}"  # noqa: E731
    same_fs = os.stat(args.dir).st_dev == os.stat(args.src or args.dir).st_dev
    print(f"checkpoint {args.mib} MiB (4 files) on rank 0 of {args.workers} Gloo workers; "
          f"{args.checkpoints} timed checkpoints, medians; loop saves to "
          f"{'the run filesystem' if same_fs else args.src}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'':44} {'sync':>10} {'async':>10}")
    print(f"{'training blocked by the checkpoint (ms)':44} {ms(s['blocked_s']):>10} "
          f"{ms(a['blocked_s']):>10}")
    print(f"{'metrics-only reports until the next (ms)':44} {ms(s['other_reports_s']):>10} "
          f"{ms(a['other_reports_s']):>10}")
    print(f"{'background commit (ms)':44} {'-':>10} {ms(a['background_s']):>10}")
    print(f"{'  done before the next checkpoint':44} {'-':>10} "
          f"{a['commits_done_before_next']:>5} of {a['timed']}")
    print(f"{'CPU work between checkpoints (ms)':44} {ms(s['work_s']):>10} "
          f"{ms(a['work_s']):>10}")
    print(f"{'end of training: wait for the last (ms)':44} {ms(s['end_wait_s']):>10} "
          f"{ms(a['end_wait_s']):>10}")
    print(f"{'floor: copytree + fsync (ms)':44} {ms(figures['copytree_fsync_s']):>10}")
    verdict = "OK" if ratio <= 0.1 else "ABOVE TARGET"
    print(f"async / sync blocked: {ratio:.3f}× (target ≤ 0.1×: {verdict}); "
          f"sync / copytree+fsync: {s['blocked_s'] / figures['copytree_fsync_s']:.2f}×")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"figures": figures, "ratio": ratio, "args": vars(args)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
