"""The batch step: what a rendered job script runs on the first node of its allocation.

    python -m hpctrain._internal.batch RUN_DIR [--script PATH]  < resolved spec (TOML)

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
import json
import os
import sys
import time
from typing import Dict, List, Optional

try:
    import tomllib
except ImportError:  # pragma: no cover - Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

from hpctrain._internal.fsutil import atomic_write_bytes
from hpctrain._internal.rundir.layout import RunDir
from hpctrain._internal.tomlfile import loads_toml
from hpctrain._internal.trust import no_write_for_others, read_trusted, trusted_pythonpath

#: Environment of every rank: GPU binding asked for by the site (applied in the worker).
ENV_GPU_BINDING = "HPCTRAIN_GPU_BINDING"
ENV_GPU_BINDING_VAR = "HPCTRAIN_GPU_BINDING_VAR"
ENV_GPUS_PER_WORKER = "HPCTRAIN_GPUS_PER_WORKER"
#: How long the job waits for the run directory's lock (held briefly by `hpctrain submit`).
LOCK_WAIT_S = 120.0


def _log(msg: str) -> None:
    print(f"[hpctrain] {msg}", file=sys.stderr, flush=True)


def load_spec(text: str, run_dir: str):
    from hpctrain.spec import spec_from_dict

    file = os.path.join(run_dir, "spec.toml")
    return spec_from_dict(loads_toml(text, file=file), file=file, base_dir=run_dir)


def prepare(run: RunDir, spec, script: Optional[str]) -> None:
    """Create the run from the spec when nothing was submitted from Python; keep the
    script that runs it as ``job.sh``."""
    from hpctrain.run import Run, RunOptions
    from hpctrain.trainer import trainer_from_spec

    if not os.path.exists(run.payload_file):
        Run(trainer_from_spec(spec), RunOptions(path=run.path)).prepare()
    if script and os.path.isfile(script) and not os.path.exists(run.job_script):
        with open(script, "rb") as f:
            atomic_write_bytes(run.job_script, f.read(), sync=False, mode=run.script_mode)


def _driver_pythonpath(run: RunDir) -> str:
    """The submitting process's sys.path additions (``.hpctrain/driver.json``), read
    through the checked loader: they go first on every rank's PYTHONPATH."""
    try:
        data = json.loads(read_trusted(run.driver_file, what="the driver's path list"))
    except FileNotFoundError:
        return ""
    except ValueError as e:
        raise ValueError(f"{run.driver_file}: not the JSON hpctrain writes ({e})") from None
    value = data.get("pythonpath", "") if isinstance(data, dict) else ""
    return value if isinstance(value, str) else ""


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpctrain._internal.batch")
    p.add_argument("run_dir")
    p.add_argument("--script", default=None)
    p.add_argument("--warning-signal", default="USR1")
    p.add_argument("--sweep-trial", type=int, default=None,
                   help="a sweep's job array task: run this trial of the sweep in RUN_DIR's "
                        "parent directory")
    args = p.parse_args(argv)
    no_write_for_others()
    if os.environ.pop("HPCTRAIN_SAFEPATH", None):  # the job script's, for this step only
        os.environ.pop("PYTHONSAFEPATH", None)
    from hpctrain._internal.log import configure

    configure()  # the job's log: the supervisor's notes, as `[hpctrain] ...` lines

    from hpctrain._internal.allocation.recovery import PendingStop, supervisor_signals

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


