"""What ``hpctrain results``, ``hpctrain plot`` and ``hpctrain status`` show of a run,
read from its run directory only (so they work the same for local runs and batch jobs,
finished or running)."""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hpctrain.errors import ConfigError, HpctrainError
from hpctrain.common.install import pip_install
from hpctrain.rundir.layout import RunDir, read_results
from hpctrain.common.terminal import markup, plain
from hpctrain.cli.health import health_lines
from hpctrain.rundir.goodput import describe as describe_goodput, goodput
from hpctrain.common.metrics import flatten
from hpctrain.driver.progress import Progress, user_metrics
from hpctrain.driver import submission
from hpctrain.driver.submission import SUBMISSIONS, resolve_run
from hpctrain.schedulers import get_scheduler


def numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not (
        isinstance(v, float) and math.isnan(v))


def latest_rows(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per iteration (where its latest row is): after a restart from an earlier
    checkpoint ``result.json`` holds the replayed iterations twice, and the later row
    (the run that went on) wins.

    >>> [(r["_training_iteration"], r["loss"]) for r in latest_rows([
    ...     {"loss": 4, "_training_iteration": 1}, {"loss": 3, "_training_iteration": 2},
    ...     {"loss": 9, "_training_iteration": 3}, {"loss": 2.5, "_training_iteration": 2},
    ...     {"loss": 2, "_training_iteration": 3}])]
    [(1, 4), (2, 2.5), (3, 2)]
    """
    by_iteration: Dict[Any, Dict[str, Any]] = {}
    for i, row in enumerate(rows):
        it = row.get("_training_iteration", i + 1)
        by_iteration.pop(it, None)  # the later row, at its place in the sequence
        by_iteration[it] = row
    return list(by_iteration.values())


def metric_rows(rows: List[Dict[str, Any]]) -> Dict[str, List[Tuple[int, float, float]]]:
    """``{metric: [(iteration, timestamp, value), ...]}`` for every numeric user metric
    (nested dicts flattened with ``/``); an iteration reported twice (a restart from an
    earlier checkpoint) counts once, with its later row (:func:`latest_rows`).

    >>> metric_rows([{"loss": 2.0, "_training_iteration": 1, "_timestamp": 5},
    ...              {"loss": 1.0, "acc": {"top1": 0.5}, "_training_iteration": 2, "_timestamp": 6}])
    {'loss': [(1, 5, 2.0), (2, 6, 1.0)], 'acc/top1': [(2, 6, 0.5)]}
    """
    out: Dict[str, List[Tuple[int, float, float]]] = {}
    rows = [dict(row, _training_iteration=row.get("_training_iteration", i + 1))
            for i, row in enumerate(rows)]
    for row in latest_rows(rows):
        it = row["_training_iteration"]
        ts = row.get("_timestamp", 0)
        for k, v in flatten(row).items():
            if k.startswith("_") or k == "checkpoint_dir_name" or not numeric(v):
                continue
            out.setdefault(k, []).append((it, ts, v))
    return out


@dataclass
class MetricSummary:
    name: str
    last: float
    last_iter: int
    min: float
    min_iter: int
    max: float
    max_iter: int


def summarize(rows: List[Dict[str, Any]]) -> List[MetricSummary]:
    """Last, smallest and largest value of each metric (with the iteration).

    >>> s, = summarize([{"loss": 3, "_training_iteration": 1}, {"loss": 1, "_training_iteration": 2},
    ...                 {"loss": 2, "_training_iteration": 3}])
    >>> (s.last, s.min, s.min_iter, s.max, s.max_iter)
    (2, 1, 2, 3, 1)
    """
    out = []
    for name, points in metric_rows(rows).items():
        lo = min(points, key=lambda p: p[2])
        hi = max(points, key=lambda p: p[2])
        out.append(MetricSummary(name, points[-1][2], points[-1][0], lo[2], lo[0], hi[2], hi[0]))
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "-" if v is None else str(v)


def _duration(seconds: Optional[float]) -> str:
    """``3725`` → ``1h02m05s``.

    >>> _duration(3725), _duration(59.4), _duration(None)
    ('1h02m05s', '59s', '-')
    """
    if seconds is None:
        return "-"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def _score_settings(run: RunDir, console=None) -> Tuple[Optional[str], str]:
    """The run's checkpoint score attribute and order, from its spec.toml; a damaged
    spec.toml is shown (its error, naming the file, with the HINT) on ``console`` and
    the checkpoints are listed without scores."""
    try:
        ck = (run.read_spec(to_show=True) or {}).get("checkpoint") or {}
    except (ConfigError, OSError) as e:  # damaged; or not a regular file, too big
        if console is not None:
            console.print(f"[yellow]warning:[/yellow] {markup(str(e))}")
        ck = {}
    return ck.get("checkpoint_score_attribute"), ck.get("checkpoint_score_order", "max")


def _require_run(name_or_path: str) -> RunDir:
    run = resolve_run(name_or_path)
    if not run.exists():
        raise ConfigError(f"{name_or_path}: not a run directory (no state.json)",
                          hint="pass the directory <storage_path>/<name> of a run")
    return run


def _best_index(records: list, attr: Optional[str], order: str) -> Optional[int]:
    """The index of the checkpoint with the best ``attr`` (None without scores)."""
    scored = [r for r in records if attr and numeric(r.metrics.get(attr))]
    if not scored:
        return None
    pick = min if order == "min" else max
    return pick(scored, key=lambda r: r.metrics[attr]).index


# -- hpctrain results -----------------------------------------------------------------------
def results_data(name_or_path: str) -> Dict[str, Any]:
    """``hpctrain results RUN --json``: what :func:`print_results` shows, as a dict."""
    run = _require_run(name_or_path)
    state = run.read_state()
    rows = read_results(run.result_file)
    attr, order = _score_settings(run)
    records = run.list_checkpoints()
    best = _best_index(records, attr, order)
    return {
        "kind": "run", "name": run.name, "path": run.path,
        "status": state.get("status", "UNKNOWN"),
        "iterations": rows[-1].get("_training_iteration", len(rows)) if rows else 0,
        "failures": state.get("failures", 0), "requeues": state.get("requeues", 0),
        "stopped_because": state.get("stopped_because"),
        "metrics": {m.name: {"last": m.last, "last_iteration": m.last_iter,
                             "min": m.min, "min_iteration": m.min_iter,
                             "max": m.max, "max_iteration": m.max_iter}
                    for m in summarize(rows)},
        "score_attribute": attr, "score_order": order,
        "checkpoints": [{"name": os.path.basename(r.path), "path": r.path,
                         "iteration": r.iteration,
                         "metrics": {k: v for k, v in r.metrics.items() if not k.startswith("_")},
                         "best": r.index == best, "latest": r is records[-1]}
                        for r in records],
        "damaged_checkpoints": [{"path": p, "why": why} for p, why in run.damaged_checkpoints()],
        "attempts": state.get("attempts", []),
        "error_file": run.error_file if os.path.exists(run.error_file) else None,
    }


def print_results(name_or_path: str, console=None) -> None:
    """The run's status, attempts, last/min/max of each metric and its checkpoints with
    their scores, as rich tables."""
    from rich.console import Console
    from rich.table import Table

    run = _require_run(name_or_path)
    console = console or Console()
    state = run.read_state()
    rows = read_results(run.result_file)
    attempts = state.get("attempts", [])
    _print_run_header(console, run, state, rows, attempts)

    summary = summarize(rows)
    attr, order = _score_settings(run, console)
    if summary:
        t = Table(title="metrics", title_justify="left")
        _fill_metrics_table(t, summary, attr, order)
        console.print(t)

    records = run.list_checkpoints()
    if records:
        t = Table(title="checkpoints" + (f" (score: {markup(attr)}, {markup(order)})"
                                         if attr else ""), title_justify="left")
        _fill_checkpoints_table(t, records, attr, order)
        console.print(t)
    for path, why in run.damaged_checkpoints():
        console.print(f"[yellow]not committed:[/yellow] {markup(path)}: {markup(why)} (the "
                      "run's next start moves it aside and resumes from the last good one)")

    if attempts:
        t = Table(title="attempts", title_justify="left")
        _fill_attempts_table(t, attempts)
        console.print(t)
    kept = {os.path.basename(r.path): r.metadata for r in records}
    for line in health_lines(state) + describe_goodput(goodput(state, rows, kept)):
        console.print(markup(line), soft_wrap=True)
    if os.path.exists(run.error_file):
        console.print(f"[red]error[/red]: {markup(run.error_file)}")


def _print_run_header(console, run: RunDir, state: Dict[str, Any],
                      rows: List[Dict[str, Any]], attempts: List[Dict[str, Any]]) -> None:
    """Print the run's name, status, counts and wall time, its path and why it stopped."""
    started = state.get("created") or (attempts[0].get("started") if attempts else None)
    ended = max([a.get("ended") or 0 for a in attempts] + [0]) or None
    status = state.get("status", "UNKNOWN")
    colour = {"FINISHED": "green", "FAILED": "red", "RUNNING": "cyan"}.get(status, "yellow")
    iterations = rows[-1].get('_training_iteration', len(rows)) if rows else 0
    console.print(f"[bold]{markup(run.name)}[/bold]  [{colour}]{markup(status)}[/{colour}]  "
                  f"iterations {markup(iterations)}  "
                  f"attempts {len(attempts)}  failures {markup(state.get('failures', 0))}"
                  + (f"  requeues {markup(state['requeues'])}" if state.get("requeues") else "")
                  + (f"  wall time {_duration((ended if status != 'RUNNING' else time.time()) - started)}"
                     if started and (ended or status == "RUNNING") else ""))
    console.print(f"path: {markup(run.path)}")
    if state.get("stopped_because"):
        console.print(f"stopped because {markup(state['stopped_because'])}")


def _fill_metrics_table(t, summary: List[MetricSummary], attr: Optional[str],
                        order: str) -> None:
    """Add the metrics table's columns and one row per metric (the score one marked)."""
    for col, justify in (("metric", "left"), ("last", "right"), ("min", "right"),
                         ("at iter", "right"), ("max", "right"), ("at iter", "right")):
        t.add_column(col, justify=justify)
    for m in summary:
        name = markup(m.name) + (f" [dim](score, {markup(order)})[/dim]"
                                 if m.name == attr else "")
        t.add_row(name, _fmt(m.last), _fmt(m.min), str(m.min_iter), _fmt(m.max),
                  str(m.max_iter))


def _fill_checkpoints_table(t, records: list, attr: Optional[str], order: str) -> None:
    """Add the checkpoints table's columns and one row per checkpoint (best, latest marked)."""
    t.add_column("checkpoint")
    t.add_column("iteration", justify="right")
    if attr:
        t.add_column(markup(attr), justify="right")
    t.add_column("metrics")
    best = _best_index(records, attr, order)
    for r in records:
        others = markup(", ".join(f"{k}={_fmt(v)}" for k, v in r.metrics.items()
                                  if not k.startswith("_") and k != attr and numeric(v)))
        name = markup(os.path.basename(r.path)) + (" [bold green]★ best[/bold green]"
                                                   if r.index == best else "")
        if r.index == records[-1].index:
            name += " [dim](latest)[/dim]"
        cells = [name, markup(r.iteration)]
        if attr:
            cells.append(markup(_fmt(r.metrics.get(attr))))
        t.add_row(*cells, others)


def _fill_attempts_table(t, attempts: List[Dict[str, Any]]) -> None:
    """Add the attempts table's columns and one row per attempt."""
    for col in ("#", "job", "outcome", "started", "duration", "resumed from", "note"):
        t.add_column(col, justify="right" if col in ("#", "duration") else "left")
    for a in attempts:
        t.add_row(*_attempt_cells(a))


def _attempt_cells(a: Dict[str, Any]) -> List[str]:
    """The attempts table's cells of one attempt: who failed, warnings, skipped checkpoints."""
    note = []
    if a.get("failed_rank") is not None:
        who = "the launcher" if a["failed_rank"] < 0 else f"rank {a['failed_rank']}"
        note.append(f"{who}: {a.get('error', '')}")
    if a.get("warning"):
        note.append(f"warned: {a['warning']}")
    if a.get("skipped_checkpoints"):
        note.append("skipped " + ", ".join(s["checkpoint"] for s in a["skipped_checkpoints"]))
    end = a.get("ended") or (time.time() if a.get("outcome") == "RUNNING" else None)
    return [markup(a.get("attempt")), markup(a.get("job_id", "-")),
            markup(a.get("outcome", "-")),
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a["started"]))
            if a.get("started") else "-",
            _duration(end - a["started"] if end and a.get("started") else None),
            markup(os.path.basename(a["resumed_from"])) if a.get("resumed_from")
            else "-", markup("; ".join(note))]


