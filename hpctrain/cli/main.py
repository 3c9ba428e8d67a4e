"""The ``hpctrain`` command line.

    hpctrain run job.toml [--set scaling.num_workers=4 ...]   run here, show progress
    hpctrain validate job.toml [--site S] [--set ...]          check a job file, run nothing
    hpctrain render job.toml [--site S] [--set ...]            print the batch script
    hpctrain submit job.toml [--site S] [--set ...] [--follow] submit it (Slurm, PBS)
    hpctrain status RUN|SWEEP_DIR [--follow|--json]            run and job state
    hpctrain logs RUN [--rank R] [--follow]                    a rank's output
    hpctrain cancel RUN                                        cancel the run's job
    hpctrain results RUN [--json]                              metrics, checkpoints, attempts
    hpctrain plot RUN|SWEEP_DIR... --metric loss [-o loss.png] metric curves, runs compared
    hpctrain sweep job.toml [--site S] [--set ...] [--follow]  a [sweep]: trials here or as job arrays
    hpctrain results SWEEP_DIR                                 the sweep's trials, ranked
    hpctrain list [STORAGE_PATH] [--trials] [--json]           runs and sweeps, with status
    hpctrain sites [NAME]                                      known site configs, your defaults
    hpctrain schema [-o hpctrain.schema.json]                  the job file's JSON Schema (editors)
    hpctrain completion bash|zsh|tcsh                          shell completion script (shtab)

RUN is a run directory, or a run name under the default storage path ($HPCTRAIN_STORAGE_PATH,
the user config's storage_path, ~/hpctrain_results); a sweep's trial: SWEEP/trial_NNNNN. -q/--quiet and -v/--verbose (before or
after the command) set how much hpctrain says; your defaults: ~/.config/hpctrain/config.toml.
Exit codes: 0 success, 1 the training failed, 2 bad input (nothing was started or
submitted), 75 stopped cleanly after the warning signal (time limit, preemption: continue
it by running it again), 130 interrupted or detached.
"""
from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
from typing import List, Optional

from hpctrain import __version__
from hpctrain.cli.completion import SHELLS
from hpctrain.errors import ConfigError, HpctrainError, TrainingFailedError, TrainingStoppedError
from hpctrain._internal.base.terminal import plain

#: ``hpctrain run`` stopped cleanly after the warning signal (EX_TEMPFAIL: try again later).
EXIT_STOPPED = 75


def _add_spec_args(p: argparse.ArgumentParser, site: bool = True) -> None:
    p.add_argument("job", help="the job spec (TOML)")
    if site:
        p.add_argument("--site", default=None, metavar="NAME",
                       help="site config to layer under the job file (see `hpctrain sites`); "
                            "overrides the file's own site = \"...\"")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a spec value, e.g. --set scaling.num_workers=4 (repeatable)")


def _add_force_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="continue an unfinished run of this name even though its scale, "
                        "backend, datasets or [config] changed")


def _add_run_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a run directory, or a run name under $HPCTRAIN_STORAGE_PATH")


def _add_json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="print it as one JSON document (its shape: docs/cli.md, JSON output)")


