#!/usr/bin/env python
"""hpctrain's batch-side costs against their anchors: rendering, host lists, submission.

    python bench/bench_slurm.py                   # all figures, medians
    python bench/bench_slurm.py --quick           # fewer repeats (a few seconds)
    python bench/bench_slurm.py --no-submit       # skip the submissions to the test cluster
    python bench/bench_slurm.py --json out.json   # also write every number as JSON

Figures (each a median over repeats, in milliseconds):

1. render a 4,096-node job (``workers_per_node = 4``) on the sites ``generic-slurm`` and
   ``generic-pbs``: ``BatchRequest(spec, run_path).materialize()``, the exact script
   ``hpctrain render``/``submit`` produce; loading the spec (``load_job_spec``: TOML, site
   layer, validation, limits) is reported on its own row, and the first render of the
   process (template files read and compiled) as an information row. Target < 50 ms.
2. expand a 10,000-node host list with ``hpctrain.cluster_env.expand_hostlist``, a dense
   one (``nid[000001-010000]``) and a fragmented one (``n[1-3,5,7-9999],gpu[01-20]``), and
   build the ``WorkerInfo`` of the last rank of a 40,000-task srun step on 10,000 nodes
   (``worker_info_from_env``). Target < 20 ms. Anchor: ``scontrol show hostnames`` on the
   same expression (a process of its own, which is how a job script expands a host list),
   where scontrol is installed.
3. submission: ``hpctrain submit job.toml --site test-cluster`` as a process, wall time
   until it printed the job id, against ``sbatch --parsable`` of a trivial script with the
   same ``#SBATCH`` lines, on the running test cluster (``bash scripts/slurm-cluster.sh
   start``). Both submit held jobs (``--hold``), so nothing runs while the bench measures;
   every job is cancelled with ``scancel`` at the end. Skipped, with a note, without
   ``sbatch`` or a reachable cluster. No target: the ratio is for information.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

ENTRY = os.path.join(ROOT, "examples", "quickstart_train.py")
NODES = 4096
WORKERS_PER_NODE = 4
HOSTS = 10_000
DENSE = "nid[000001-010000]"
FRAGMENTED = "n[1-3,5,7-9999],gpu[01-20]"
RENDER_TARGET_MS = 50.0
HOSTS_TARGET_MS = 20.0

# The job of figure 1 and 3: the quickstart's training and [config] (examples/quickstart.toml).
JOB_TOML = """\
[job]
entrypoint = "{entry}:train_func"
backend = "torch"

[scaling]
{scaling}

[run]
name = "{name}"
storage_path = "{storage}"

[checkpoint]
num_to_keep = 2
checkpoint_score_attribute = "loss"
checkpoint_score_order = "min"

[failure]
max_failures = 1