# -- hpctrain plot --------------------------------------------------------------------------
def plot_runs(names: Sequence[str], metrics: Sequence[str], output: str,
              x: str = "iteration") -> Dict[str, Any]:
    """One figure, one panel per metric, one line per run; written to ``output`` (PNG,
    SVG or PDF by its extension). Returns what was drawn ``{metric: [run names]}``.
    Nothing is written when no run has any of the metrics."""
    runs = [_require_run(n) for n in names]
    data = {run.path: metric_rows(read_results(run.result_file)) for run in runs}
    missing = [m for m in metrics if not any(m in d for d in data.values())]
    if missing:
        have = sorted({k for d in data.values() for k in d})
        raise ConfigError(f"--metric {missing[0]}: no run reported it",
                          hint="metrics these runs reported: " + (", ".join(have) or "none"))
    plt = _pyplot(output)
    names_short = _labels([r.path for r in runs])
    fig, axes = plt.subplots(len(metrics), 1, figsize=(8, 3.2 * len(metrics) + 0.8),
                             squeeze=False)
    drawn: Dict[str, List[str]] = {}
    for ax, metric in zip(axes[:, 0], metrics):
        for run in runs:
            points = data[run.path].get(metric)
            if not points:
                continue
            if x == "time":
                t0 = points[0][1]
                xs = [(p[1] - t0) / 60.0 for p in points]
            else:
                xs = [p[0] for p in points]
            ax.plot(xs, [p[2] for p in points], marker="o" if len(points) < 30 else None,
                    markersize=3, label=names_short[run.path])
            drawn.setdefault(metric, []).append(run.name)
        ax.set_ylabel(metric)
        ax.set_xlabel("minutes" if x == "time" else "iteration")
        if x != "time":
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(", ".join(metrics) + (" — " + ", ".join(r.name for r in runs)
                                       if len(runs) <= 3 else f" — {len(runs)} runs"))
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output, dpi=100)
    plt.close(fig)
    return drawn