def _load_and_run(run: RunDir, pending, script: Optional[str],
                  sweep_trial: Optional[int] = None) -> int:
    from hpctrain.errors import ConfigError

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
    preemption's requeue); the job's exit code."""
    from hpctrain import cluster_env
    from hpctrain.errors import ConfigError, RunLockedError, UnsafePathError
    from hpctrain.launchers import launcher_for
    from hpctrain.run import driver_pythonpath
    from hpctrain.schedulers import get_scheduler
    from hpctrain.schedulers.base import warning_seconds
    from hpctrain._internal.allocation.attempts import supervise
    from hpctrain._internal.allocation.recovery import requeue
    from hpctrain._internal.allocation.supervisor import FINISHED, REQUEUED, STOPPED, Supervisor
    from hpctrain._internal.allocation.tracking import CallbackRunner, load_callbacks

    fc = spec.run.failure_config
    env = dict(os.environ)
    info = cluster_env.detect_scheduler(env)
    scheduler = get_scheduler(info)
    # (an array task's own id, never the array's: the scheduler class says how)
    job_id = (scheduler.job_id_from_env(env) if scheduler.is_batch else None) \
        or f"batch-{os.getpid()}"
    try:
        # refuses a run directory another user could write, before reading it
        run.create(spec.run.share)
        # wait a little: the login node may still be recording the submission
        with run.exclusive(wait_s=LOCK_WAIT_S):
            prepare(run, spec, script)
            if record_job and scheduler.is_batch:
                record_submission(run, info, job_id)
            # (the job's directory: python -m put it first on sys.path, which
            # PYTHONSAFEPATH=1 of the job script no longer does; only when nobody else
            # can write it)
            extra = driver_pythonpath(also=[os.getcwd()], warn=_log)
            submitted_from = trusted_pythonpath(_driver_pythonpath(run), warn=_log)
            if submitted_from:
                extra["PYTHONPATH"] = os.pathsep.join(
                    p for p in (submitted_from, extra["PYTHONPATH"]) if p)
            sched = spec.scheduler
            extra.update(gpu_binding_env(spec))
            _log(f"job {job_id}: run {run.path}, {spec.scaling.num_workers} workers on "
                 f"{spec.scaling.nodes} node(s) with {sched.launcher_name}")
            walltime_s = job_walltime(info, sched, job_id)
            warning_s = warning_seconds(spec)
            if sched.walltime_s is None and walltime_s is not None and warning_s * 2 > walltime_s:
                warning_s = max(10, min(warning_s, walltime_s // 4))  # the queue's walltime
            tracking = CallbackRunner(run, load_callbacks(run))
            sup = Supervisor(run, launcher=launcher_for(spec),
                             num_workers=spec.scaling.num_workers,
                             max_failures=fc.max_failures, job_id=job_id,
                             extra_env=extra, warning_s=warning_s, on_tick=tracking.tick,
                             warning_signal=fc.warning_signal,
                             warn_at=_timer(info, walltime_s, warning_s))
            if sup.warn_at is not None:
                _log(f"no scheduler warning on {info}: the supervisor's timer warns at "
                     f"{time.strftime('%H:%M:%S', time.localtime(sup.warn_at))}, "
                     f"{warning_s} s before the walltime ends")
            if run.read_state().get("status") == FINISHED:
                _log(f"run {run.path} has already finished; nothing to do")
                return 0
            # the one attempt loop (a local run's too): the warning from now on reaches
            # the supervisor; a clean stop requeues when the scheduler can
            status = supervise(run, sup, fc, tracking=tracking, pending=pending,
                               requeue=lambda: requeue(run, scheduler, job_id),
                               can_requeue=scheduler.can_requeue)
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
    return 0 if status in (FINISHED, STOPPED) else 1


def gpu_binding_env(spec) -> Dict[str, str]:
    """The ranks' environment for the GPU binding the site asks for (applied in the
    worker); empty without one."""
    sched = spec.scheduler
    if sched.gpu_binding == "none":
        return {}
    return {ENV_GPU_BINDING: sched.gpu_binding, ENV_GPU_BINDING_VAR: sched.gpu_binding_var,
            ENV_GPUS_PER_WORKER: str(max(1, spec.scaling.gpus_each))}


def record_submission(run: RunDir, scheduler: str, job_id: str) -> None:
    """A job nobody recorded (its script was submitted by hand, ``sbatch``/``qsub`` of
    ``hpctrain render``'s output) joins the run's submissions, so that ``hpctrain
    status`` shows its state and ``hpctrain cancel`` finds it."""
    from hpctrain._internal.driver.submission import SUBMISSIONS

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
    from hpctrain._internal.allocation.supervisor import FAILED, RUNNING
    from hpctrain.errors import ConfigError

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


def job_walltime(scheduler: Optional[str], sched, job_id: str) -> Optional[int]:
    """The job's walltime in seconds: the spec's, else the one the scheduler gave the job
    (PBS: a queue's ``resources_default.walltime`` limits it just the same)."""
    from hpctrain.schedulers import get_scheduler

    if sched.walltime_s is not None or scheduler is None:
        return sched.walltime_s
    return get_scheduler(scheduler).job_walltime(job_id)


def _timer(scheduler: Optional[str], walltime_s: Optional[int],
           warning_s: int) -> Optional[float]:
    """When the supervisor warns by itself: where the scheduler sends no warning signal
    (PBS), from the job's start (``HPCTRAIN_JOB_STARTED``, set first thing by the script)
    and walltime."""
    from hpctrain.schedulers import scheduler_class

    started = os.environ.get("HPCTRAIN_JOB_STARTED", "")
    if scheduler is None or walltime_s is None or not started.isdigit():
        return None
    cls = scheduler_class(scheduler)
    if not cls.template or cls.sends_warning:
        return None
    return int(started) + walltime_s - warning_s


if __name__ == "__main__":
    sys.exit(main())
