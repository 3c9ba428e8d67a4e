"""The batch step: what a rendered job script runs on the first node of its allocation.

    python -m hpctrain.cli.batch RUN_DIR [--script PATH]  < resolved spec (TOML)

The script carries the resolved spec (a heredoc on stdin), so a script rendered with
``hpctrain render`` and submitted by hand with ``sbatch``/``qsub`` is complete: when the
run directory has no payload yet (nothing was submitted from Python), this step creates
the run from the spec. Then the supervisor runs the attempts with the spec's launcher
(srun, mpiexec, local) until the training finished or failed for good.

On the scheduler's warning (``#SBATCH --signal=B:<sig>@<s>``; on PBS the supervisor's
own timer from the job's start and walltime) the ranks checkpoint and stop, and this
step requeues the job (:mod:`.recovery`).

Exit status: 0 finished, or stopped cleanly (requeued or not: ``state.json`` says which),
1 failed, 2 bad spec, 130 interrupted (SIGTERM from the scheduler: cancel, the time
limit without a warning).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import List, Optional

try:
    import tomllib
except ImportError:  # pragma: no cover - Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

from hpctrain.common.fsutil import atomic_write_bytes
from hpctrain.rundir.layout import RunDir
from hpctrain.common.tomlfile import loads_toml
from hpctrain.common.trust import no_write_for_others
from hpctrain.allocation.budgets import exit_code
from hpctrain.allocation.job import allocation_from_env, describe_timer
from hpctrain.allocation.recovery import PendingStop, supervisor_signals
from hpctrain.allocation.supervisor import FAILED, FINISHED, REQUEUED, RUNNING, STOPPED
from hpctrain.common.log import configure
from hpctrain.driver.submission import SUBMISSIONS
from hpctrain.rundir.validation import validate
from hpctrain.errors import ConfigError, RunLockedError, UnsafePathError
from hpctrain.run import Run, RunOptions, allocation_pythonpath
from hpctrain.spec import resolved_spec

#: How long the job waits for the run directory's lock (held briefly by `hpctrain submit`).
LOCK_WAIT_S = 120.0


def _log(msg: str) -> None:
    print(f"[hpctrain] {msg}", file=sys.stderr, flush=True)


def load_spec(text: str, run_dir: str):
    """The resolved spec the job script carries (an earlier version's too)."""
    file = os.path.join(run_dir, "spec.toml")
    return resolved_spec(loads_toml(text, file=file), file=file, base_dir=run_dir)


def the_run(run: RunDir, spec, script: Optional[str]):
    """The :class:`~hpctrain.run.Run` of this job: the one in the run directory (its
    payload, callbacks; the spec the script carries), made from that spec first when
    nothing was submitted from Python (``hpctrain render``'s script submitted by hand).
    The script that runs it is kept as ``job.sh``."""
    if not os.path.exists(run.payload_file):
        Run.from_spec(spec, RunOptions(path=run.path)).prepare()
    if script and os.path.isfile(script) and not os.path.exists(run.job_script):
        with open(script, "rb") as f:
            atomic_write_bytes(run.job_script, f.read(), sync=False, mode=run.script_mode)
    return Run.at(run.path, spec=spec, caller="the batch step")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpctrain.cli.batch")
    p.add_argument("run_dir")
    p.add_argument("--script", default=None)
    p.add_argument("--warning-signal", default="USR1")
    p.add_argument("--sweep-trial", type=int, default=None,
                   help="a sweep's job array task: run this trial of the sweep in RUN_DIR's "
                        "parent directory")
    p.add_argument("--validate", default=None, metavar="CHECKPOINT",
                   help="validate this checkpoint of the run (asynchronous validation)")
    args = p.parse_args(argv)
    no_write_for_others()
    if args.validate is not None:
        return _validate(RunDir(args.run_dir), args.validate)
    if os.environ.pop("HPCTRAIN_SAFEPATH", None):  # the job script's, for this step only
        os.environ.pop("PYTHONSAFEPATH", None)

    configure()  # the job's log: the supervisor's notes, as `[hpctrain] ...` lines

    pending = PendingStop()
    # (popped: a job this one submits again must not inherit it)
    if os.environ.pop("HPCTRAIN_WARNED", None):
        pending.request_stop("the warning signal came during the job's set-up")
    try:
        # first thing: the script ignored the warning signal until here
        with supervisor_signals(pending, args.warning_signal):
            return _load_and_run(RunDir(args.run_dir), pending, args.script, args.sweep_trial)
    except KeyboardInterrupt:
        _log("stopped by a signal; the run can be resumed from its latest checkpoint")
        return 130


def _validate(run: RunDir, name: str) -> int:
    """A validation process or job: the checkpoint ``name`` of ``run``
    (:func:`hpctrain.rundir.validation.validate`), with the sys.path additions
    the run's ranks get, so that the validation function unpickles as in the driver."""
    configure()
    os.environ.pop("PYTHONSAFEPATH", None)
    for entry in reversed(allocation_pythonpath(run)["PYTHONPATH"].split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    return validate(run, name)


def _load_and_run(run: RunDir, pending, script: Optional[str],
                  sweep_trial: Optional[int] = None) -> int:
    try:
        spec = load_spec(sys.stdin.read(), run.path)
    except (ConfigError, tomllib.TOMLDecodeError) as e:
        _log(f"the spec embedded in the job script is not valid: {e}")
        return 2
    if sweep_trial is not None:  # one task of a sweep's job array (hpctrain.tune)
        from hpctrain.tune.array_task import run_trial

        return run_trial(run, spec, sweep_trial, lambda trial_spec, job_script: run_allocation(
            run, trial_spec, pending, job_script, record_job=False))
    return run_allocation(run, spec, pending, script)


def run_allocation(run: RunDir, spec, pending, script: Optional[str],
                   record_job: bool = True) -> int:
    """The batch step's work in this allocation: the run's attempts to their end (or to a
    preemption's requeue), through :meth:`hpctrain.run.Run.run_here` with this job's
    :class:`~hpctrain.allocation.job.Allocation`; the job's exit code."""
    try:
        # refuses a run directory another user could write, before reading it
        run.create(spec.run.share)
        allocation = allocation_from_env(spec, pending)
        # wait a little: the login node may still be recording the submission
        with run.exclusive(wait_s=LOCK_WAIT_S):
            this = the_run(run, spec, script)
            if record_job and allocation.is_batch:
                record_submission(run, allocation.scheduler_name, allocation.job_id)
            _log(f"job {allocation.job_id}: run {run.path}, {spec.scaling.num_workers} workers "
                 f"on {spec.scaling.nodes} node(s) with {spec.scheduler.launcher_name}")
            timer = describe_timer(allocation)
            if timer:
                _log(timer)
            if run.read_state().get("status") == FINISHED:
                _log(f"run {run.path} has already finished; nothing to do")
                return 0
            # the one attempt loop (a local run's too): the warning from now on reaches
            # the supervisor; a clean stop requeues when the scheduler can
            status = this.run_here(allocation)
    except RunLockedError as e:
        _log(f"{e}\nThis job exits without running anything.")
        return 1
    except UnsafePathError as e:  # nothing in that directory is touched
        _log(f"{e}\nThis job exits without running anything.")
        return 2
    except ConfigError as e:
        _log(str(e))
        fail_open_attempt(run, str(e))
        return 2
    if status == REQUEUED:
        return 0
    _log(f"run {status}")

    return exit_code(run.read_state(), 0 if status in (FINISHED, STOPPED) else 1)


def record_submission(run: RunDir, scheduler: str, job_id: str) -> None:
    """A job nobody recorded (its script was submitted by hand, ``sbatch``/``qsub`` of
    ``hpctrain render``'s output) joins the run's submissions, so that ``hpctrain
    status`` shows its state and ``hpctrain cancel`` finds it."""
    with run.update_state() as s:
        if any(sub.get("job_id") == job_id for sub in s.get(SUBMISSIONS) or []):
            return
        s.setdefault(SUBMISSIONS, []).append(
            {"job_id": job_id, "scheduler": scheduler, "time": time.time(),
             "script": "job.sh", "recorded_by": "job"})
        s["scheduler"] = scheduler


def fail_open_attempt(run: RunDir, error: str) -> None:
    """The job cannot go on (a bad launcher, …): an attempt it opened ends FAILED with
    the reason, and so does the run, instead of staying RUNNING after the job is gone."""
    if not os.path.exists(run.state_file):
        return
    try:
        run.read_state()
    except ConfigError:  # a damaged state.json (the error above says so): left as it is
        return
    with run.update_state() as s:
        if s.get("status") != RUNNING:
            return
        for a in s.get("attempts", []):
            if a.get("outcome") == RUNNING or "ended" not in a:
                a.update(ended=time.time(), outcome=FAILED, error=error)
        s["status"] = FAILED
    atomic_write_bytes(run.error_file, f"The job could not run the training:\n{error}\n".encode(),
                       sync=False, mode=run.file_mode)


if __name__ == "__main__":
    sys.exit(main())
