"""The subcommands of ``hpctrain`` (``cmd_<name>``, one per subcommand of
:func:`hpctrain.cli.main.build_parser`) and their helpers. :func:`hpctrain.cli.main.main`
imports this module once it knows the command: ``hpctrain --help`` loads none of it."""
from __future__ import annotations

import copy
import os
import shlex
import subprocess
import sys
import time
from typing import List

from hpctrain.cli.completion import print_script
from hpctrain.cli.main import EXIT_STOPPED, build_parser
from hpctrain.cli.views import plot_goodput, plot_runs, print_results, rank_log, results_data
from hpctrain.errors import ConfigError, TrainingFailedError, TrainingStoppedError
from hpctrain.common.terminal import plain
from hpctrain.allocation.budgets import exit_code
from hpctrain.common.fsutil import atomic_write_bytes
from hpctrain.common.registry import describe, scheduler_class, scheduler_names, uri_scheme
from hpctrain.driver import submission
from hpctrain.driver.login import warn_if_login_node
from hpctrain.driver.progress import user_metrics
from hpctrain.rundir.checks import check_shared_storage
from hpctrain.rundir.layout import LineTail, RunDir
from hpctrain.cli import views as report
from hpctrain.cli.jsonout import print_json
from hpctrain.cli.listing import listing_data, print_listing
from hpctrain.cli.sweep import (cancel_sweep, cmd_sweep as sweep, print_logs,
                                print_results as print_sweep, rerender_command, sweep_data,
                                sweep_dir_of)
from hpctrain.config import default_storage_path
from hpctrain.job import Job
from hpctrain.run import Run, RunOptions
from hpctrain.schedulers import get_scheduler
from hpctrain.schema import schema_text
from hpctrain.sites import available_sites, search_path
from hpctrain.spec import load_job_spec, load_site
from hpctrain.tune.jobfile import control_from_spec, render_from_spec, space_of, sweep_path_of
from hpctrain.tune.sweepdir import SweepDir, follow as follow_sweep
from hpctrain.userconfig import (center_config_path, config_path, default_site,
                                 load_center_defaults, load_user_defaults, storage_default)


def _load(args, check_limits: bool = True):
    return load_job_spec(args.job, args.overrides, site=getattr(args, "site", None),
                         check_limits=check_limits)


def _rerender_command(args, run_name: str) -> str:
    words = ["hpctrain", "render", os.path.abspath(args.job)]
    if args.site:
        words += ["--site", args.site]
    for o in args.overrides:
        if not o.startswith("run.name="):
            words += ["--set", o]
    words += ["--set", f"run.name={run_name}"]
    return shlex.join(words)


def _batch_run(args):
    spec = _load(args)
    _refuse_sweep(spec)
    batch = scheduler_names(batch_only=True)
    if spec.scheduler.kind not in batch:
        raise ConfigError(f"scheduler.kind: expected {describe(batch)} to "
                          f"render or submit a batch job, got \"{spec.scheduler.kind}\"",
                          file=spec.where("scheduler.kind"),
                          hint="give a site (--site NAME, `hpctrain sites` lists them) or "
                               f"--set scheduler.kind={batch[0]}; `hpctrain run` runs here")
    run = Run.from_spec(spec, RunOptions(force_resume=getattr(args, "force", False)))
    return spec, run


def _batch_script(args, spec, run):
    """The batch request and the exact script `render` prints and `submit` submits, with
    every check on the way (the site's limits, the scheduler's refusals, directives,
    warning time, launcher); `validate` makes it too, and discards it."""
    return run.render(_rerender_command(args, run.name))


def _sweep_scripts(args, spec):
    """The job array scripts `hpctrain sweep --dry-run` prints (writes nothing)."""
    spec = copy.copy(spec)
    spec.sweep = copy.deepcopy(spec.sweep)  # rendering picks a seed; the spec keeps none
    name = os.path.basename(sweep_path_of(spec))
    return render_from_spec(spec, rerender_command(args, name))