#: The goodput breakdown's parts as plotted (goodput.PARTS), bottom to top.
GOODPUT_LABELS = {"queue": "queue", "startup": "start-up (incl. restore)",
                  "checkpoint": "checkpoint stall", "hang": "hangs", "lost": "lost work",
                  "straggler": "stragglers", "productive": "productive"}


def run_goodput(run: RunDir) -> Optional[Dict[str, Any]]:
    """A run's measured goodput breakdown (goodput.py), from its own records."""
    kept = {os.path.basename(r.path): r.metadata for r in run.list_checkpoints()}
    return goodput(run.read_state(), read_results(run.result_file), kept)


def plot_goodput(names: Sequence[str], output: str) -> Dict[str, Dict[str, Dict[str, float]]]:
    """One panel per run: a stacked bar per attempt (its parts in seconds, bottom to top
    in the order of ``GOODPUT_LABELS``), its wall time written above it; written to
    ``output`` (PNG, SVG or PDF). Returns the numbers the bars were drawn with, read back
    from the figure: ``{run name: {"attempt N": {part: seconds}}}``."""
    runs = [_require_run(n) for n in names]
    reports = {run.path: run_goodput(run) for run in runs}
    empty = [run.path for run in runs if not reports[run.path]]
    if empty:
        raise ConfigError(f"{empty[0]}: no attempt of this run has ended yet: no goodput "
                          "to plot", hint="plot it once an attempt ended (hpctrain status)")
    plt = _pyplot(output)
    names_short = _labels([r.path for r in runs])
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 3.6 * len(runs) + 0.6),
                             squeeze=False)
    drawn: Dict[str, Dict[str, Dict[str, float]]] = {}
    colours = plt.get_cmap("tab10").colors
    for ax, run in zip(axes[:, 0], runs):
        attempts = reports[run.path]["attempts"]
        xs = [f"attempt {a['attempt']}" for a in attempts]
        bottom = [0.0] * len(attempts)
        for i, (part, label) in enumerate(GOODPUT_LABELS.items()):
            heights = [float(a[part]) for a in attempts]
            ax.bar(xs, heights, bottom=bottom, label=label, color=colours[i % len(colours)])
            bottom = [b + h for b, h in zip(bottom, heights)]
        for x, a, top in zip(xs, attempts, bottom):
            ax.annotate(f"{a['wall']:.1f} s", (x, top), ha="center", va="bottom",
                        fontsize="small")
        ax.set_ylabel("seconds")
        g = reports[run.path]["goodput"]
        ax.set_title(f"{names_short[run.path]}: goodput {g:.1%} of "
                     f"{reports[run.path]['total']['wall']:.1f} s" if g is not None
                     else names_short[run.path])
        ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5))
        drawn[run.name] = _bars_drawn(ax)
    fig.tight_layout()
    _save(plt, fig, output)
    return drawn