def _add_loudness(p: argparse.ArgumentParser, default) -> None:
    loud = p.add_mutually_exclusive_group()
    loud.add_argument("-q", "--quiet", action="store_true",
                      default=False if default is None else default,
                      help="only warnings and errors; no progress lines")
    loud.add_argument("-v", "--verbose", action="count",
                      default=0 if default is None else default,
                      help="more detail (hpctrain's debug messages; per-report progress)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hpctrain",
        description="Ray Train's ergonomics on Slurm and PBS clusters. "
                    "Docs: README.md; examples: examples/.")
    p.add_argument("--version", action="version", version=f"hpctrain {__version__}")
    _add_loudness(p, None)
    # the same options after the command (`hpctrain run -q job.toml`); not given there,
    # they leave the main parser's values alone
    common = argparse.ArgumentParser(add_help=False)
    _add_loudness(common, argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser("run", parents=[common], help="run a job spec here, with live progress",
                         description="Run the training a job spec describes on this machine "
                                     "(num_workers local processes) and print its result.")
    _add_spec_args(run, site=False)
    _add_force_arg(run)
    val = sub.add_parser("validate", parents=[common], help="check a job spec; print the resolved spec",
                         description="Check a job spec (types, unknown keys, entry point, "
                                     "data files, the site's limits) and print the resolved "
                                     "spec. A batch job's script is rendered as `hpctrain "
                                     "render` (a sweep's: as `hpctrain sweep --dry-run`) "
                                     "would, and discarded, so validate refuses what they "
                                     "refuse. Starts nothing, creates nothing.")
    _add_spec_args(val)
    ren = sub.add_parser("render", parents=[common], help="print the batch script of a job spec",
                         description="Print the exact batch script `hpctrain submit` would "
                                     "submit (byte for byte, with the same run name). "
                                     "`hpctrain render job.toml > job.sh && sbatch job.sh` "
                                     "works by hand. Submits nothing, creates nothing.")
    _add_spec_args(ren)
    smt = sub.add_parser("submit", parents=[common], help="submit a job spec to Slurm or PBS",
                         description="Check the spec against its site's limits, prepare the "
                                     "run directory, write job.sh and submit it. Prints the "
                                     "job id and the run directory.")
    _add_spec_args(smt)
    _add_force_arg(smt)
    smt.add_argument("--dry-run", action="store_true",
                     help="print the script and the submit command; submit nothing")
    smt.add_argument("--follow", action="store_true",
                     help="show progress until the job ends (Ctrl-C detaches)")
    sta = sub.add_parser("status", parents=[common], help="state of a run and its batch job",
                         description="Show a run's state, its jobs and, while it runs, its "
                                     "progress: iteration, elapsed time, pace and latest "
                                     "metrics.")
    _add_run_arg(sta)
    _add_json_arg(sta)
    sta.add_argument("--follow", action="store_true",
                     help="show live progress until the run ends (Ctrl-C detaches)")
    logs = sub.add_parser("logs", parents=[common], help="print a rank's output",
                          description="Print the output of one rank of the run's latest job "
                                      "(logs/<job>/rank-R.out).")
    _add_run_arg(logs)
    logs.add_argument("--rank", type=int, default=0, help="which rank (default 0)")
    logs.add_argument("--job", default=None, help="which job id (default: the latest)")
    logs.add_argument("--follow", "-f", action="store_true",
                      help="keep printing new output until the job ends")
    can = sub.add_parser("cancel", parents=[common], help="cancel the run's batch job",
                         description="Cancel the run's latest job (scancel / qdel). "
                                     "Committed checkpoints stay; the run can be resumed.")
    _add_run_arg(can)
    res = sub.add_parser("results", parents=[common], help="show metrics, checkpoints and attempts of a run",
                         description="Show a run's status, the last, smallest and largest "
                                     "value of each metric, its checkpoints with their "
                                     "scores (the best one marked) and its attempts.")
    _add_run_arg(res)
    _add_json_arg(res)
    plo = sub.add_parser("plot", parents=[common], help="draw metric curves of one or more runs",
                         description="Draw the curves of one or more metrics (one panel "
                                     "each), with every given run on the same axes, into "
                                     "a PNG (or .svg/.pdf); or, with --goodput, where each "
                                     "attempt's wall time went. Needs matplotlib.")
    plo.add_argument("runs", nargs="+", metavar="RUN",
                     help="run directories, or run names under $HPCTRAIN_STORAGE_PATH")
    plo.add_argument("--metric", "-m", action="append",
                     help="a reported metric (repeatable; nested ones as a/b)")
    plo.add_argument("--goodput", action="store_true",
                     help="instead of metrics: a stacked bar per attempt (queue, start-up, "
                          "checkpoint stall, hangs, lost work, stragglers, productive), one "
                          "panel per run (default output: goodput.png)")
    plo.add_argument("-o", "--output", default=None,
                     help="the image to write (default: <metric>.png here)")
    plo.add_argument("--x", choices=("iteration", "time"), default="iteration",
                     help="x axis: report iteration (default) or minutes since the first "
                          "report")
    swp = sub.add_parser("sweep", parents=[common], help="run a job spec's [sweep]: trials here or as job arrays",
                         description="Run one trial per config of the job file's [sweep] "
                                     "(grid searches crossed, num_samples repeats, random "
                                     "domains sampled with a recorded seed), each a normal "
                                     "run under <storage_path>/<run.name>/trial_NNNNN. "
                                     "Locally the trials run here; with a Slurm or PBS "
                                     "scheduler they are submitted as job arrays. Running "
                                     "it again runs only the trials that did not finish. "
                                     "Locally the warning signal (USR1) stops the running "
                                     "trials at a checkpoint: exit code 75.")
    _add_spec_args(swp)
    swp.add_argument("--dry-run", action="store_true",
                     help="print the job array script(s) (locally: the trials); create "
                          "and submit nothing")
    swp.add_argument("--follow", action="store_true",
                     help="wait for the arrays' trials and print the ranking (Ctrl-C "
                          "detaches)")
    swp.add_argument("--retry-failed", action="store_true",
                     help="also run again the trials that failed")
    lst = sub.add_parser("list", parents=[common], help="the runs and sweeps under a storage path",
                         description="List the runs and sweeps under a storage path, newest "
                                     "first, with their status and last iteration (a table "
                                     "on a terminal; tab-separated name, kind, status, "
                                     "iteration, updated, path when piped).")
    lst.add_argument("storage", nargs="?", default=None, metavar="STORAGE_PATH",
                     help="default: $HPCTRAIN_STORAGE_PATH, the user config's storage_path, "
                          "or ~/hpctrain_results")
    _add_json_arg(lst)
    lst.add_argument("--trials", action="store_true",
                     help="each sweep's trials too, after it (named SWEEP/trial_NNNNN, "
                          "the name the other commands take)")
    sit = sub.add_parser("sites", parents=[common], help="list the site configs hpctrain knows",
                         description="List site configs (package, /etc/hpctrain/sites, "
                                     "$HPCTRAIN_SITE_PATH), or show one.")
    sit.add_argument("name", nargs="?", help="show this site's file")
    _add_json_arg(sit)
    sch = sub.add_parser("schema", parents=[common],
                         help="print the job file's JSON Schema (editor completion)",
                         description="Print the JSON Schema (draft 2020-12) of a job file: "
                                     "every section and key, its type, allowed values and "
                                     "description, made from the declarations `hpctrain "
                                     "validate` checks with. Point your editor at it (Taplo, "
                                     "VS Code's Even Better TOML: a first line "
                                     "`#:schema ./hpctrain.schema.json`) to complete keys "
                                     "and flag mistakes while typing.")
    sch.add_argument("-o", "--output", default=None, metavar="FILE",
                     help="write it to FILE instead of printing it")
    com = sub.add_parser("completion", parents=[common],
                         help="print the shell completion script (needs shtab)",
                         description="Print the completion script of hpctrain for a shell "
                                     "(commands, options, file names). Bash: "
                                     "`eval \"$(hpctrain completion bash)\"` in ~/.bashrc; "
                                     "zsh: write it as _hpctrain into a directory of "
                                     "$fpath; tcsh: `eval \"`hpctrain completion tcsh`\"`. "
                                     "Needs the shtab package.")
    com.add_argument("shell", choices=SHELLS, help="the shell: " + ", ".join(SHELLS))
    return p


def _load(args, check_limits: bool = True):
    from hpctrain.spec import load_job_spec

    return load_job_spec(args.job, args.overrides, site=getattr(args, "site", None),
                         check_limits=check_limits)


def _rerender_command(args, run_name: str) -> str:
    import shlex

    words = ["hpctrain", "render", os.path.abspath(args.job)]
    if args.site:
        words += ["--site", args.site]
    for o in args.overrides:
        if not o.startswith("run.name="):
            words += ["--set", o]
    words += ["--set", f"run.name={run_name}"]
    return shlex.join(words)


def _batch_run(args):
    from hpctrain._internal.base.registry import describe, scheduler_names
    from hpctrain.run import Run, RunOptions

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
    from hpctrain.cli.sweep import rerender_command
    from hpctrain.tune.jobfile import render_from_spec, sweep_path_of

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
    from hpctrain.cli.completion import print_script

    return print_script(_parser(), args.shell)


def cmd_schema(args) -> int:
    from hpctrain.schema import schema_text

    text = schema_text()
    if args.output is None:
        sys.stdout.write(text)
        return 0
    from hpctrain._internal.base.fsutil import atomic_write_bytes

    atomic_write_bytes(args.output, text.encode(), sync=False)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def cmd_submit(args) -> int:
    spec, run = _batch_run(args)
    rerender = _rerender_command(args, run.name)
    if args.dry_run:
        from hpctrain._internal.rundir.checks import check_shared_storage

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
    from hpctrain._internal.driver import submission

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
    from hpctrain._internal.allocation.budgets import exit_code
    from hpctrain._internal.rundir.layout import RunDir

    try:
        state = RunDir(run_path).read_state()
    except (OSError, ValueError):
        return default
    gave_up = state.get("gave_up") or {}
    if gave_up.get("message"):
        print(f"{lead}[hpctrain] not retried: {plain(gave_up['message'])}", file=sys.stderr)
    return exit_code(state, default)


def cmd_list(args) -> int:
    from hpctrain.cli.listing import print_listing
    from hpctrain.config import default_storage_path

    from hpctrain._internal.base.registry import uri_scheme

    storage = os.path.expanduser(args.storage or default_storage_path())
    if uri_scheme(storage) is None:  # (a storage URI, s3://…, as it is)
        storage = os.path.abspath(storage)
    if args.json:
        from hpctrain.cli.jsonout import print_json
        from hpctrain.cli.listing import listing_data

        return print_json(listing_data(storage, trials=args.trials))
    return print_listing(storage, trials=args.trials)


def _sweep_status(path: str, follow: bool, as_json: bool = False) -> int:
    """``hpctrain status SWEEP_DIR``: every trial's status (``--follow``: until the
    sweep's trials ended)."""
    from hpctrain.cli.sweep import print_results as print_sweep

    if as_json:
        from hpctrain.cli.jsonout import print_json
        from hpctrain.cli.sweep import sweep_data

        return print_json(sweep_data(path))

    if follow:
        from hpctrain.tune.sweepdir import SweepDir, follow as follow_sweep

        follow_sweep(SweepDir(path))
        return print_sweep(path, final=True)
    return print_sweep(path)


def cmd_status(args) -> int:
    from hpctrain._internal.driver import submission
    from hpctrain.cli.sweep import sweep_dir_of

    from hpctrain.cli import views as report

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
        from hpctrain.cli.jsonout import print_json

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
    import time

    from hpctrain._internal.driver import submission
    from hpctrain.cli.sweep import sweep_dir_of
    from hpctrain.schedulers import get_scheduler

    sweep = sweep_dir_of(args.run)
    if sweep is not None:
        from hpctrain.cli.sweep import print_logs

        return print_logs(sweep, args)
    run = submission.resolve_run(args.run)
    path, job_id = rank_log(run, args.rank, args.job)
    state = run.read_state() if run.exists() else {}
    sched = next((s["scheduler"] for s in state.get(submission.SUBMISSIONS) or []
                  if s["job_id"] == job_id), None)
    if not os.path.exists(path) and not args.follow:
        raise ConfigError(f"no output of rank {args.rank} in job {job_id} yet: {path}",
                          hint="ranks write it once they start; use --follow to wait")
    from hpctrain._internal.rundir.layout import LineTail

    tail = LineTail(path)
    while True:
        done = not args.follow or sched is None or get_scheduler(sched).state(job_id).done
        for line in tail.lines(final=done):  # after the job ended: the unfinished line too
            print(line, flush=True)
        if done:
            return 0
        time.sleep(1.0)


def rank_log(run, rank: int, job: Optional[str] = None):
    """``(path of the rank's output, job id)`` in the run's job ``job`` (default: its
    latest); ConfigError when the run has no job yet."""
    from hpctrain._internal.driver import submission

    ids = submission.job_ids(run)
    state = run.read_state() if run.exists() else {}
    job_id = job or (ids[-1] if ids else (state.get("job_ids") or [None])[-1])
    if job_id is None:
        raise ConfigError(f"{run.path} has no job yet", hint="hpctrain submit job.toml")
    return os.path.join(run.logs_dir(job_id), f"rank-{rank}.out"), job_id


def cmd_cancel(args) -> int:
    from hpctrain._internal.driver import submission
    from hpctrain.cli.sweep import sweep_dir_of
    from hpctrain.job import Job

    sweep = sweep_dir_of(args.run)
    if sweep is not None:
        from hpctrain.cli.sweep import cancel_sweep

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
        from hpctrain.schedulers import get_scheduler

        js = get_scheduler(job["scheduler"]).state(job["job_id"])
        print(f"{job['scheduler']} job {job['job_id']} already ended ({js.state}); "
              "nothing to cancel")
        return 0
    print(f"cancelled {job['scheduler']} job {job['job_id']}; committed checkpoints in "
          f"{run.checkpoints_dir} stay, and submitting the run again resumes it")
    return 0


def cmd_sweep(args) -> int:
    from hpctrain.cli.sweep import cmd_sweep as sweep

    return sweep(args)


def _refuse_sweep(spec) -> None:
    if spec.sweep:
        raise ConfigError("sweep: this job file has a [sweep] section", file=spec.source,
                          hint="run its trials with `hpctrain sweep` (same arguments), or "
                               "remove [sweep] for a single run")


def cmd_sites(args) -> int:
    from hpctrain.sites import search_path
    from hpctrain.spec import load_site

    from hpctrain.userconfig import center_config_path, config_path, load_user_defaults

    if args.name:
        site = load_site(args.name)
        user = load_user_defaults()
        over = [{"key": key, "value": user.values[key], "from": user.sources[key]}
                for key in ("account", "storage_path") if key in user.values]
        with open(site.path) as f:
            text = f.read()
        if args.json:
            from hpctrain.cli.jsonout import print_json

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
        from hpctrain.cli.jsonout import print_json

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
    from hpctrain.sites import available_sites
    from hpctrain.spec import load_site

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
    from hpctrain.config import default_storage_path
    from hpctrain.userconfig import (default_site, load_center_defaults, load_user_defaults,
                                     storage_default)

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
    from hpctrain.run import Run

    spec = _load(args)
    # (a copy: a Run names an unnamed spec, and validate prints the spec as it resolves)
    run = Run.from_spec(copy.deepcopy(spec))
    run.check_datasets()  # the entry point, every config, data files
    if spec.sweep and (spec.sweep.get("scheduler") or spec.sweep.get("search_alg")):
        from hpctrain.tune.jobfile import control_from_spec, space_of

        control_from_spec(spec, space_of(spec))  # the scheduler's and searcher's options
    from hpctrain._internal.base.registry import scheduler_class
    from hpctrain._internal.rundir.checks import check_shared_storage

    if scheduler_class(spec.scheduler.kind).template:  # a batch job: what `render` (a
        if spec.sweep:                                 # sweep: `sweep --dry-run`) refuses
            from hpctrain.tune.jobfile import sweep_path_of

            check_shared_storage(spec, sweep_path_of(spec))  # as `hpctrain sweep` does
            _sweep_scripts(args, spec)
        else:
            check_shared_storage(spec, run.path)  # as `hpctrain submit` does
            _batch_script(args, spec, run)
    sys.stdout.write(spec.to_toml())
    print(f"# OK: {args.job} is valid", file=sys.stderr)
    return 0


def cmd_run(args) -> int:
    from hpctrain._internal.driver.login import warn_if_login_node
    from hpctrain.run import Run, RunOptions

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
    from hpctrain._internal.driver.progress import user_metrics

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
    from hpctrain.cli.views import print_results
    from hpctrain.cli.sweep import print_results as print_sweep, sweep_dir_of

    sweep = sweep_dir_of(args.run)
    if args.json:
        from hpctrain.cli.jsonout import print_json
        from hpctrain.cli.sweep import sweep_data
        from hpctrain.cli.views import results_data

        return print_json(sweep_data(sweep) if sweep is not None else results_data(args.run))
    if sweep is not None:
        return print_sweep(sweep)

    print_results(args.run)
    return 0


def cmd_plot(args) -> int:
    from hpctrain.cli.views import plot_goodput, plot_runs

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


def _stdout_closed() -> int:
    """The reader of our output went away (``hpctrain results RUN | head -1``): no
    traceback, and no second BrokenPipeError when Python flushes stdout at exit (Python's
    documented recipe, library/signal.html#note-on-sigpipe: point stdout at devnull)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 1


def _runs_of(names: List[str]) -> List[str]:
    """Run names or directories, each sweep directory among them replaced by its trials'
    run directories."""
    from hpctrain._internal.rundir.layout import RunDir
    from hpctrain.tune.sweepdir import SweepDir
    from hpctrain.cli.sweep import sweep_dir_of

    out: List[str] = []
    for name in names:
        sweep = sweep_dir_of(name)
        if sweep is None:
            out.append(name)
            continue
        out += [t for t in SweepDir(sweep).trial_paths() if RunDir(t).exists()]
    return out


def main(argv: Optional[List[str]] = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        sys.exit(2)
    import logging

    from hpctrain._internal.base.log import configure

    configure(logging.WARNING if args.quiet else
              logging.DEBUG if args.verbose else logging.INFO)
    if args.command in ("run", "sweep"):  # a warning while starting must not kill it
        from hpctrain._internal.allocation.recovery import catch_early_warnings

        catch_early_warnings()
    handler = {"run": cmd_run, "validate": cmd_validate, "results": cmd_results,
               "render": cmd_render, "submit": cmd_submit, "status": cmd_status,
               "logs": cmd_logs, "cancel": cmd_cancel, "sites": cmd_sites,
               "plot": cmd_plot, "sweep": cmd_sweep, "list": cmd_list,
               "schema": cmd_schema, "completion": cmd_completion}[args.command]
    try:
        code = handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not while Python exits
    except BrokenPipeError:
        code = _stdout_closed()
    except ConfigError as e:
        print(f"hpctrain: error: {plain(e)}", file=sys.stderr)
        code = 2
    except HpctrainError as e:
        print(f"hpctrain: error: {plain(e)}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("\nhpctrain: interrupted; the run directory keeps its committed checkpoints",
              file=sys.stderr)
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
