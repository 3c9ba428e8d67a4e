#!/usr/bin/env python
"""The hang watchdog's and the straggler statistics' cost, against no watchdog.

    python bench/bench_watchdog.py            # about 2 minutes
    python bench/bench_watchdog.py --repeats 5

Three figures:

* **per move, in the rank**: ``progress.beat()``, called at every report and every batch
  of a prepared data loader (the heartbeat thread writes its file at most every 5 s);
* **per check, in the supervisor**: ``Watchdog.poll()`` with the straggler statistics
  (``Pace``) over 8 and 64 ranks' heartbeat files, once a second: the share of one core;
* **end to end**: 2 local ranks, 400 reports after 2 ms of busy work each, with
  ``hang_timeout = "off"`` and with the watchdog (learned limit), alternating; the time
  per report (rank 0, after a warm-up) and the ratio.

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


def per_beat_ns(n: int = 1_000_000) -> float:
    from hpctrain._internal.base import progress

    t = time.perf_counter()
    for _ in range(n):
        progress.beat()
    return (time.perf_counter() - t) / n * 1e9


def per_poll_us(ranks: int, polls: int = 200) -> float:
    from hpctrain._internal.allocation.stragglers import Pace
    from hpctrain._internal.allocation.watchdog import Watchdog

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


def end_to_end(storage: str, watchdog: bool, reports: int, step_ms: float) -> float:
    from hpctrain import FailureConfig, RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    import _watchdog_loop

    result = TorchTrainer(
        _watchdog_loop.loop, train_loop_config={"reports": reports, "step_ms": step_ms},
        scaling_config=ScalingConfig(num_workers=2), site="local",
        run_config=RunConfig(storage_path=storage, verbose=0, failure_config=FailureConfig(
            hang_timeout=None if watchdog else "off"))).fit()
    return float(result.return_value)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--reports", type=int, default=400)
    p.add_argument("--step-ms", type=float, default=2.0)
    args = p.parse_args()
    print(f"load average before: {os.getloadavg()}")
    beat = per_beat_ns()
    print(f"per move in the rank: progress.beat() {beat:.0f} ns "
          f"({beat / (args.step_ms * 1e6):.4%} of a {args.step_ms:g} ms step)")
    for ranks in (8, 64):
        us = per_poll_us(ranks)
        print(f"per check in the supervisor, {ranks} ranks: {us:.0f} µs "
              f"({us / 1e6:.3%} of a core at one check a second)")
    times = {True: [], False: []}
    with tempfile.TemporaryDirectory() as storage:
        for i in range(args.repeats):
            for on in ((False, True) if i % 2 == 0 else (True, False)):
                times[on].append(end_to_end(storage, on, args.reports, args.step_ms))
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"end to end, 2 ranks, {args.reports} reports after {args.step_ms:g} ms of work, "
          f"median of {args.repeats}: {off * 1e3:.3f} ms per report without the watchdog, "
          f"{on * 1e3:.3f} ms with it: ×{on / off:.4f}")
    print(f"  every run (ms): off {[round(t * 1e3, 3) for t in times[False]]}, "
          f"on {[round(t * 1e3, 3) for t in times[True]]}")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