def _bars_drawn(ax: Any) -> Dict[str, Dict[str, float]]:
    """The heights of an axes' stacked bars, by x tick label and the bar set's label."""
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    parts = {v: k for k, v in GOODPUT_LABELS.items()}
    out: Dict[str, Dict[str, float]] = {t: {} for t in ticks}
    for container in ax.containers:
        for tick, patch in zip(ticks, container.patches):
            out[tick][parts[container.get_label()]] = float(patch.get_height())
    return out


def _pyplot(output: str) -> Any:
    """matplotlib's pyplot without a display, once ``output``'s kind is checked."""
    ext = os.path.splitext(output)[1].lower()
    if ext not in (".png", ".svg", ".pdf"):
        raise ConfigError(f"-o {output}: expected a .png, .svg or .pdf file name")
    try:
        import matplotlib
    except ImportError:
        raise HpctrainError("hpctrain plot needs matplotlib.\nHINT: "
                            + pip_install("matplotlib")) from None
    matplotlib.use("Agg")  # no display on a login node
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, output: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output, dpi=100, bbox_inches="tight")
    plt.close(fig)


def _labels(paths: List[str]) -> Dict[str, str]:
    """Run names, with the parent directory where two runs share a name."""
    names = [os.path.basename(p) for p in paths]
    return {p: (n if names.count(n) == 1 else os.path.join(os.path.basename(os.path.dirname(p)), n))
            for p, n in zip(paths, names)}


