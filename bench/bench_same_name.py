"""A checkpoint every rank hands in under the same name (Ray's PyTorch quick start: every
DDP rank saves ``model.pt``) against the same checkpoint handed in by rank 0 alone.

Side by side in one run, for each way: the wall time of the checkpoint reports (median
over reports, rank 0) and the bytes the ranks wrote to storage (``write_bytes`` of
``/proc/self/io``, summed over ranks: what reached the block layer, page cache flushes
included). The sources are written to /dev/shm first (tmpfs: not counted), so only the
checkpoint's own writes count. Target: the same-name way costs ≈ 1× rank-0-only.

    python bench/bench_same_name.py [--mib 256] [--reports 3] [--workers 2] [--dir /tmp]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def _write_bytes():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("write_bytes")).split()[1])


def loop(config):
    import hpctrain
    from hpctrain import Checkpoint

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    payload = os.urandom(config["mib"] << 20)
    times, before = [], _write_bytes()
    for i in range(config["reports"]):
        with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
            ckpt = None
            if config["every_rank"] or rank == 0:
                with open(os.path.join(d, "model.pt"), "wb") as f:
                    f.write(payload)
                ckpt = Checkpoint.from_directory(d)
            t = time.perf_counter()
            hpctrain.report({"i": i}, checkpoint=ckpt)
            times.append(time.perf_counter() - t)
    os.sync()  # what is still dirty in the page cache reaches the disk, counted to us
    out = os.path.join(ctx.get_run_dir(), f"bench-rank-{rank}.json")
    with open(out, "w") as f:
        json.dump({"times": times, "write_bytes": _write_bytes() - before}, f)


def run(every_rank, args, base):
    from hpctrain import CheckpointConfig, RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    result = TorchTrainer(
        loop, train_loop_config={"mib": args.mib, "reports": args.reports,
                                 "every_rank": every_rank},
        scaling_config=ScalingConfig(num_workers=args.workers),
        run_config=RunConfig(storage_path=base, verbose=0,
                             checkpoint_config=CheckpointConfig(num_to_keep=1))).fit()
    ranks = [json.load(open(os.path.join(result.path, f"bench-rank-{r}.json")))
             for r in range(args.workers)]
    return statistics.median(ranks[0]["times"]), sum(r["write_bytes"] for r in ranks)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--reports", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dir", default="/tmp")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as base:
        rank0 = run(False, args, base)
        every = run(True, args, base)
    mib = 1 << 20
    print(f"{args.mib} MiB model.pt, {args.workers} workers, {args.reports} checkpoint reports")
    print(f"{'':34}{'rank 0 only':>14}{'every rank':>14}{'ratio':>8}")
    print(f"{'checkpoint report p50 (s)':34}{rank0[0]:14.3f}{every[0]:14.3f}"
          f"{every[0] / rank0[0]:8.2f}")
    print(f"{'bytes written to storage (MiB)':34}{rank0[1] / mib:14.0f}{every[1] / mib:14.0f}"
          f"{every[1] / max(rank0[1], 1):8.2f}")


if __name__ == "__main__":
    main()
