#!/usr/bin/env python
"""hpctrain against the floor (the same loop under plain ``torchrun``), side by side.

    python bench/bench_core.py                  # full: 3 fresh runs of each, medians
    python bench/bench_core.py --quick          # 1 run each, smaller sizes (~1 min)
    python bench/bench_core.py --json out.json  # also write every number as JSON
    python bench/bench_core.py --train-only --repeats 12   # the per-step figures, paired
    python bench/bench_core.py --train-only --repeats 12 --control  # their noise floor

Workload (DESIGN.md, "Performance, measured against the anchors"): MLP 784→256→10,
2 Gloo workers, 3 epochs of synthetic data, OMP_NUM_THREADS=1. Each repeat starts every
launcher afresh for three runs: ``train`` (start-up, report latency, steps/s, peak PSS),
``ckpt`` with sync_to_disk=True and ``ckpt`` with sync_to_disk=False. The order of the
launchers alternates between repeats. Ray Train is run too where it is installed.
See bench/README.md for what each figure means.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _procmem import ForeignLoad, TreeSampler, tree, wait_until_idle  # noqa: E402
from _stats import paired_ratio  # noqa: E402

FLOOR, HP, RAY = "torchrun", "hpctrain", "ray"
LABELS = {FLOOR: "torchrun (floor)", HP: "hpctrain", RAY: "Ray Train"}
# environment that would make the local runs think they are inside a cluster job step
_SCRUB_PREFIXES = ("SLURM_", "PBS_", "OMPI_", "PMI_", "PMIX_", "TORCHELASTIC_")
_SCRUB = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
          "MASTER_ADDR", "MASTER_PORT", "HPCTRAIN_RUN_DIR")


PROBLEMS: List[str] = []  # runs that failed after their measurements were taken


def _last_lines(text: str, n: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


# -- launching one run ------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_exe() -> List[str]:
    """The torchrun next to this interpreter (not a pyenv/conda shim, which would add
    its own start-up to the floor), else ``python -m torch.distributed.run``."""
    exe = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if os.access(exe, os.X_OK):
        return [exe]
    return [sys.executable, "-m", "torch.distributed.run"]


def command(launcher: str, workers: int, loop_args: List[str]) -> List[str]:
    if launcher == FLOOR:
        return torchrun_exe() + ["--nproc-per-node", str(workers), "--master-port",
                                 str(free_port()), os.path.join(HERE, "_loop_torchrun.py")] + loop_args
    script = {HP: "_loop_hpctrain.py", RAY: "_loop_ray.py"}[launcher]
    return [sys.executable, os.path.join(HERE, script)] + loop_args


def child_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_SCRUB_PREFIXES) and k not in _SCRUB}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def run_once(launcher: str, mode: str, *, size: str, sync: bool, workers: int, root: str,
             tag: str, timeout: float, sample_memory: bool, keep: bool,
             wait_idle: float, device: str = "cpu") -> Dict[str, Any]:
    """Start one fresh run; return rank 0's record plus the bench's own measurements."""
    workdir = os.path.join(root, tag)
    os.makedirs(workdir)
    out = os.path.join(workdir, "record.json")
    log = os.path.join(root, f"{tag}.log")
    loop_args = ["--mode", mode, "--size", size, "--out", out, "--workdir", workdir,
                 "--sync", "1" if sync else "0", "--workers", str(workers), "--device", device]
    cmd = command(launcher, workers, loop_args)
    load_before = wait_until_idle(wait_idle) if wait_idle > 0 else None
    with open(log, "wb") as logf:
        foreign = ForeignLoad()
        t_launch = time.time()
        proc = subprocess.Popen(cmd, env=child_env(), stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        sampler = TreeSampler(proc.pid) if sample_memory else None
        if sampler:
            sampler.start()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # this run's processes only: its session, and every descendant (hpctrain's
            # local launcher puts each rank in a session of its own)
            for pid in reversed(tree(proc.pid)):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = "timeout"
        finally:
            if sampler:
                sampler.stop()
        t_end = time.time()
        foreign_cores = foreign.cores()
    if code != 0 or not os.path.exists(out):
        with open(log, errors="replace") as f:
            tail = f.read()[-4000:]
        if not os.path.exists(out):
            raise RuntimeError(f"{launcher} {mode} run failed (exit {code}); command:\n  "
                               f"{shlex.join(cmd)}\nlast output:\n{tail}")
        # rank 0 finished measuring and wrote its record, the run failed afterwards
        # (e.g. a crash while a process shut down): keep the numbers, report the failure
        saved = os.path.join(root, f"{tag}.failed.log")
        shutil.copyfile(log, saved)
        PROBLEMS.append(f"{launcher} {mode} ({tag}) exited {code} after rank 0 had written its "
                        f"measurements; output kept in {saved}:\n" + _indent(_last_lines(tail, 14)))
    with open(out) as f:
        rec = json.load(f)
    rec["exit_code"] = code
    rec.update(t_launch=t_launch, wall_s=t_end - t_launch, command=shlex.join(cmd), tag=tag,
               foreign_load_cores=foreign_cores, foreign_load_before=load_before)
    if sampler:
        rec.update(peak_pss_mib=sampler.peak_mib, peak_pss_by_process=sampler.peak_parts,
                   peak_procs=sampler.peak_procs,
                   pss_samples=sampler.samples, launcher_cpu_s=sampler.root_cpu_s(),
                   tree_cpu_s={str(k): v for k, v in sampler.cpu.items()})
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
        os.remove(log)
    return rec


# -- figures -----------------------------------------------------------------------------------
def median(values: List[float]) -> Optional[float]:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def per_run_figures(train: Dict[str, Any], ck_sync: Optional[Dict[str, Any]],
                    ck_nosync: Optional[Dict[str, Any]]) -> Dict[str, Optional[float]]:
    f: Dict[str, Optional[float]] = {
        "start_first_report_s": train["t_first_report"] - train["t_launch"],
        "start_loop_entry_s": train["t_loop_entry"] - train["t_launch"],
        "start_worker_proc_s": train["t_worker_proc_start"] - train["t_launch"],
        "report_p50_us": train["report"]["p50_us"],
        "report_p99_us": train["report"]["p99_us"],
        "report_paced_p50_us": train["report"].get("paced_p50_us"),
        "report_paced_p99_us": train["report"].get("paced_p99_us"),
        "steps_per_s": train["train"]["steps_per_s"],
        "empty_step_cpu_us": train.get("empty_step", {}).get("cpu_us_per_batch"),
        "empty_step_wall_us": train.get("empty_step", {}).get("wall_us_per_batch"),
        "cpu_ms_per_step": train["train"]["cpu_ms_per_step"],
        "launcher_cpu_s": train.get("launcher_cpu_s"),
        "peak_pss_mib": train.get("peak_pss_mib"),
        "peak_procs": train.get("peak_procs"),
        "foreign_load_cores": train["foreign_load_cores"],
    }
    for key, rec in (("sync", ck_sync), ("nosync", ck_nosync)):
        if rec is not None:
            f[f"ckpt_{key}_copy_ms"] = rec["ckpt"]["copy_ms_median"]
            f[f"ckpt_{key}_staged_ms"] = rec["ckpt"]["staged_ms_median"]
            f[f"ckpt_{key}_retention_ms"] = rec["ckpt"].get("retention_ms_median")
    return f


def figure_rows(med: Dict[str, Dict[str, Optional[float]]], mib: int) -> List[Dict[str, Any]]:
    """The table: (label, unit, value per launcher, ratio hpctrain/floor, target, met?)."""
    fl, hp = med[FLOOR], med[HP]
    ray = med.get(RAY)
    rows: List[Dict[str, Any]] = []

    def row(label, unit, key, *, target="info", kind=None, limit=None, fmt="{:.3g}",
            floor_key=None, show_ratio=True, also_ratio_le=None):
        floor_v = fl.get(floor_key or key)
        hp_v = hp.get(key)
        ray_v = ray.get(key) if ray else None
        ratio = hp_v / floor_v if show_ratio and hp_v is not None and floor_v else None
        met = None
        if hp_v is None:  # not measured in this run (--train-only)
            pass
        elif kind == "ratio_le":
            met = ratio is not None and ratio <= limit
        elif kind == "ratio_ge":
            met = ratio is not None and ratio >= limit
        elif kind == "abs_le":
            met = hp_v <= limit and (also_ratio_le is None
                                     or (ratio is not None and ratio <= also_ratio_le))
        rows.append(dict(figure=label, unit=unit, key=key, floor=floor_v, hpctrain=hp_v,
                         ray=ray_v, ratio=ratio, target=target, met=met, fmt=fmt))

    row("1. start → first report (rank 0)", "s", "start_first_report_s",
        target="≤ 1.5× floor", kind="ratio_le", limit=1.5, fmt="{:.2f}")
    row("   start → training function entered", "s", "start_loop_entry_s", fmt="{:.2f}")
    row("   start → rank-0 worker process created", "s", "start_worker_proc_s", fmt="{:.2f}")
    row("2. report() p50, no checkpoint", "µs", "report_p50_us",
        target="≤ 200 µs and ≤ 3× floor", kind="abs_le", limit=200.0, also_ratio_le=3.0,
        fmt="{:.1f}")
    row("   report() p99, no checkpoint", "µs", "report_p99_us", target="≤ 20× floor",
        kind="ratio_le", limit=20.0, fmt="{:.1f}")
    row("   report() p50, 1 ms step between reports", "µs", "report_paced_p50_us", fmt="{:.1f}")
    row("   report() p99, 1 ms step between reports", "µs", "report_paced_p99_us", fmt="{:.1f}")
    row(f"3a. checkpoint {mib} MiB, sync_to_disk=True ¹", "ms", "ckpt_sync_copy_ms",
        target="≤ 1.11× floor", kind="ratio_le", limit=1.11, fmt="{:.1f}")
    row(f"3b. checkpoint {mib} MiB, sync_to_disk=False ²", "ms", "ckpt_nosync_copy_ms",
        target="≤ 1.11× floor", kind="ratio_le", limit=1.11, fmt="{:.1f}")
    row(f"3c. staged {mib} MiB, sync_to_disk=False ³", "ms", "ckpt_nosync_staged_ms",
        floor_key="ckpt_nosync_copy_ms", target="≈ 0: ≤ 0.05× copytree", kind="ratio_le",
        limit=0.05, fmt="{:.1f}")
    row(f"3d. staged {mib} MiB, sync_to_disk=True ⁴", "ms", "ckpt_sync_staged_ms",
        target="≤ 1.11× floor", kind="ratio_le", limit=1.11, fmt="{:.1f}")
    row(f"    delete previous {mib} MiB checkpoint ⁵", "ms", "ckpt_nosync_retention_ms",
        fmt="{:.1f}", show_ratio=False)
    row("4. training throughput", "steps/s", "steps_per_s",
        target="≥ 0.98× floor", kind="ratio_ge", limit=0.98, fmt="{:.1f}")
    row("   rank-0 CPU time per step", "ms", "cpu_ms_per_step", target="≤ 1.03× floor",
        kind="ratio_le", limit=1.03, fmt="{:.2f}")
    row("   empty step through the prepared loader, rank-0 CPU per batch ⁷", "µs",
        "empty_step_cpu_us", target="≤ 1.03× floor", kind="ratio_le", limit=1.03,
        fmt="{:.1f}")
    row("   empty step through the prepared loader, wall time per batch", "µs",
        "empty_step_wall_us", fmt="{:.1f}")
    row("   launcher process CPU (agent / driver)", "s", "launcher_cpu_s", fmt="{:.2f}")
    row("5. peak PSS of the process tree", "MiB", "peak_pss_mib",
        target="≤ 1.2× floor", kind="ratio_le", limit=1.2, fmt="{:.0f}")
    row("   processes in the tree (peak)", "", "peak_procs", fmt="{:.0f}", show_ratio=False)
    row("   CPU used by other processes ⁶", "cores", "foreign_load_cores", fmt="{:.2f}",
        show_ratio=False)
    return rows


NOTES = """¹ floor: shutil.copytree + fsync of each file; hpctrain: report(checkpoint=Checkpoint.from_directory(d)) on rank 0 (rank 1: no checkpoint), CheckpointConfig(num_to_keep=1); source files in page cache
² floor: shutil.copytree of the same files to the same filesystem
³ files written into get_context().get_checkpoint_staging_dir(), then reported (moved by rename); the floor column is copytree, for reference
⁴ floor: files written in place, then fsync of each + rename of the directory + fsync of its parent (what a durable in-place save costs)
⁵ the floor deletes its previous copy outside the timed section; hpctrain's report() applies num_to_keep=1 inside it (3a–3d include it)
⁶ CPU-seconds per second used on this machine by processes other than the bench's own runs, during the train runs (≈ 0 for clean numbers)
⁷ the train loop with nothing in the step: the launcher's own per-batch cost (floor: DataLoader + DistributedSampler; hpctrain: prepare_data_loader)
ratio = hpctrain / floor (for throughput higher is better); medians over fresh runs; every number per run is in --json."""


# -- machine --------------------------------------------------------------------------------------
def machine_info(directory: str) -> Dict[str, Any]:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    fs = "?"
    try:
        best = ""
        real = os.path.realpath(directory)
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, typ = line.split()[:3]
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, fs = mnt, f"{typ} on {mnt}, {dev}"
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 2**20:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return {
        "host": socket.gethostname(), "nproc": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu, "memory": mem, "kernel": platform.release(),
        "python": platform.python_version(), "torch": version("torch"),
        "hpctrain": version("hpctrain"), "ray": version("ray"), "bench_fs": fs,
    }


# -- printing ----------------------------------------------------------------------------------------
#: the figures whose run-to-run noise is of the order of their target: each also gets the
#: ratio of the pairs (repeat i of hpctrain against repeat i of the floor, which ran next to
#: it) with a 95 % confidence interval
PAIRED = [("training throughput", "steps_per_s"), ("rank-0 CPU time per step", "cpu_ms_per_step"),
          ("empty step, rank-0 CPU per batch", "empty_step_cpu_us"),
          ("report() p50, no checkpoint", "report_p50_us"),
          ("report() p99, no checkpoint", "report_p99_us")]


def paired_rows(per_run: Dict[str, List[Dict[str, Optional[float]]]]) -> List[Dict[str, Any]]:
    """[{figure, key, pairs, ratio, low, high}] over the repeats (two or more)."""
    out = []
    for label, key in PAIRED:
        pairs = [(h.get(key), f.get(key)) for h, f in zip(per_run[HP], per_run[FLOOR])]
        pairs = [(h, f) for h, f in pairs if h and f]
        if len(pairs) < 2:
            continue
        ratio, low, high = paired_ratio([h for h, _ in pairs], [f for _, f in pairs])
        out.append(dict(figure=label, key=key, pairs=len(pairs), ratio=ratio, low=low,
                        high=high))
    return out


def fmt(v: Optional[float], f: str) -> str:
    return "—" if v is None else f.format(v)


def print_report(rows: List[Dict[str, Any]], machine: Dict[str, Any], cmdline: str,
                 meta: Dict[str, Any], with_ray: bool,
                 paired: Optional[List[Dict[str, Any]]] = None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200, highlight=False)
    m, z = machine, meta["sizes"]
    lines = [
        f"command: {cmdline}",
        f"machine: {m['nproc']} CPUs ({m['usable_cpus']} usable), {m['cpu_model']}, "
        f"{m['memory']} RAM, Linux {m['kernel']}; python {m['python']}, torch {m['torch']}, "
        f"hpctrain {m['hpctrain']}; bench dir {meta['dir']} ({m['bench_fs']})",
        f"workload: MLP 784→256→10, {meta['workers']} "
        f"{'NCCL GPU' if meta.get('device') == 'cuda' else 'Gloo'} workers, {z['epochs']} epochs × "
        f"{z['samples']} samples, batch {z['batch_size']}, OMP_NUM_THREADS=1; "
        f"{z['report_n']} timed reports; checkpoint {z['ckpt_files']} × {z['ckpt_file_mib']} MiB; "
        f"medians of {meta['repeats']} fresh run(s) of each launcher; "
        f"bench took {meta['elapsed_s']:.0f} s",
    ]
    for line in lines:
        console.print(escape(line))
    if not with_ray:
        console.print("Ray Train not installed: skipped")
    table = Table(show_lines=False)
    table.add_column("figure")
    table.add_column("unit")
    table.add_column(LABELS[FLOOR], justify="right")
    table.add_column(LABELS[HP], justify="right")
    if with_ray:
        table.add_column(LABELS[RAY], justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("target")
    table.add_column("met?")
    for r in rows:
        cells = [r["figure"], r["unit"], fmt(r["floor"], r["fmt"]), fmt(r["hpctrain"], r["fmt"])]
        if with_ray:
            cells.append(fmt(r["ray"], r["fmt"]))
        cells.append("—" if r["ratio"] is None else f"{r['ratio']:.2f}×")
        cells.append(r["target"])
        cells.append("" if r["met"] is None else ("[green]yes[/]" if r["met"] else "[bold red]NO[/]"))
        table.add_row(*cells)
    console.print(table)
    for p in paired or []:
        console.print(f"paired, {p['figure']}: ×{p['ratio']:.3f} (95 % CI ×{p['low']:.3f} … "
                      f"×{p['high']:.3f}, {p['pairs']} pairs)")
    console.print(NOTES)
    busy = [r for r in rows if r["key"] == "foreign_load_cores"]
    worst = max((v for r in busy for v in (r["floor"], r["hpctrain"], r["ray"]) if v is not None),
                default=0.0)
    if worst > 0.2:
        console.print(f"[bold yellow]WARNING[/]: other processes used up to {worst:.2f} cores "
                      "during the runs (median over repeats): the timings are contended; run "
                      "again on a quiet machine (or raise --wait-idle) before trusting ratios.")


# -- main ---------------------------------------------------------------------------------------------
def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=None, help="fresh runs per launcher (3)")
    p.add_argument("--quick", action="store_true",
                   help="1 repeat, smaller sizes (64 MiB checkpoint, 500 reports): ~1 min")
    p.add_argument("--json", metavar="FILE", help="write every number here as JSON")
    p.add_argument("--dir", default=tempfile.gettempdir(),
                   help="where run directories and checkpoint copies go (same filesystem "
                        "for hpctrain and copytree; default: %(default)s)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="train on CPU ranks (Gloo) or one GPU per rank (NCCL; --workers at "
                        "most the GPUs here)")
    p.add_argument("--timeout", type=float, default=600.0, help="per run, seconds")
    p.add_argument("--no-ray", action="store_true", help="skip Ray Train even if installed")
    p.add_argument("--control", action="store_true",
                   help="the noise floor: the floor's runs in both columns (the hpctrain "
                        "column runs torchrun again), so the paired ratios show what two "
                        "identical launchers differ by on this machine")
    p.add_argument("--train-only", action="store_true",
                   help="only the train runs (figures 1, 2, 4, 5; no checkpoint runs): many "
                        "repeats of the per-step figures in less time, e.g. --repeats 12")
    p.add_argument("--keep", action="store_true", help="keep run directories and logs")
    p.add_argument("--wait-idle", type=float, default=None, metavar="S",
                   help="before each run, wait up to S seconds for other processes to leave "
                        "the CPUs idle (0: don't wait; default 30, 5 with --quick)")
    args = p.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    size = "quick" if args.quick else "full"
    if args.wait_idle is None:
        args.wait_idle = 5.0 if args.quick else 30.0

    from _sizes import SIZES  # (the bench process itself never imports torch)

    sizes = SIZES[size]
    launchers = [FLOOR, HP]
    if args.control:
        LABELS[HP] = "torchrun (again)"
        args.no_ray = True
    with_ray = importlib.util.find_spec("ray") is not None and not args.no_ray
    if with_ray:
        launchers.append(RAY)
    else:
        print("Ray Train not installed: skipped" if not args.no_ray else "Ray Train: skipped "
              "(--no-ray)", file=sys.stderr)

    os.makedirs(args.dir, exist_ok=True)
    root = tempfile.mkdtemp(prefix="hpctrain-bench-", dir=args.dir)
    cmdline = shlex.join([os.path.basename(sys.executable)] + [
        os.path.relpath(sys.argv[0]) if sys.argv[0] else "bench/bench_core.py"] + sys.argv[1:])
    machine = machine_info(root)
    runs: List[Dict[str, Any]] = []
    per_run: Dict[str, List[Dict[str, Optional[float]]]] = {l: [] for l in launchers}
    t0 = time.time()
    try:
        for rep in range(repeats):
            order = launchers if rep % 2 == 0 else list(reversed(launchers))
            for launcher in order:
                recs: Dict[str, Dict[str, Any]] = {}
                plan = [("train", True), ("ckpt", True), ("ckpt", False)]
                if launcher == RAY:  # no sync_to_disk switch in Ray
                    plan = [("train", True), ("ckpt", False)]
                if args.train_only:
                    plan = [("train", True)]
                for mode, sync in plan:
                    tag = f"r{rep}-{launcher}-{mode}" + ("" if mode == "train" else
                                                          ("-sync" if sync else "-nosync"))
                    t = time.time()
                    rec = run_once(FLOOR if args.control else launcher, mode, size=size,
                                   sync=sync, workers=args.workers,
                                   root=root, tag=tag, timeout=args.timeout,
                                   sample_memory=(mode == "train"), keep=args.keep,
                                   wait_idle=args.wait_idle, device=args.device)
                    rec.update(repeat=rep, sync=sync)
                    runs.append(rec)
                    recs[tag.split("-", 2)[2]] = rec
                    print(f"[bench {time.time() - t0:6.1f}s] repeat {rep + 1}/{repeats} "
                          f"{launcher:8s} {mode:5s}{'' if mode == 'train' else (' sync' if sync else ' nosync'):7s}"
                          f" {time.time() - t:5.1f}s (other load {rec['foreign_load_cores']:.2f}"
                          " cores)", file=sys.stderr, flush=True)
                per_run[launcher].append(per_run_figures(
                    recs["train"], recs.get("ckpt-sync"), recs.get("ckpt-nosync")))
    finally:
        if not args.keep:
            for entry in os.listdir(root):  # keep only logs of failed runs
                if not entry.endswith(".failed.log"):
                    path = os.path.join(root, entry)
                    shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
            if not os.listdir(root):
                os.rmdir(root)

    med = {l: {k: median([r.get(k) for r in rs]) for k in rs[0]} for l, rs in per_run.items()}
    mib = sizes["ckpt_files"] * sizes["ckpt_file_mib"]
    rows = figure_rows(med, mib)
    meta = {"dir": args.dir, "workers": args.workers, "device": args.device, "repeats": repeats, "size": size,
            "sizes": sizes, "elapsed_s": time.time() - t0}
    paired = paired_rows(per_run)
    print_report(rows, machine, cmdline, meta, with_ray, paired)
    for problem in PROBLEMS:
        print(f"FAILED RUN: {problem}")
    if args.json:
        doc = {"command": cmdline, "machine": machine, "meta": meta, "notes": NOTES,
               "launchers": launchers, "ray": "measured" if with_ray else
               "Ray Train not installed: skipped",
               "figures": [{k: v for k, v in r.items() if k != "fmt"} for r in rows],
               "medians": med, "paired": paired, "per_run": per_run, "runs": runs, "failed_runs": PROBLEMS}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