# -- hpctrain status --------------------------------------------------------------------------
@dataclass
class LiveStatus:
    iteration: Optional[int] = None
    metrics: Dict[str, Any] = field(default_factory=dict)
    elapsed_s: Optional[float] = None      # since the current (or last) attempt started
    rate: Optional[float] = None           # reports per second, recent
    last_report_s: Optional[float] = None  # seconds since the last report
    checkpoint: Optional[str] = None


def live_status(run: RunDir, now: Optional[float] = None) -> LiveStatus:
    """Where a (running) run is: iteration, latest metrics, elapsed time, pace."""
    now = now or time.time()
    state = run.read_state()
    rows = read_results(run.result_file)
    out = LiveStatus()
    attempts = state.get("attempts") or []
    if attempts and attempts[-1].get("started"):
        end = attempts[-1].get("ended") if attempts[-1].get("outcome") != "RUNNING" else None
        out.elapsed_s = (end or now) - attempts[-1]["started"]
    if rows:
        last = rows[-1]
        out.iteration = last.get("_training_iteration")
        out.metrics = user_metrics(last)
        out.last_report_s = now - last.get("_timestamp", now)
        recent = rows[-20:]
        span = recent[-1].get("_timestamp", 0) - recent[0].get("_timestamp", 0)
        if len(recent) > 1 and span > 0:
            out.rate = (len(recent) - 1) / span
        out.checkpoint = next((r["checkpoint_dir_name"] for r in reversed(rows)
                               if r.get("checkpoint_dir_name")), None)
    return out