def cmd_render(args) -> int:
    spec, run = _batch_run(args)
    _, script = _batch_script(args, spec, run)
    sys.stdout.write(script)
    return 0


def cmd_completion(args) -> int:
    return print_script(build_parser(), args.shell)


def cmd_schema(args) -> int:
    text = schema_text()
    if args.output is None:
        sys.stdout.write(text)
        return 0

    atomic_write_bytes(args.output, text.encode(), sync=False)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def cmd_submit(args) -> int:
    spec, run = _batch_run(args)
    rerender = _rerender_command(args, run.name)
    if args.dry_run:
        run.check_datasets()
        check_shared_storage(spec, run.path)
        request, script = _batch_script(args, spec, run)
        sys.stdout.write(script)
        cmd = request.scheduler.submit_command
        print(f"# dry run: would write {run.path}/job.sh and run `{cmd}` on it",
              file=sys.stderr)
        return 0
    sub = run.submit(rerender)  # (checks the datasets first)
    print(f"submitted {sub.scheduler} job {sub.job_id}")
    print(f"run directory: {sub.path}")
    print(f"  hpctrain status {sub.path} --follow")
    if args.follow:
        return _follow(sub.path, _verbosity(args))
    return 0


def _follow(run_path: str, verbose: int = 1) -> int:
    status = submission.follow(run_path, verbose=verbose)
    return _outcome(lambda: submission.result_of(run_path, status), run_path)


def _verbosity(args) -> int:
    """RunConfig.verbose for what a command follows: 0 with --quiet, 2 with -v, else 1."""
    return 0 if getattr(args, "quiet", False) else 2 if getattr(args, "verbose", 0) else 1


def _outcome(get_result, run_path: str, lead: str = "") -> int:
    """Print how the run ended (its summary, the failed rank's traceback, or why it
    stopped) and return the exit code: 0, 1, EXIT_STOPPED, or the code of the budget
    that was spent (docs/guide/fault-tolerance.md#exit-codes)."""
    try:
        result = get_result()
    except TrainingFailedError as e:
        if e.worker_traceback:
            print(f"{lead}[hpctrain] training FAILED (rank {plain(e.rank)}); run directory: "
                  f"{plain(e.result.path if e.result else run_path)}", file=sys.stderr)
            print(plain(e.worker_traceback.rstrip()), file=sys.stderr)
        else:
            print(f"{lead}[hpctrain] training FAILED: {plain(e)}", file=sys.stderr)
        return _gave_up(e.result.path if e.result else run_path, lead, 1)
    except TrainingStoppedError as e:
        print(f"{lead}[hpctrain] {plain(e)}", file=sys.stderr)
        return _gave_up(e.result.path if e.result else run_path, lead, EXIT_STOPPED)
    _print_summary(result)
    return 0


def _gave_up(run_path: str, lead: str, default: int) -> int:
    """Say why the run stopped retrying, if a budget did it; its exit code."""
    try:
        state = RunDir(run_path).read_state()
    except (OSError, ValueError):
        return default
    gave_up = state.get("gave_up") or {}
    if gave_up.get("message"):
        print(f"{lead}[hpctrain] not retried: {plain(gave_up['message'])}", file=sys.stderr)
    return exit_code(state, default)


def cmd_list(args) -> int:
    storage = os.path.expanduser(args.storage or default_storage_path())
    if uri_scheme(storage) is None:  # (a storage URI, s3://…, as it is)
        storage = os.path.abspath(storage)
    if args.json:
        return print_json(listing_data(storage, trials=args.trials))
    return print_listing(storage, trials=args.trials)


def _sweep_status(path: str, follow: bool, as_json: bool = False) -> int:
    """``hpctrain status SWEEP_DIR``: every trial's status (``--follow``: until the
    sweep's trials ended)."""
    if as_json:
        return print_json(sweep_data(path))

    if follow:
        follow_sweep(SweepDir(path))
        return print_sweep(path, final=True)
    return print_sweep(path)


