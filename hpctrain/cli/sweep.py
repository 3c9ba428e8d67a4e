"""``hpctrain sweep job.toml`` and ``hpctrain results SWEEP_DIR`` (the parsers are in
:mod:`hpctrain.cli.main`)."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from typing import TYPE_CHECKING, Any, Optional

from hpctrain.errors import ConfigError
from hpctrain.common.metrics import flatten
from hpctrain.common.terminal import markup, plain
from hpctrain.driver.progress import user_metrics
from hpctrain.driver.submission import named_locations
from hpctrain.rundir.layout import RunDir
from hpctrain.backends import check_installed
from hpctrain.cli.main import EXIT_STOPPED
from hpctrain.cli.views import rank_log
from hpctrain.schedulers import get_scheduler
from hpctrain.spec import load_job_spec
from hpctrain.tune import search
from hpctrain.tune.jobfile import render_from_spec, run_spec, space_of, sweep_path_of
from hpctrain.tune.result_grid import ResultGrid
from hpctrain.tune.sweepdir import SweepDir, array_active, own_job, trial_id

if TYPE_CHECKING:  # (for the hints only)
    from hpctrain.spec import JobSpec


def sweep_dir_of(name_or_path: str) -> Optional[str]:
    """The sweep directory ``name_or_path`` names (a path, or a name under the default
    storage path), or None when it is not a sweep."""
    return next((os.path.abspath(c) for c in named_locations(name_or_path)
                 if SweepDir.is_sweep(c)), None)


def rerender_command(args: Any, name: str) -> str:
    """The ``hpctrain sweep ... --dry-run`` command that prints a sweep's scripts again."""
    words = ["hpctrain", "sweep", os.path.abspath(args.job)]
    if args.site:
        words += ["--site", args.site]
    words += [w for o in args.overrides if not o.startswith("run.name=") for w in ("--set", o)]
    return shlex.join(words + ["--set", f"run.name={name}", "--dry-run"])


def cmd_sweep(args: Any) -> int:
    spec = load_job_spec(args.job, args.overrides, site=args.site)
    if not spec.sweep:
        raise ConfigError("sweep: this job file has no [sweep] section", file=args.job,
                          hint='add e.g.  [sweep] metric = "loss"  mode = "min"  and  '
                               '[sweep.param_space] lr = {loguniform = [1e-4, 1e-1]}')
    spec.entrypoint.check()  # before anything is created
    name = os.path.basename(sweep_path_of(spec))
    local = spec.scheduler.kind == "local"
    if local and not args.dry_run:
        check_installed(spec.backend)  # here, every trial would fail without it
    if args.dry_run:
        if local:
            _print_plan(spec)
        else:
            scripts = render_from_spec(spec, rerender_command(args, name))
            sys.stdout.write("\n".join(scripts))

            cmd = get_scheduler(spec.scheduler.kind).submit_command
            print(f"# dry run: {len(scripts)} job array script(s); would prepare the trials "
                  f"under {sweep_path_of(spec)} and run `{cmd}` on each", file=sys.stderr)
        return 0
    sweep, stopped = run_spec(spec, rerender=rerender_command(args, name), local=local,
                              follow=local or args.follow, retry_failed=args.retry_failed)
    if local or args.follow:
        code = print_results(sweep.path, final=True)
        if stopped:  # like `hpctrain run`: stopped cleanly, continue it by running it again

            return EXIT_STOPPED
        return code
    return 0


def _print_plan(spec: JobSpec) -> None:
    """A local sweep's trials (``--dry-run``): index and config."""
    sweep = SweepDir(sweep_path_of(spec))
    if sweep.exists():
        trials = [(t["index"], t["config"]) for t in sweep.read()["trials"]]
    else:
        seed = spec.sweep.get("seed", 0)
        trials = list(enumerate(search.expand(space_of(spec), spec.sweep.get("num_samples", 1),
                                              seed)))

    for i, config in trials:
        print(f"{trial_id(i)}  {plain(config.get('train_loop_config', config))}")
    print(f"# dry run: {len(trials)} trials would run here under {sweep.path}"
          + ("" if sweep.exists() or "seed" in spec.sweep else
             " (random values shown with seed 0; a run records its own seed)"), file=sys.stderr)


def print_logs(path: str, args: Any) -> int:
    """``hpctrain logs SWEEP``: rank ``args.rank``'s output of every trial's latest job,
    each headed by its trial (as ``tail`` heads files); trials not started are left out."""
    name = os.path.basename(path)
    if args.follow or args.job:
        raise ConfigError(f"logs {'--follow' if args.follow else '--job'}: {name} is a sweep; "
                          "expected one of its trials",
                          hint=f"hpctrain logs {name}/trial_00000 {'--follow' if args.follow else '--job ID'}")
    shown = 0
    for trial in SweepDir(path).trial_paths():
        run = RunDir(trial)
        if not run.exists():
            continue
        try:
            log, job_id = rank_log(run, args.rank)
        except ConfigError:  # (no job yet)
            continue
        if not os.path.exists(log):
            continue
        print(plain(f"{chr(10) if shown else ''}==> {name}/{run.name}: rank {args.rank} of "
                    f"job {job_id} <=="))
        with open(log, errors="replace") as f:
            sys.stdout.write(plain(f.read()))
        shown += 1
    if not shown:
        raise ConfigError(f"{path}: no trial of the sweep has output of rank {args.rank} yet",
                          hint=f"hpctrain status {name} shows its trials")
    return 0


