"""In-allocation restart after ``kill -9`` of a rank → first resumed report, cold ranks
against warm spares (``HPCTRAIN_WARM_SPARES=1``), side by side in one run.

Each run is ``TorchTrainer(_restart_loop.loop, 2 workers, max_failures=1).fit()`` on this
machine (local launcher): a DDP loop with a committed checkpoint every step; rank 1 kills
itself with SIGKILL at step ``--kill-at`` of the first attempt (with spares on, once they
are ready, and after ``--settle`` s in both modes). The figure: from rank 1's
``time.time()`` just before ``os.kill`` to the ``time.time()`` rank 0 takes when its first
``report()`` of the second attempt returned. Break-down from ``state.json`` (the first
attempt's ``ended``: the supervisor saw the failure and stopped the survivors; the second's
``started``) and the loop's trace (rank 0's process start, training function entered,
model built and checkpoint loaded). Medians over ``--repeats`` pairs; the order
alternates. Target (issue 18): warm ≤ 0.3× cold.

    python bench/bench_restart.py [--repeats 3] [--workers 2] [--json out.json]
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

TARGET = 0.3


def one_run(root: str, warm: bool, i: int, args) -> dict:
    from hpctrain import FailureConfig, RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    import _restart_loop

    trace = os.path.join(root, f"trace-{'warm' if warm else 'cold'}-{i}.txt")
    if warm:
        os.environ["HPCTRAIN_WARM_SPARES"] = "1"
    else:
        os.environ.pop("HPCTRAIN_WARM_SPARES", None)
    config = {"steps": args.kill_at + 4, "kill_at": args.kill_at, "sleep": 0.05,
              "trace": trace, "wait_spares": args.workers if warm else 0,
              "settle": args.settle}
    t0 = time.time()
    result = TorchTrainer(
        _restart_loop.loop, train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=args.workers),
        run_config=RunConfig(name=f"{'warm' if warm else 'cold'}-{i}", storage_path=root,
                             verbose=0, failure_config=FailureConfig(max_failures=1))).fit()
    total = time.time() - t0
    os.environ.pop("HPCTRAIN_WARM_SPARES", None)
    if result.error is not None:
        raise SystemExit(f"run failed: {result.error}")
    ev = [line.split() for line in open(trace)]
    kill = next(float(e[3]) for e in ev if e[0] == "kill")
    enter2 = next(e for e in ev if e[0] == "enter" and e[1] == "2")
    start2 = next(float(e[3]) for e in ev if e[0] == "start" and e[1] == "2")
    post2 = next(float(e[3]) for e in ev if e[0] == "post" and e[1] == "2")
    state = json.load(open(os.path.join(result.path, "state.json")))
    a1, a2 = state["attempts"][0], state["attempts"][1]
    assert a1["outcome"] == "FAILED" and a2["outcome"] == "FINISHED", state
    return {
        "mode": "warm" if warm else "cold",
        "kill → first resumed report": post2 - kill,
        "kill → failure handled (attempt 1 ended)": a1["ended"] - kill,
        "kill → attempt 2 started": a2["started"] - kill,
        "kill → rank 0 process ready¹": (max(float(enter2[4]), a2["started"]) if warm
                                         else float(enter2[4])) - kill,
        "kill → training function entered": float(enter2[3]) - kill,
        "kill → model built, checkpoint loaded": start2 - kill,
        "whole fit()": total,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--kill-at", type=int, default=5)
    ap.add_argument("--settle", type=float, default=1.0)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    root = tempfile.mkdtemp(prefix="hpctrain-bench-restart-", dir=args.dir)
    runs = []
    try:
        for i in range(args.repeats):
            for warm in ((False, True) if i % 2 == 0 else (True, False)):
                r = one_run(root, warm, i, args)
                runs.append(r)
                print(f"  run {i} {r['mode']}: kill → first resumed report "
                      f"{r['kill → first resumed report']:.2f} s", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    keys = [k for k in runs[0] if k != "mode"]
    med = {m: {k: statistics.median(r[k] for r in runs if r["mode"] == m) for k in keys}
           for m in ("cold", "warm")}
    print(f"\nIn-allocation restart, {args.workers} local ranks, kill -9 of rank 1; "
          f"medians of {args.repeats}; load average now {os.getloadavg()[0]:.2f}")
    print(f"{'':44s} {'cold':>8s} {'warm':>8s} {'ratio':>7s}")
    for k in keys:
        c, w = med["cold"][k], med["warm"][k]
        print(f"{k:44s} {c:7.2f}s {w:7.2f}s {w / c if c else float('nan'):6.2f}×")
    ratio = med["warm"]["kill → first resumed report"] / med["cold"]["kill → first resumed report"]
    print(f"\nkill → first resumed report, warm / cold = {ratio:.2f}× (target ≤ {TARGET}×: "
          f"{'met' if ratio <= TARGET else 'NOT met'})")
    print("¹ cold: rank 0's worker process started; warm: the spare (already running) "
          "got its assignment (= attempt 2 started)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "medians": med, "ratio": ratio}, f, indent=1)


if __name__ == "__main__":
    main()