def cmd_status(args) -> int:
    if args.json and args.follow:
        raise ConfigError("--json and --follow: expected one of them",
                          hint="--json prints the state once; call it again to poll")
    sweep = sweep_dir_of(args.run)
    if sweep is not None:
        return _sweep_status(sweep, args.follow, args.json)
    run = submission.resolve_run(args.run)
    if args.follow:
        if submission.last_job(run) is None and run.exists():  # a run started here
            status = report.follow_local(run)
            return 0 if status in ("FINISHED", "STOPPED") else 1
        return _follow(run.path, _verbosity(args))
    data = report.status_data(run)
    if args.json:
        return print_json(data)
    print(plain(f"run {run.name}: {data['status']}  ({run.path})"))
    print(plain(f"  attempts {data['attempts']}, failures {data['failures']}"
                + (f", restart count {data['restart_count']}"
                   if data["restart_count"] is not None else "")
                + (f", requeues {data['requeues']}" if data["requeues"] else "")))
    if data["stopped_because"]:
        print(plain(f"  stopped because {data['stopped_because']}"))
    for line in data["health"]:
        print(plain(f"  {line}"))
    for job in data["jobs"]:
        if job["error"] is not None:
            print(plain(f"  {job['scheduler']} job {job['job_id']}: state unknown "
                        f"({job['error']})"))
            continue
        where = f" on {job['nodes']}" if job["nodes"] else ""
        reason = f" ({job['reason']})" if job["reason"] else ""
        print(plain(f"  {job['scheduler']} job {job['job_id']}: {job['state']}{reason}{where}"))
    if data["status"] == "RUNNING":
        for line in report.status_lines(run):
            print(line)
    elif data["iteration"] is not None:
        print(plain(f"  iteration {data['iteration']}: " + ", ".join(
            f"{k}={v}" for k, v in data["metrics"].items())))
    if data["latest_checkpoint"]:
        print(plain(f"  latest checkpoint: {data['latest_checkpoint']}"))
    if data["error_file"]:
        print(plain(f"  error: {data['error_file']}"))
    return 0


def cmd_logs(args) -> int:
    sweep = sweep_dir_of(args.run)
    if sweep is not None:
        return print_logs(sweep, args)
    run = submission.resolve_run(args.run)
    path, job_id = rank_log(run, args.rank, args.job)
    state = run.read_state() if run.exists() else {}
    sched = next((s["scheduler"] for s in state.get(submission.SUBMISSIONS) or []
                  if s["job_id"] == job_id), None)
    if not os.path.exists(path) and not args.follow:
        raise ConfigError(f"no output of rank {args.rank} in job {job_id} yet: {path}",
                          hint="ranks write it once they start; use --follow to wait")

    tail = LineTail(path)
    while True:
        done = not args.follow or sched is None or get_scheduler(sched).state(job_id).done
        for line in tail.lines(final=done):  # after the job ended: the unfinished line too
            print(line, flush=True)
        if done:
            return 0
        time.sleep(1.0)


def cmd_cancel(args) -> int:
    sweep = sweep_dir_of(args.run)
    if sweep is not None:
        return cancel_sweep(sweep)
    run = submission.resolve_run(args.run)
    job = submission.last_job(run)
    if job is None:
        raise ConfigError(f"{run.path} has no submitted job to cancel")
    try:
        cancelled = Job(run.path).cancel()
    except subprocess.CalledProcessError as e:
        raise ConfigError(f"cancelling {job['scheduler']} job {job['job_id']} failed: "
                          f"{(e.stderr or '').strip() or e}") from None
    if not cancelled:
        js = get_scheduler(job["scheduler"]).state(job["job_id"])
        print(f"{job['scheduler']} job {job['job_id']} already ended ({js.state}); "
              "nothing to cancel")
        return 0
    print(f"cancelled {job['scheduler']} job {job['job_id']}; committed checkpoints in "
          f"{run.checkpoints_dir} stay, and submitting the run again resumes it")
    return 0


