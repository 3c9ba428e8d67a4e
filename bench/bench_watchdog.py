#!/usr/bin/env python
"""The hang watchdog's and the straggler statistics' cost, against no watchdog.

    python bench/bench_watchdog.py              # 12 pairs, about 3 minutes
    python bench/bench_watchdog.py --pairs 20   # a narrower interval
    python bench/bench_watchdog.py --control    # also off-vs-off pairs: the noise floor

Three figures:

* **per move, in the rank**: ``progress.beat()``, called at every report and every batch
  of a prepared data loader (the heartbeat thread writes its file at most every 5 s);
* **per check, in the supervisor**: ``Watchdog.poll()`` with the straggler statistics
  (``Pace``) over 8 and 64 ranks' heartbeat files, once a second: the share of one core;
* **end to end**: 2 local ranks, 400 reports after 2 ms of busy work each, with
  ``hang_timeout = "off"`` and with the watchdog (learned limit), run as pairs in
  alternating order (off-on, on-off, …). Each pair gives one ratio (on / off of rank 0's
  time per report after a warm-up); the figure is their geometric mean with a 95 %
  confidence interval (Student's t over the pairs' log ratios), so that the machine's
  drift between pairs cancels out and the noise is stated, not hidden. The supervisor's
  CPU time per run (this process: the local run's supervisor) is paired the same way.

What differs with the watchdog on: only the supervisor's work (one look at the ranks'
heartbeat files a second, and the step-time statistics saved into ``state.json`` every
10 s). The ranks run the same code either way: the heartbeat thread and the progress
count are there without the watchdog too (the metrics file reads them), so the rank's
report path has nothing to cut. An interval that contains 1 says the end-to-end cost is
below what this machine can resolve; the per-check figure bounds it from above.

Run it on a quiet machine; it prints the load average next to the numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _stats import paired_ratio  # noqa: E402


def per_beat_ns(n: int = 1_000_000) -> float:
    from hpctrain.common import progress

    t = time.perf_counter()
    for _ in range(n):
        progress.beat()
    return (time.perf_counter() - t) / n * 1e9


def per_poll_us(ranks: int, polls: int = 200) -> float:
    from hpctrain.allocation.stragglers import Pace
    from hpctrain.allocation.watchdog import Watchdog

    with tempfile.TemporaryDirectory() as d:
        pace = Pace(2.0)
        dog = Watchdog(d, ranks, started=time.time(), check_s=0, on_record=pace.observe)
        t0 = time.time()
        total = 0.0
        for i in range(polls):
            for r in range(ranks):
                with open(os.path.join(d, f"heartbeat.rank-{r}.json"), "w") as f:
                    json.dump({"rank": r, "host": "n1", "pid": 1, "progress": i + 1,
                               "time": t0 + i, "phase": "train"}, f)
            t = time.perf_counter()
            dog.poll(now=t0 + i)
            pace.warning()
            total += time.perf_counter() - t
        return total / polls * 1e6


def end_to_end(storage: str, watchdog: bool, reports: int, step_ms: float) -> tuple:
    """One run: (rank 0's seconds per report after the warm-up, this process's CPU
    seconds during the run: the local supervisor's)."""
    from hpctrain import FailureConfig, RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    import _watchdog_loop

    cpu = time.process_time()
    result = TorchTrainer(
        _watchdog_loop.loop, train_loop_config={"reports": reports, "step_ms": step_ms},
        scaling_config=ScalingConfig(num_workers=2), site="local",
        run_config=RunConfig(storage_path=storage, verbose=0, failure_config=FailureConfig(
            hang_timeout=None if watchdog else "off"))).fit()
    return float(result.return_value), time.process_time() - cpu


def pairs(storage: str, n: int, first: bool, second: bool, reports: int, step_ms: float):
    """``n`` pairs of runs (``first``, ``second``: watchdog on?), in alternating order:
    ([(time, cpu) of first], [(time, cpu) of second])."""
    a, b = [], []
    for i in range(n):
        if i % 2 == 0:
            a.append(end_to_end(storage, first, reports, step_ms))
            b.append(end_to_end(storage, second, reports, step_ms))
        else:
            b.append(end_to_end(storage, second, reports, step_ms))
            a.append(end_to_end(storage, first, reports, step_ms))
    return a, b


def describe(label: str, on: list, off: list) -> str:
    r, lo, hi = paired_ratio([t for t, _ in on], [t for t, _ in off])
    c, clo, chi = paired_ratio([c for _, c in on], [c for _, c in off])
    return (f"{label}: ×{r:.4f} per report (95 % CI ×{lo:.4f} … ×{hi:.4f}, {len(on)} pairs); "
            f"supervisor CPU per run ×{c:.3f} (×{clo:.3f} … ×{chi:.3f})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", "--repeats", type=int, default=12,
                   help="pairs of end-to-end runs, off and on (alternating order)")
    p.add_argument("--reports", type=int, default=400)
    p.add_argument("--step-ms", type=float, default=2.0)
    p.add_argument("--control", action="store_true",
                   help="also as many off-vs-off pairs: the interval of no difference")
    args = p.parse_args()
    print(f"load average before: {os.getloadavg()}")
    beat = per_beat_ns()
    print(f"per move in the rank: progress.beat() {beat:.0f} ns "
          f"({beat / (args.step_ms * 1e6):.4%} of a {args.step_ms:g} ms step)")
    for ranks in (8, 64):
        us = per_poll_us(ranks)
        print(f"per check in the supervisor, {ranks} ranks: {us:.0f} µs "
              f"({us / 1e6:.3%} of a core at one check a second)")
    with tempfile.TemporaryDirectory() as storage:
        off, on = pairs(storage, args.pairs, False, True, args.reports, args.step_ms)
        control = pairs(storage, args.pairs, False, False, args.reports, args.step_ms) \
            if args.control else None
    print(f"end to end, 2 ranks, {args.reports} reports after {args.step_ms:g} ms of work: "
          f"median {statistics.median(t for t, _ in off) * 1e3:.3f} ms per report without "
          f"the watchdog, {statistics.median(t for t, _ in on) * 1e3:.3f} ms with it")
    print("  " + describe("watchdog on / off", on, off))
    if control is not None:
        print("  " + describe("control, off / off", control[1], control[0]))
    print(f"  every pair (ms per report, off → on): "
          f"{[(round(a[0] * 1e3, 3), round(b[0] * 1e3, 3)) for a, b in zip(off, on)]}")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
