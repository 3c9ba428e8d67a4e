"""The ``hpctrain`` command line.

    hpctrain run job.toml [--set scaling.num_workers=4 ...]   run locally, show progress
    hpctrain validate job.toml [--set ...]                     check a job file, run nothing
    hpctrain results RUN_DIR                                   metrics and checkpoints of a run

Exit codes: 0 success, 1 the training failed, 2 bad input (nothing was started).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from . import __version__
from .errors import ConfigError, HpctrainError, TrainingFailedError


def _add_spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", help="the job spec (TOML)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a spec value, e.g. --set scaling.num_workers=4 (repeatable)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hpctrain",
        description="Ray Train's ergonomics on Slurm and PBS clusters. "
                    "Docs: README.md; examples: examples/.")
    p.add_argument("--version", action="version", version=f"hpctrain {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser("run", help="run a job spec here, with live progress",
                         description="Run the training a job spec describes on this machine "
                                     "(num_workers local processes) and print its result.")
    _add_spec_args(run)
    val = sub.add_parser("validate", help="check a job spec; print the resolved spec",
                         description="Check a job spec (types, unknown keys, entry point) and "
                                     "print the resolved spec. Starts nothing.")
    _add_spec_args(val)
    res = sub.add_parser("results", help="show metrics and checkpoints of a run",
                         description="Show the status, last metrics and checkpoints of a run.")
    res.add_argument("run", help="a run directory")
    return p


def _load(args):
    from .spec import load_job_spec

    return load_job_spec(args.job, args.overrides)


def cmd_validate(args) -> int:
    from .trainer import trainer_from_spec

    spec = _load(args)
    trainer_from_spec(spec)  # checks the entry point and builds every config
    sys.stdout.write(spec.to_toml())
    print(f"# OK: {args.job} is valid", file=sys.stderr)
    return 0


def cmd_run(args) -> int:
    from .trainer import trainer_from_spec

    trainer = trainer_from_spec(_load(args))
    try:
        result = trainer.fit()
    except TrainingFailedError as e:
        print(f"\n[hpctrain] training FAILED (rank {e.rank}); run directory: "
              f"{e.result.path if e.result else trainer.run_path}", file=sys.stderr)
        print(e.worker_traceback.rstrip(), file=sys.stderr)
        return 1
    _print_summary(result)
    return 0


def _print_summary(result) -> None:
    from ._internal.progress import user_metrics

    metrics = user_metrics(result.metrics or {})
    print(f"[hpctrain] run {result.status}: {result.path}")
    if metrics:
        print("[hpctrain] final metrics: " + ", ".join(f"{k}={v}" for k, v in metrics.items()))
    if result.checkpoint:
        print(f"[hpctrain] latest checkpoint: {result.checkpoint.path}")


def cmd_results(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from ._internal.progress import user_metrics
    from ._internal.storage import RunDir
    from .result import Result

    run = RunDir(args.run)
    if not run.exists():
        raise ConfigError(f"{args.run}: not a run directory (no state.json)",
                          hint="pass the directory <storage_path>/<name> of a run")
    result = Result.from_path(run.path)
    state = run.read_state()
    console = Console()
    console.print(f"[bold]{run.name}[/bold]  status {state.get('status')}  "
                  f"attempts {len(state.get('attempts', []))}  failures {state.get('failures', 0)}")
    console.print(f"path: {run.path}")
    metrics = user_metrics(result.metrics or {})
    if metrics:
        t = Table(title="last metrics", title_justify="left")
        for k in metrics:
            t.add_column(k, justify="right")
        t.add_row(*[str(v) for v in metrics.values()])
        console.print(t)
    if result.best_checkpoints:
        t = Table(title="checkpoints", title_justify="left")
        t.add_column("name")
        t.add_column("iteration", justify="right")
        t.add_column("metrics")
        for ck, m in result.best_checkpoints:
            meta = ck.get_metadata()
            t.add_row(os.path.basename(ck.path), str(meta.get("iteration")),
                      ", ".join(f"{k}={v}" for k, v in user_metrics(m).items()))
        console.print(t)
    if result.error:
        console.print(f"[red]error[/red]: {run.error_file}")
    return 0


def main(argv: Optional[List[str]] = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        sys.exit(2)
    handler = {"run": cmd_run, "validate": cmd_validate, "results": cmd_results}[args.command]
    try:
        code = handler(args)
    except ConfigError as e:
        print(f"hpctrain: error: {e}", file=sys.stderr)
        code = 2
    except HpctrainError as e:
        print(f"hpctrain: error: {e}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("\nhpctrain: interrupted; the run directory keeps its committed checkpoints",
              file=sys.stderr)
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
