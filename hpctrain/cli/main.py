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
import os
import sys
from typing import List, Optional

from hpctrain import __version__
from hpctrain.cli.completion import SHELLS
from hpctrain.errors import ConfigError, HpctrainError
from hpctrain.common.terminal import plain

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


def _add_spec_commands(sub, common: argparse.ArgumentParser) -> None:
    """Add the commands that take a job spec: run, validate, render, submit."""
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


def _add_watch_commands(sub, common: argparse.ArgumentParser) -> None:
    """Add the commands that look at or stop a run: status, logs, cancel."""
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


def _add_results_commands(sub, common: argparse.ArgumentParser) -> None:
    """Add the commands that show a run's results: results, plot."""
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


def _add_sweep_command(sub, common: argparse.ArgumentParser) -> None:
    """Add the sweep command."""
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


def _add_info_commands(sub, common: argparse.ArgumentParser) -> None:
    """Add the commands about runs, sites and hpctrain itself: list, sites, schema, completion."""
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


def build_parser() -> argparse.ArgumentParser:
    """The ``hpctrain`` parser: the global options, then the sub-commands in help order."""
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
    _add_spec_commands(sub, common)
    _add_watch_commands(sub, common)
    _add_results_commands(sub, common)
    _add_sweep_command(sub, common)
    _add_info_commands(sub, common)
    return p



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


def main(argv: Optional[List[str]] = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        sys.exit(2)
    import logging

    from hpctrain.common.log import configure

    configure(logging.WARNING if args.quiet else
              logging.DEBUG if args.verbose else logging.INFO)
    if args.command in ("run", "sweep"):  # a warning while starting must not kill it
        from hpctrain.allocation.recovery import catch_early_warnings

        catch_early_warnings()
    from hpctrain.cli import commands  # the command is known: now what it needs

    handler = getattr(commands, f"cmd_{args.command}")
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