def cmd_sweep(args) -> int:
    return sweep(args)


def _refuse_sweep(spec) -> None:
    if spec.sweep:
        raise ConfigError("sweep: this job file has a [sweep] section", file=spec.source,
                          hint="run its trials with `hpctrain sweep` (same arguments), or "
                               "remove [sweep] for a single run")


def cmd_sites(args) -> int:
    if args.name:
        site = load_site(args.name)
        user = load_user_defaults()
        over = [{"key": key, "value": user.values[key], "from": user.sources[key]}
                for key in ("account", "storage_path") if key in user.values]
        with open(site.path) as f:
            text = f.read()
        if args.json:
            return print_json({"name": site.name, "file": site.path,
                               "scheduler": site.scheduler, "description": site.description,
                               "text": text, "your_values": over})
        sys.stdout.write(text)
        print(f"# {site.path}", file=sys.stderr)
        for o in over:
            print(f"# {o['key']} = {o['value']!r} from {o['from']} (over this "
                  "site's value)", file=sys.stderr)
        return 0
    sites = _site_rows()
    configs = [(what, path, os.path.exists(path)) for what, path in
               (("user config", config_path()), ("center config", center_config_path()))]
    if args.json:
        return print_json({
            "sites": sites, "search_path": search_path(),
            "defaults": [{"key": k, "value": v, "from": w} for k, v, w in _default_rows()],
            **{what.replace(" ", "_"): {"path": path, "exists": exists}
               for what, path, exists in configs}})
    from rich.table import Table

    t = Table(title="hpctrain sites", title_justify="left")
    for col in ("name", "scheduler", "description", "file"):
        t.add_column(col)
    for site in sites:
        if site["error"] is None:
            t.add_row(site["name"], site["scheduler"], site["description"], site["file"])
        else:
            t.add_row(site["name"], "?", f"[red]invalid[/red]: {site['error']}", site["file"])
    console = _console()
    console.print(t)
    print("search path: " + os.pathsep.join(search_path()))
    d = Table(title="your defaults (a job file's own values and --site/--set win over them)",
              title_justify="left")
    for col in ("key", "value", "from"):
        d.add_column(col)
    for row in _default_rows():
        d.add_row(*row)
    console.print(d)
    for what, path, exists in configs:
        print(f"{what}: {path}" + ("" if exists else " (none)"))
    return 0


def _site_rows() -> List[dict]:
    """Every known site: name, scheduler, description, file and (an invalid one) the
    error, by name."""
    out = []
    for name, path in sorted(available_sites().items()):
        try:
            site = load_site(name)
            out.append({"name": name, "scheduler": site.scheduler,
                        "description": site.description, "file": path, "error": None})
        except ConfigError as e:
            out.append({"name": name, "scheduler": None, "description": None, "file": path,
                        "error": str(e)})
    return out


