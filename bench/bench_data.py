#!/usr/bin/env python
"""Shard read throughput against raw h5py reads of the same slices, side by side.

    python bench/bench_data.py                 # 256 MiB file, 4 ranks' shards, 5 repeats
    python bench/bench_data.py --quick         # 64 MiB, 3 repeats
    python bench/bench_data.py --dir /lustre/me/tmp --mib 4096   # on the parallel filesystem

For each of the file's ``--world`` shards (one rank's epoch plan each, read in this
process one after the other) and each repeat, in rotating order, the same rows are read:

* **raw h5py** (the floor and the target's baseline): ``h5py.File(path, "r")`` as one
  opens it, then ``dset[a:b]`` for every column and every slice of the shard's plan;
* **raw, no cache**: the same with ``rdcc_nbytes=0``, the open options the shard uses
  (HDF5 then reads chunks straight into the array instead of through its chunk cache);
* **by hand** (shuffled only): the same shuffled batches written by hand: read a
  window's slices with h5py, ``np.concatenate``, index with the permutation per batch;
* **shard**: ``shard.iter_batches(batch_size)`` over the same epoch (each batch's bytes
  counted). In order, batches are views of the slices; shuffled, the window's rows are
  gathered per batch: a second copy of every byte the raw reads never make.

The raw reads discard each slice at once, so their destination stays in the CPU cache:
with a warm page cache this is a memory-bound comparison, the hardest case for the
shard. Both see the same page cache (the file is read once first; ``--drop-cache``, as
root, drops it before every pass instead, as a parallel filesystem behaves for a file
larger than memory). Printed: MB/s (medians over repeats × shards), shard / raw h5py
and the target (≥ 0.9×; exit status 1 when the in-order ratio misses it). The shard
passes read with ``prefetch_batches=0``, in the loop's thread like the raw reads: this
table compares readers. (``iter_batches``' default, 1 as in Ray, hands each batch over
from a background thread: tens of µs a batch, which a loop that does nothing else
shows and a training step hides.)

Then **prefetch**: the whole file as one shuffled shard, read in batches of
``--prefetch-batch-size`` rows by a slow consumer: after each batch a training step that
keeps the host waiting (``time.sleep``, as for a GPU step) as long as reading a batch
takes (measured first), with ``prefetch_batches=0`` (read, then step) and
``--prefetch`` (the next batches are read during the step). Printed: seconds per epoch
(medians) and their ratio; 2× is the most overlap can give when reading and the step
take equally long. The reading thread needs a free core: on a machine whose cores are
all busy the ratio stays near 1×.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

TARGET = 0.9
DEFAULT_WINDOW_MB = 64
RAW, RAW_NOCACHE, HAND, SHARD = "raw", "raw_nocache", "hand", "shard"


def make_file(path: str, mib: int, cols: int, chunk_rows: int) -> None:
    import h5py

    rows = (mib << 20) // (cols * 4)
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", shape=(rows, cols), dtype=np.float32,
                             chunks=(chunk_rows, cols))
        y = f.create_dataset("y", shape=(rows,), dtype=np.int64, chunks=(chunk_rows,))
        step = chunk_rows * 64
        rng = np.random.default_rng(0)
        for a in range(0, rows, step):
            b = min(rows, a + step)
            x[a:b] = rng.random((b - a, cols), dtype=np.float32)
            y[a:b] = np.arange(a, b)


def raw_pass(path: str, segments, columns, cache_bytes=None) -> int:
    """Plain h5py: every slice of the plan, ``dset[a:b]``, nothing else."""
    import h5py

    kw = {} if cache_bytes is None else {"rdcc_nbytes": cache_bytes}
    n = 0
    with h5py.File(path, "r", **kw) as f:
        dsets = [f[c] for c in columns]
        for a, b in segments:
            for d in dsets:
                n += d[a:b].nbytes
    return n


def hand_shuffled_pass(path: str, shard, epoch: int, batch_size: int) -> int:
    """What one would write by hand for the same shuffled batches: read each window's
    slices with h5py, concatenate, index with the same permutation batch by batch."""
    import h5py

    from hpctrain.data import plan

    n = 0
    segs = shard.segments(epoch)
    with h5py.File(path, "r") as f:
        dsets = {c: f[c] for c in shard.columns}
        for w, group in enumerate(plan.windows(segs, shard.window_blocks)):
            window = {c: np.concatenate([d[a:b] for a, b in group]) for c, d in dsets.items()}
            rows = len(window["y"])
            perm = plan.window_permutation(rows, epoch=epoch, seed=shard.seed, rank=shard.rank,
                                           window=w, shuffle=True)
            for i in range(0, rows, batch_size):
                for v in window.values():
                    n += v[perm[i:i + batch_size]].nbytes
    return n


def shard_pass(shard, epoch: int, batch_size: int) -> int:
    n = 0
    for batch in shard.iter_batches(batch_size, epoch=epoch, prefetch_batches=0):
        for v in batch.values():
            n += v.nbytes
    shard.close()  # each pass opens the file afresh, as the others do
    return n


def slow_consumer_pass(shard, epoch: int, batch_size: int, prefetch_batches: int,
                       step_s: float) -> float:
    """Seconds for one epoch whose every batch is followed by a step of ``step_s``."""
    t = time.perf_counter()
    for _ in shard.iter_batches(batch_size, epoch=epoch, prefetch_batches=prefetch_batches):
        if step_s:
            time.sleep(step_s)
    shard.close()
    return time.perf_counter() - t


def measure_prefetch(path: str, repeats: int, batch_size: int, window_mb: int,
                     depth: int) -> Dict[str, float]:
    """Median epoch seconds of a slow consumer with ``prefetch_batches`` 0 and ``depth``;
    the step lasts as long as reading one batch (measured first, without a step)."""
    from hpctrain.data import HDF5Dataset

    shard = HDF5Dataset(path, ["x", "y"], shuffle=True, seed=1,
                        window_mb=window_mb).shard(0, 1)
    n_batches = -(-len(shard) // batch_size)
    read_s = statistics.median(slow_consumer_pass(shard, e, batch_size, 0, 0.0)
                               for e in range(repeats)) / n_batches
    times: Dict[int, List[float]] = {0: [], depth: []}
    for rep in range(2 * repeats):
        for n in ((0, depth) if rep % 2 == 0 else (depth, 0)):
            times[n].append(slow_consumer_pass(shard, rep, batch_size, n, read_s))
    return {"step_s": read_s, "batches": n_batches, "off": statistics.median(times[0]),
            "on": statistics.median(times[depth])}


def drop_cache() -> None:
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def measure(path: str, world: int, repeats: int, batch_size: int, shuffle: bool,
            drop: bool, window_mb: int) -> Dict[str, float]:
    """Median MB/s of each way of reading, over repeats × ranks (the order rotates)."""
    from hpctrain.data import HDF5Dataset

    source = HDF5Dataset(path, ["x", "y"], shuffle=shuffle, seed=1, window_mb=window_mb)
    shards = [source.shard(rank, world) for rank in range(world)]  # kept over epochs
    ways = {
        RAW: lambda sh, e: raw_pass(path, sh.segments(e), sh.columns),
        RAW_NOCACHE: lambda sh, e: raw_pass(path, sh.segments(e), sh.columns, 0),
        SHARD: lambda sh, e: shard_pass(sh, e, batch_size),
    }
    if shuffle:
        ways[HAND] = lambda sh, e: hand_shuffled_pass(path, sh, e, batch_size)
    speeds: Dict[str, List[float]] = {k: [] for k in ways}
    names = list(ways)
    for rep in range(repeats):
        for rank in range(world):
            k = (rep * world + rank) % len(names)
            for which in names[k:] + names[:k]:
                if drop:
                    drop_cache()
                t = time.perf_counter()
                n = ways[which](shards[rank], rep)
                speeds[which].append(n / (time.perf_counter() - t) / 1e6)
    return {k: statistics.median(v) for k, v in speeds.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--mib", type=int, default=None, help="file size (default 256, quick 64)")
    p.add_argument("--cols", type=int, default=1024, help="float32 values per row")
    p.add_argument("--chunk-rows", type=int, default=256)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--window-mb", type=int, default=None,
                   help="the shard's shuffle window (default: HDF5Dataset's)")
    p.add_argument("--dir", default=tempfile.gettempdir())
    p.add_argument("--drop-cache", action="store_true",
                   help="drop the page cache before each pass (root)")
    p.add_argument("--prefetch", type=int, default=4,
                   help="prefetch_batches of the slow-consumer case (against 0)")
    p.add_argument("--prefetch-batch-size", type=int, default=2048,
                   help="batch of the slow-consumer case (8 MiB: a few ms to read)")
    args = p.parse_args(argv)
    mib = args.mib or (64 if args.quick else 256)
    repeats = args.repeats or (3 if args.quick else 5)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        path = os.path.join(d, "bench.h5")
        make_file(path, mib, args.cols, args.chunk_rows)
        with open(path, "rb") as f:  # warm the page cache alike for both
            while f.read(64 << 20):
                pass
        import h5py

        print(f"file: {mib} MiB, rows of {args.cols} float32 + an int64, chunks of "
              f"{args.chunk_rows} rows; {args.world} shards; batch {args.batch_size}; "
              f"{repeats} repeats (medians over repeats × shards); h5py {h5py.__version__}, "
              f"HDF5 {h5py.version.hdf5_version}; page cache "
              f"{'dropped before each pass' if args.drop_cache else 'warm'}")
        print(f"{'':<22}{'raw h5py':>10}{'raw, no cache':>15}{'by hand':>9}"
              f"{'shard':>8}{'shard/raw':>11}{'target':>9}   (MB/s)")
        ok = True
        for shuffle in (False, True):
            m = measure(path, args.world, repeats, args.batch_size, shuffle, args.drop_cache,
                        args.window_mb or DEFAULT_WINDOW_MB)
            ratio = m[SHARD] / m[RAW]
            label = "shuffled (training)" if shuffle else "in order (evaluation)"
            hand = f"{m[HAND]:>9.0f}" if HAND in m else f"{'-':>9}"
            print(f"{label:<22}{m[RAW]:>10.0f}{m[RAW_NOCACHE]:>15.0f}{hand}{m[SHARD]:>8.0f}"
                  f"{ratio:>10.2f}x{'>= 0.9x':>9} {'met' if ratio >= TARGET else 'NOT MET'}")
            if shuffle:
                print(f"{'':<22}shuffled shard / the same shuffle by hand: "
                      f"{m[SHARD] / m[HAND]:.2f}x; / raw reads without chunk cache: "
                      f"{m[SHARD] / m[RAW_NOCACHE]:.2f}x")
            else:
                ok = ratio >= TARGET
                print(f"{'':<22}in-order shard / raw reads without chunk cache: "
                      f"{m[SHARD] / m[RAW_NOCACHE]:.2f}x")
        p = measure_prefetch(path, repeats, args.prefetch_batch_size,
                             args.window_mb or DEFAULT_WINDOW_MB, args.prefetch)
        print(f"prefetch: the whole file as one shuffled shard, {p['batches']} batches, each "
              f"followed by a "
              f"{p['step_s'] * 1e3:.1f} ms step (as long as reading a batch): "
              f"prefetch_batches=0 {p['off']:.2f} s/epoch, ={args.prefetch} "
              f"{p['on']:.2f} s/epoch: {p['off'] / p['on']:.2f}x faster (at most 2x)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