def cancel_sweep(path: str) -> int:
    """``hpctrain cancel SWEEP``: cancel the sweep's job arrays that are queued or running
    and the trials' own resubmitted jobs; committed checkpoints stay."""
    sweep = SweepDir(path)
    manifest = sweep.read()
    jobs = [(a["scheduler"], a["job_id"], "job array") for a in manifest.get("arrays", [])]
    for t in manifest.get("trials", []):
        own = own_job(sweep, t["index"]) if RunDir(sweep.trial_path(t["index"])).exists() else None
        if own:
            jobs.append((own["scheduler"], own["job_id"], f"{trial_id(t['index'])}'s job"))
    if not jobs:
        raise ConfigError(f"{path}: the sweep has no submitted job arrays to cancel",
                          hint="a local sweep's trials run inside `hpctrain sweep`: Ctrl-C "
                               "there stops them")
    cancelled = 0
    for kind, job_id, what in dict.fromkeys(jobs):
        if not array_active(kind, job_id):
            continue
        try:
            get_scheduler(kind).cancel(job_id)
        except subprocess.CalledProcessError as e:
            raise ConfigError(f"cancelling {kind} {what} {job_id} failed: "
                              f"{(e.stderr or '').strip() or e}") from None
        print(f"cancelled {kind} {what} {job_id}")
        cancelled += 1
    if not cancelled:
        print(f"no job of sweep {sweep.name} is queued or running; nothing to cancel")
    else:
        print(f"committed checkpoints under {path} stay; `hpctrain sweep` on the job file "
              "again runs the trials that did not finish")
    return 0


def sweep_data(path: str) -> dict:
    """``hpctrain results SWEEP --json`` (and ``status``): the trials ranked by the
    sweep's metric (best first; ``rank`` null for those without it), the best config."""
    grid = ResultGrid.from_path(path)
    metric, mode = grid._metric, grid._mode
    ranked = grid.ranked() if metric and mode else []
    rest = [r for r in grid if r not in ranked]
    trials = []
    for n, r in enumerate(ranked + rest, 1):
        error = os.path.join(r.path, "error.txt")
        trials.append({"trial_id": r.trial_id, "rank": n if r in ranked else None,
                       "status": r.status, "config": r.config,
                       "metrics": user_metrics(r.metrics or {}), "path": r.path,
                       "error_file": error if r.error is not None else None})
    return {"kind": "sweep", "name": os.path.basename(grid.experiment_path),
            "path": grid.experiment_path, "metric": metric, "mode": mode,
            "num_trials": len(grid), "finished": grid.num_terminated,
            "failed": grid.num_errors, "unfinished": len(grid.unfinished), "trials": trials,
            "best": ranked[0].trial_id if ranked else None,
            "best_config": ranked[0].config if ranked else None}


def print_results(path: str, final: bool = False) -> int:
    """``hpctrain results SWEEP_DIR``: every trial ranked by the sweep's metric (best
    first), then those without it; the best trial's config. Returns 0, or 1 when
    ``final`` and a trial did not finish."""
    from rich.console import Console
    from rich.table import Table

    grid = ResultGrid.from_path(path)
    metric, mode = grid._metric, grid._mode
    ranked = grid.ranked() if metric and mode else []
    rest = [r for r in grid if r not in ranked]
    console = Console()
    console.print(f"[bold]{markup(os.path.basename(grid.experiment_path))}[/bold]  "
                  f"{len(grid)} trials: "
                  f"{grid.num_terminated} finished, {grid.num_errors} failed, "
                  f"{len(grid.unfinished)} unfinished"
                  + (f"  ranked by {markup(metric)} ({markup(mode)})" if metric else ""))
    console.print(f"path: {markup(grid.experiment_path)}")
    keys: list = []
    for r in grid:
        for k in _config_of(r):
            if k not in keys:
                keys.append(k)
    others: list = []
    for r in grid:
        for k in user_metrics(r.metrics or {}):
            if k != metric and k not in others:
                others.append(k)
    t = Table(title_justify="left")
    t.add_column("rank", justify="right")
    t.add_column("trial")
    t.add_column("status")
    if metric:
        t.add_column(markup(metric), justify="right")
    for k in keys:
        t.add_column(markup(k), justify="right")
    for k in others[:4]:
        t.add_column(markup(k), justify="right")
    for n, r in enumerate(ranked + rest, 1):
        m = r.metrics or {}
        cfg = _config_of(r)
        row = [str(n) if r in ranked else "-", r.trial_id, r.status]
        if metric:
            row.append(_short(m.get(metric, "-")))
        row += [_short(cfg.get(k, "")) for k in keys]
        row += [_short(m.get(k, "-")) for k in others[:4]]
        t.add_row(*[markup(cell) for cell in row])
    console.print(t)
    if ranked:
        console.print(f"best: {markup(ranked[0].trial_id)}  config {markup(ranked[0].config)}")
    for r in grid:
        if r.error is not None:
            console.print(f"[red]{markup(r.trial_id)} failed[/red]: "
                          f"{markup(os.path.join(r.path, 'error.txt'))}")
    return 1 if final and (grid.num_errors or grid.unfinished) else 0


def _config_of(result: Any) -> dict:
    config = result.config or {}
    return flatten(config.get("train_loop_config", config) if isinstance(config, dict) else {})


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