[config]
lr = 0.05
epochs = 3
samples = 4096
batch_size = 64
seed = 0
"""


def median(values: List[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def timed(fn: Callable[[], Any], repeats: int) -> List[float]:
    """Milliseconds of each of ``repeats`` calls of ``fn``."""
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000.0)
    return out


def row(figure: str, unit: str, hp: Optional[float], base: Optional[float] = None, *,
        target: str = "info", limit: Optional[float] = None, fmt: str = "{:.2f}",
        key: str = "", baseline_label: str = "") -> Dict[str, Any]:
    ratio = hp / base if hp is not None and base else None
    met = None if limit is None or hp is None else hp < limit
    return {"key": key, "figure": figure, "unit": unit, "hpctrain": hp, "baseline": base,
            "baseline_label": baseline_label, "ratio": ratio, "target": target, "met": met,
            "fmt": fmt}


# -- 1. rendering -----------------------------------------------------------------------------
def bench_render(work: str, repeats: int) -> List[Dict[str, Any]]:
    from hpctrain.schedulers import BatchRequest
    from hpctrain.spec import load_job_spec

    rows = []
    scaling = f"num_nodes = {NODES}\nworkers_per_node = {WORKERS_PER_NODE}"
    job = os.path.join(work, "render-job.toml")
    with open(job, "w") as f:
        f.write(JOB_TOML.format(entry=ENTRY, scaling=scaling, name="bench-render",
                                storage=os.path.join(work, "runs")))
    for site in ("generic-slurm", "generic-pbs"):
        overrides = ['scheduler.time="12:00:00"']
        spec = load_job_spec(job, overrides, site=site)
        run_path = os.path.join(work, "runs", "bench-render")
        request = BatchRequest(spec, run_path)
        t = time.perf_counter()
        script = request.materialize()
        first = (time.perf_counter() - t) * 1000.0
        loads = timed(lambda: load_job_spec(job, overrides, site=site), repeats)
        renders = timed(request.materialize, repeats)
        stable = all(request.materialize() == script for _ in range(3))
        nodes_line = (f"#SBATCH --nodes={NODES}" if site == "generic-slurm"
                      else f"#PBS -l select={NODES}:")
        assert nodes_line in script, f"{site}: no {nodes_line!r} in the script"
        kind = site.split("-")[1]
        rows.append(row(f"load spec, {NODES:,} nodes × {WORKERS_PER_NODE} ({site})", "ms",
                        median(loads), key=f"load_{kind}"))
        rows.append(row(f"render {kind} script, {NODES:,} nodes × {WORKERS_PER_NODE}", "ms",
                        median(renders), target=f"< {RENDER_TARGET_MS:.0f} ms",
                        limit=RENDER_TARGET_MS, key=f"render_{kind}"))
        rows.append(row(f"  first render in this process ({kind})", "ms", first,
                        key=f"render_{kind}_first"))
        if not stable:
            rows.append(row(f"  WARNING: {kind} renders differ between calls", "", None))
    return rows


# -- 2. host lists ----------------------------------------------------------------------------
def scontrol_ms(expr: str, repeats: int) -> tuple:
    """(median ms, host count) of ``scontrol show hostnames expr``; (None, None) without it."""
    exe = shutil.which("scontrol")
    if exe is None:
        return None, None
    times, count = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = subprocess.run([exe, "show", "hostnames", expr], capture_output=True, text=True)
        times.append((time.perf_counter() - t) * 1000.0)
        if out.returncode != 0:
            return None, None
        count = len(out.stdout.split())
    return median(times), count


def slurm_env(nodes: int, per_node: int) -> Dict[str, str]:
    """The environment srun gives the last task of a ``nodes`` × ``per_node`` step."""
    tasks = nodes * per_node
    return {
        "SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(tasks - 1),
        "SLURM_LOCALID": str(per_node - 1), "SLURM_NODEID": str(nodes - 1),
        "SLURM_STEP_NUM_TASKS": str(tasks), "SLURM_NTASKS": str(tasks),
        "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x{nodes})",
        "SLURM_TASKS_PER_NODE": f"{per_node}(x{nodes})",
        "SLURM_STEP_NODELIST": DENSE, "SLURM_JOB_NODELIST": DENSE, "SLURM_NNODES": str(nodes),
    }


def bench_hosts(repeats: int, sc_repeats: int) -> tuple:
    from hpctrain.cluster_env import expand_hostlist, worker_info_from_env

    rows, notes = [], []
    have_scontrol = shutil.which("scontrol") is not None
    for label, expr in (("dense", DENSE), ("fragmented", FRAGMENTED)):
        hosts = expand_hostlist(expr)
        ms = median(timed(lambda: expand_hostlist(expr), repeats))
        base, count = scontrol_ms(expr, sc_repeats)
        if count is not None and count != len(hosts):
            notes.append(f"scontrol expands {expr} to {count} hosts, hpctrain to {len(hosts)}")
        rows.append(row(f"expand_hostlist {label}: {expr} ({len(hosts):,} hosts)", "ms", ms,
                        base, target=f"< {HOSTS_TARGET_MS:.0f} ms", limit=HOSTS_TARGET_MS,
                        key=f"expand_{label}", baseline_label="scontrol show hostnames"))
    if not have_scontrol:
        notes.append("scontrol not installed: no anchor for the host lists")
    env = slurm_env(HOSTS, 4)
    host = f"nid{HOSTS:06d}"
    info = worker_info_from_env(env, hostname=host)
    assert (info.world_rank, info.node_rank, len(info.hosts), info.master_addr) == (
        HOSTS * 4 - 1, HOSTS - 1, HOSTS, "nid000001"), info
    ms = median(timed(lambda: worker_info_from_env(env, hostname=host), repeats))
    rows.append(row(f"worker_info_from_env, rank {HOSTS * 4 - 1:,} of {HOSTS:,} nodes × 4",
                    "ms", ms, target=f"< {HOSTS_TARGET_MS:.0f} ms", limit=HOSTS_TARGET_MS,
                    key="worker_info"))
    return rows, notes


# -- 3. submission ----------------------------------------------------------------------------
def cluster_problem() -> Optional[str]:
    if shutil.which("sbatch") is None:
        return "sbatch not installed: submission overhead skipped"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P %a"], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"no Slurm cluster reachable ({e}): submission overhead skipped " \
               "(start it with: bash scripts/slurm-cluster.sh start)"
    if out.returncode != 0 or "up" not in out.stdout:
        return ("no Slurm cluster reachable (sinfo: " + (out.stderr.strip() or "no partition up")
                + "): submission overhead skipped (bash scripts/slurm-cluster.sh start)")
    return None


_SUBMITTED = re.compile(r"submitted slurm job (\d+)")


def submit_hpctrain(job: str, name: str, storage: str) -> tuple:
    """(ms until the job id was printed, job id) of one ``hpctrain submit`` process."""
    argv = [sys.executable, "-m", "hpctrain", "submit", job, "--site", "test-cluster",
            "--set", f"run.name={name}", "--set", f"run.storage_path={storage}",
            "--set", "scheduler.directives.hold=true"]
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=os.path.dirname(job))
    job_id, lines = None, []
    assert p.stdout is not None
    for line in p.stdout:
        lines.append(line)
        m = _SUBMITTED.search(line)
        if m:
            job_id = m.group(1)
            ms = (time.perf_counter() - t) * 1000.0
            break
    rest, err = p.communicate(timeout=120)
    if job_id is None:
        raise RuntimeError(f"hpctrain submit printed no job id (exit {p.returncode}):\n"
                           + "".join(lines) + rest + err)
    return ms, job_id


def submit_sbatch(script: str, cwd: str) -> tuple:
    t = time.perf_counter()
    out = subprocess.run(["sbatch", "--parsable", script], capture_output=True, text=True,
                         cwd=cwd)
    ms = (time.perf_counter() - t) * 1000.0
    if out.returncode != 0:
        raise RuntimeError(f"sbatch refused {script}: {out.stderr.strip()}")
    return ms, out.stdout.strip().split(";")[0]


def bench_submit(work: str, repeats: int) -> tuple:
    notes: List[str] = []
    problem = cluster_problem()
    if problem:
        return [], [problem], []
    storage = os.path.join(work, "submit-runs")
    os.makedirs(storage, exist_ok=True)
    job = os.path.join(work, "submit-job.toml")
    with open(job, "w") as f:
        f.write(JOB_TOML.format(entry=ENTRY, scaling="num_workers = 2", name="unused",
                                storage=storage))
    # The anchor: the same #SBATCH lines as hpctrain's script, a trivial body.
    render = subprocess.run(
        [sys.executable, "-m", "hpctrain", "render", job, "--site", "test-cluster",
         "--set", "run.name=bench-anchor", "--set", f"run.storage_path={storage}",
         "--set", "scheduler.directives.hold=true"], capture_output=True, text=True, cwd=work)
    if render.returncode != 0:
        return [], [f"hpctrain render failed: {render.stderr.strip()}"], []
    sbatch_lines = [l for l in render.stdout.splitlines() if l.startswith("#SBATCH ")]
    trivial = os.path.join(work, "trivial.sh")
    with open(trivial, "w") as f:
        f.write("#!/bin/bash\n" + "\n".join(sbatch_lines).replace(
            os.path.join(storage, "bench-anchor"), work) + "\ntrue\n")
    jobs: List[str] = []
    hp_ms: List[float] = []
    sb_ms: List[float] = []
    tag = f"{os.getpid()}-{int(time.time())}"
    try:
        submit_sbatch(trivial, work)  # warm-up: slurmctld connection, page cache
        for i in range(repeats):      # alternate which goes first
            pair = [("sbatch", None), ("hpctrain", None)]
            for who, _ in (pair if i % 2 == 0 else pair[::-1]):
                if who == "sbatch":
                    ms, jid = submit_sbatch(trivial, work)
                    sb_ms.append(ms)
                else:
                    ms, jid = submit_hpctrain(job, f"bench-submit-{tag}-{i}", storage)
                    hp_ms.append(ms)
                jobs.append(jid)
    finally:
        if jobs:
            subprocess.run(["scancel", *jobs], capture_output=True, text=True)
        # and the warm-up job, found by its name
        subprocess.run(["scancel", "--name", "bench-anchor"], capture_output=True, text=True)
    startup = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "hpctrain", "--version"], capture_output=True)
        startup.append((time.perf_counter() - t) * 1000.0)
    rows = [
        row("submit: hpctrain submit (process) vs sbatch --parsable", "ms", median(hp_ms),
            median(sb_ms), key="submit", fmt="{:.0f}", baseline_label="sbatch --parsable"),
        row("  of which start-up: python -m hpctrain --version", "ms", median(startup),
            key="startup", fmt="{:.0f}"),
    ]
    notes.append(f"submission: {len(hp_ms)} + {len(sb_ms)} held jobs, cancelled: "
                 f"{' '.join(jobs)}")
    detail = {"hpctrain_ms": hp_ms, "sbatch_ms": sb_ms, "startup_ms": startup, "jobs": jobs,
              "sbatch_lines": sbatch_lines}
    return rows, notes, [detail]


# -- printing ---------------------------------------------------------------------------------
def fmt(v: Optional[float], f: str) -> str:
    return "—" if v is None else f.format(v)


def print_report(rows: List[Dict[str, Any]], notes: List[str], header: List[str]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200, highlight=False)
    for line in header:
        console.print(escape(line))
    table = Table(show_lines=False)
    for col, just in (("figure", "left"), ("unit", "left"), ("hpctrain", "right"),
                      ("anchor", "right"), ("ratio", "right"), ("target", "left"),
                      ("met?", "left")):
        table.add_column(col, justify=just)
    for r in rows:
        anchor = fmt(r["baseline"], r["fmt"])
        if r["baseline"] is not None and r["baseline_label"]:
            anchor += f" ({r['baseline_label']})"
        table.add_row(escape(r["figure"]), r["unit"], fmt(r["hpctrain"], r["fmt"]), anchor,
                      "—" if r["ratio"] is None else f"{r['ratio']:.2f}×", r["target"],
                      "" if r["met"] is None else ("[green]yes[/]" if r["met"]
                                                    else "[bold red]NO[/]"))
    console.print(table)
    for note in notes:
        console.print(escape(note))


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=None,
                   help="timed calls per in-process figure (default 50, --quick 10)")
    p.add_argument("--submits", type=int, default=None,
                   help="submissions of each kind (default 5, --quick 2)")
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--no-submit", action="store_true",
                   help="skip figure 3 (submissions to the test cluster)")
    p.add_argument("--dir", default=tempfile.gettempdir(),
                   help="where job files, run directories and the trivial script go "
                        "(default: %(default)s; must be visible to the cluster's nodes)")
    p.add_argument("--keep", action="store_true", help="keep that directory")
    p.add_argument("--json", metavar="FILE", help="write every number here as JSON")
    args = p.parse_args(argv)
    repeats = args.repeats or (10 if args.quick else 50)
    submits = args.submits or (2 if args.quick else 5)
    cmdline = shlex.join([os.path.basename(sys.executable)] + [
        os.path.relpath(sys.argv[0]) if sys.argv[0] else "bench/bench_slurm.py"] + sys.argv[1:])

    t0 = time.time()
    os.makedirs(args.dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="hpctrain-bench-slurm-", dir=args.dir)
    rows: List[Dict[str, Any]] = []
    notes: List[str] = []
    details: List[Any] = []
    try:
        rows += bench_render(work, repeats)
        host_rows, host_notes = bench_hosts(repeats, max(3, repeats // 5))
        rows += host_rows
        notes += host_notes
        if args.no_submit:
            notes.append("submission overhead: skipped (--no-submit)")
        else:
            sub_rows, sub_notes, details = bench_submit(work, submits)
            rows += sub_rows
            notes += sub_notes
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    from hpctrain import __version__

    sbatch_version = ""
    if shutil.which("sbatch"):
        sbatch_version = subprocess.run(["sbatch", "--version"], capture_output=True,
                                        text=True).stdout.strip()
    header = [
        f"command: {cmdline}",
        f"machine: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
        f"Linux {platform.release()}; python {platform.python_version()}, hpctrain "
        f"{__version__}{', ' + sbatch_version if sbatch_version else ''}",
        f"medians of {repeats} calls (in-process figures) and {submits} submissions of each "
        f"kind; bench took {time.time() - t0:.1f} s",
    ]
    print_report(rows, notes, header)
    if args.json:
        doc = {"command": cmdline, "header": header, "notes": notes,
               "figures": [{k: v for k, v in r.items() if k != "fmt"} for r in rows],
               "submissions": details}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