def _console():
    """A rich console; when piped, wide enough that no path is wrapped."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=500)


def _default_rows() -> List[tuple]:
    """``(key, value, where it came from)`` of each default outside a job file: the
    variables, the user config, the default site (its storage path), the center config."""
    user, center = load_user_defaults(), load_center_defaults()
    site, site_from = default_site(user, center)
    rows = [("site", site, site_from) if site else ("site", "(none)", "not set")]
    if "account" in user.values or "account" in center.values:
        where = user if "account" in user.values else center
        rows.append(("account", where.values["account"], where.sources["account"]))
    else:
        rows.append(("account", "(none)", "not set"))
    value, where = storage_default()
    rows.append(("storage_path", default_storage_path(), where) if value
                else ("storage_path", default_storage_path(), "hpctrain's default"))
    return rows


def cmd_validate(args) -> int:
    spec = _load(args)
    # (a copy: a Run names an unnamed spec, and validate prints the spec as it resolves)
    run = Run.from_spec(copy.deepcopy(spec))
    run.check_datasets()  # the entry point, every config, data files
    if spec.sweep and (spec.sweep.get("scheduler") or spec.sweep.get("search_alg")):
        control_from_spec(spec, space_of(spec))  # the scheduler's and searcher's options

    if scheduler_class(spec.scheduler.kind).template:  # a batch job: what `render` (a
        if spec.sweep:                                 # sweep: `sweep --dry-run`) refuses

            check_shared_storage(spec, sweep_path_of(spec))  # as `hpctrain sweep` does
            _sweep_scripts(args, spec)
        else:
            check_shared_storage(spec, run.path)  # as `hpctrain submit` does
            _batch_script(args, spec, run)
    sys.stdout.write(spec.to_toml())
    print(f"# OK: {args.job} is valid", file=sys.stderr)
    return 0


def cmd_run(args) -> int:
    spec = _load(args, check_limits=False)
    if spec.site is None and spec.scheduler.kind == "local":  # (site = "local": on purpose)
        warn_if_login_node(cli=True)
    _refuse_sweep(spec)
    if args.quiet or args.verbose:  # what this command prints (RunConfig.verbose)
        spec.run.verbose = 0 if args.quiet else 2
    # `run` runs here, whatever scheduler the spec names
    run = Run.from_spec(spec, RunOptions(local_only=True, force_resume=args.force))
    return _outcome(run.fit, run.path, lead="\n")


def _print_summary(result) -> None:
    metrics = user_metrics(result.metrics or {})
    print(plain(f"[hpctrain] run {result.status}: {result.path}"))
    if metrics:
        print("[hpctrain] final metrics: " + plain(", ".join(f"{k}={v}"
                                                             for k, v in metrics.items())))
    if result.checkpoint:
        print(plain(f"[hpctrain] latest checkpoint: {result.checkpoint.path}"))


def cmd_results(args) -> int:
    """``hpctrain results RUN``: one run's tables (see :mod:`hpctrain.cli.views`);
    ``hpctrain results SWEEP_DIR``: the sweep's trials, ranked (:mod:`hpctrain.cli.sweep`)."""
    sweep = sweep_dir_of(args.run)
    if args.json:
        return print_json(sweep_data(sweep) if sweep is not None else results_data(args.run))
    if sweep is not None:
        return print_sweep(sweep)

    print_results(args.run)
    return 0


def cmd_plot(args) -> int:
    if bool(args.goodput) == bool(args.metric):
        raise ConfigError("hpctrain plot: expected --metric M (curves) or --goodput (the "
                          "goodput breakdown), " + ("not both" if args.goodput else "got neither"),
                          hint="hpctrain plot RUN --metric loss; hpctrain plot RUN --goodput")
    args.runs = _runs_of(args.runs)
    if args.goodput:
        output = args.output or "goodput.png"
        for name, attempts in plot_goodput(args.runs, output).items():
            walls = ", ".join(f"{sum(parts.values()):.1f} s" for parts in attempts.values())
            print(plain(f"goodput: {name} ({len(attempts)} attempts: {walls})"))
        print(f"wrote {output}")
        return 0
    output = args.output or f"{args.metric[0].replace('/', '_')}.png"
    drawn = plot_runs(args.runs, args.metric, output, x=args.x)
    for metric, runs in drawn.items():
        print(plain(f"{metric}: {', '.join(runs)}"))
    skipped = [r for r in args.runs if not any(os.path.basename(os.path.normpath(r)) in v
                                               for v in drawn.values())]
    if skipped:
        print(f"not drawn (none of the metrics): {', '.join(skipped)}", file=sys.stderr)
    print(f"wrote {output}")
    return 0


def _runs_of(names: List[str]) -> List[str]:
    """Run names or directories, each sweep directory among them replaced by its trials'
    run directories."""
    out: List[str] = []
    for name in names:
        sweep = sweep_dir_of(name)
        if sweep is None:
            out.append(name)
            continue
        out += [t for t in SweepDir(sweep).trial_paths() if RunDir(t).exists()]
    return out
