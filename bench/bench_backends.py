#!/usr/bin/env python
"""Time to first report per backend: hpctrain against the same loop started by hand.

    python bench/bench_backends.py                  # 2 ranks, 5 runs each (about 3 min)
    python bench/bench_backends.py --repeats 3 --backends mpi horovod

For each backend, on this machine, with 2 ranks: the clock starts when the bench starts
a process and stops when rank 0 has finished its first collective (a sum over the
ranks: ``bench/_backend_loop.py``), the point where the training function reports for
the first time.

* hpctrain: ``python bench/_backend_hpctrain.py`` — a script that builds
  ``MPITrainer``/``HorovodTrainer``/``TensorflowTrainer`` and calls ``fit()`` (driver
  start, run directory, supervisor, ranks, backend set-up: mpirun for MPI, Horovod's Gloo
  rendezvous, ``TF_CONFIG`` exchange).
* by hand: ``mpirun -np 2 python _backend_loop.py mpi``; ``horovodrun -np 2 -H
  localhost:2 --gloo python _backend_loop.py horovod``; two ``python _backend_loop.py
  tensorflow`` processes with a hand-written ``TF_CONFIG`` (ports picked beforehand).

Runs alternate (hand, hpctrain, hand, …) so that both see the same machine; medians are
printed with the ratio hpctrain / by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
LOOP = os.path.join(HERE, "_backend_loop.py")
BACKENDS = ("mpi", "horovod", "tensorflow")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _env() -> Dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1")
    if os.geteuid() == 0:  # Open MPI refuses root without these (a test VM, a container)
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def by_hand(backend: str, mark: str, workers: int) -> List[subprocess.Popen]:
    env = _env()
    py = sys.executable
    if backend == "mpi":
        cmd = ["mpirun", "-np", str(workers), "--oversubscribe", py, LOOP, "mpi", mark]
        return [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)]
    if backend == "horovod":
        cmd = ["horovodrun", "-np", str(workers), "-H", f"localhost:{workers}", "--gloo",
               py, LOOP, "horovod", mark]
        return [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)]
    workers_list = [f"localhost:{_free_port()}" for _ in range(workers)]
    procs = []
    for i in range(workers):
        tf_config = {"cluster": {"worker": workers_list}, "task": {"type": "worker", "index": i}}
        procs.append(subprocess.Popen(
            [py, LOOP, "tensorflow", mark],
            env=dict(env, TF_CONFIG=json.dumps(tf_config), TF_USE_LEGACY_KERAS="1"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def with_hpctrain(backend: str, mark: str, storage: str, workers: int) -> List[subprocess.Popen]:
    return [subprocess.Popen(
        [sys.executable, os.path.join(HERE, "_backend_hpctrain.py"), backend, mark, storage],
        env=dict(_env(), BENCH_WORKERS=str(workers)), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)]


def timed(start_procs) -> float:
    """Seconds from starting the processes to rank 0's first report."""
    with tempfile.TemporaryDirectory() as d:
        mark = os.path.join(d, "mark")
        t0 = time.time()
        procs = start_procs(mark)
        for p in procs:
            _, err = p.communicate(timeout=600)
            if p.returncode != 0:
                raise RuntimeError(f"exit {p.returncode}: {err}")
        with open(mark) as f:
            return float(f.readline()) - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as storage:
        for backend in args.backends:
            timed(lambda m: by_hand(backend, m, args.workers))  # warm the page cache
            hand, ours = [], []
            for _ in range(args.repeats):
                hand.append(timed(lambda m: by_hand(backend, m, args.workers)))
                ours.append(timed(lambda m: with_hpctrain(backend, m, storage, args.workers)))
            rows.append((backend, statistics.median(hand), statistics.median(ours), hand, ours))
            print(f"{backend}: by hand {hand}  hpctrain {ours}", file=sys.stderr, flush=True)
    print(f"time to first report, {args.workers} ranks on this machine "
          f"({os.cpu_count()} cores), median of {args.repeats}")
    print(f"{'backend':<12}{'by hand':>12}{'hpctrain':>12}{'ratio':>8}")
    for backend, h, o, _, _ in rows:
        print(f"{backend:<12}{h:>11.2f}s{o:>11.2f}s{o / h:>7.2f}x")


if __name__ == "__main__":
    main()