def status_data(run: RunDir) -> Dict[str, Any]:
    """``hpctrain status RUN`` (``--json``: as it is): the run's state, its jobs as the
    scheduler sees them, its latest iteration and metrics, pace while it runs."""
    state = run.read_state()
    jobs = []
    for sub in state.get(SUBMISSIONS) or []:
        job: Dict[str, Any] = {"scheduler": sub["scheduler"], "job_id": sub["job_id"],
                               "state": None, "reason": None, "nodes": None, "error": None}
        try:
            js = get_scheduler(sub["scheduler"]).state(sub["job_id"])
            job.update(state=js.state, nodes=js.nodes or None,
                       reason=js.reason if js.reason and js.reason != "None" else None)
        except Exception as e:  # noqa: BLE001 - show what is known
            job["error"] = str(e)
        jobs.append(job)
    live = live_status(run)
    latest = run.latest_checkpoint()
    return {"kind": "run", "name": run.name, "path": run.path,
            "status": state.get("status", "UNKNOWN"),
            "attempts": len(state.get("attempts", [])), "failures": state.get("failures", 0),
            "restart_count": state.get("restart_count"), "requeues": state.get("requeues", 0),
            "stopped_because": state.get("stopped_because"), "jobs": jobs,
            "health": health_lines(state), "gave_up": state.get("gave_up"),
            "failures_by_cause": state.get("failures_by_cause") or {},
            "bad_nodes": state.get("bad_nodes") or [],
            "iteration": live.iteration, "metrics": live.metrics,
            "elapsed_s": live.elapsed_s, "reports_per_s": live.rate,
            "last_report_s": live.last_report_s,
            "latest_checkpoint": latest.path if latest else None,
            "error_file": run.error_file if os.path.exists(run.error_file) else None}


def status_lines(run: RunDir) -> List[str]:
    s = live_status(run)
    lines = []
    if s.iteration is not None:
        pace = f", {s.rate:.3g} reports/s" if s.rate else ""
        ago = f", last report {_duration(s.last_report_s)} ago" if s.last_report_s is not None else ""
        lines.append(f"  iteration {plain(s.iteration)} after {_duration(s.elapsed_s)}{pace}"
                     f"{ago}")
        if s.metrics:
            lines.append("  latest: " + plain(", ".join(f"{k}={_fmt(v)}"
                                                        for k, v in s.metrics.items())))
    elif s.elapsed_s is not None:
        lines.append(f"  no report yet, {_duration(s.elapsed_s)} after the attempt started")
    return lines


def follow_local(run: RunDir, poll_s: float = 0.5) -> str:
    """Follow a run started here (``hpctrain run``, ``fit()``) from another terminal:
    progress until its status is no longer RUNNING; returns that status."""
    state = run.read_state()
    attempts = state.get("attempts") or []
    progress = Progress(run, started=attempts[-1].get("started") if attempts else None)
    try:
        while run.read_state().get("status") == "RUNNING":
            progress.tick()
            time.sleep(poll_s)
    finally:
        progress.close()
    return run.read_state().get("status", "UNKNOWN")


def rank_log(run, rank: int, job: Optional[str] = None):
    """``(path of the rank's output, job id)`` in the run's job ``job`` (default: its
    latest); ConfigError when the run has no job yet."""
    ids = submission.job_ids(run)
    state = run.read_state() if run.exists() else {}
    job_id = job or (ids[-1] if ids else (state.get("job_ids") or [None])[-1])
    if job_id is None:
        raise ConfigError(f"{run.path} has no job yet", hint="hpctrain submit job.toml")
    return os.path.join(run.logs_dir(job_id), f"rank-{rank}.out"), job_id
