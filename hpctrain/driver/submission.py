"""The login-node side of a batch run: submit, record, follow, find.

``submit()`` renders the script before anything is written (so a bad request changes
nothing), prepares the run directory, writes ``job.sh``, submits those exact bytes and
records the job in ``state.json``. ``follow()`` shows progress until the job left the
queue and returns the run's final status. Ctrl-C while following detaches: the job runs
on, and the message says how to look at it again.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from hpctrain.driver.progress import Progress
from hpctrain.rundir.checks import check_shared_storage, ensure_storage_dir
from hpctrain.config import default_storage_paths
from hpctrain.errors import ConfigError, ControllerError
from hpctrain.common.fsutil import atomic_write_bytes
from hpctrain.rundir.layout import LineTail, RunDir
from hpctrain.result import Result, result_or_raise
from hpctrain.schedulers import BatchRequest, get_scheduler
from hpctrain.sites import check_limits
from hpctrain.storage import storage_for
from hpctrain.userconfig import default_share
from hpctrain.common.log import progress_line

if TYPE_CHECKING:  # (for the hints only)
    from hpctrain.spec import JobSpec

SUBMISSIONS = "submissions"


@dataclass
class Submission:
    job_id: str
    scheduler: str
    run_path: str
    script_path: str


def render(run_path: str, spec: JobSpec, rerender: str = ""):
    """The :class:`~hpctrain.schedulers.BatchRequest` of the run at ``run_path`` and its
    script, checked."""

    check_limits(spec)
    request = BatchRequest(spec, run_path, rerender=rerender)
    return request, request.materialize()


def submit(run_path: str, spec: JobSpec, prepare: Callable[[], Any], *,
           rerender: str = "") -> Submission:
    """Prepare the run directory at ``run_path`` (``prepare()``, under the directory's
    lock: :meth:`hpctrain.run.Run.prepare`) and submit its batch script.

    Nothing is created when the script cannot be rendered; a run directory created here
    is removed again when the scheduler refuses the job."""
    request, script = render(run_path, spec, rerender)

    check_shared_storage(spec, run_path)
    scheduler = request.scheduler
    scheduler.check_available()
    ensure_storage_dir(os.path.dirname(run_path), spec)
    run = RunDir(run_path)
    fresh = not os.path.exists(run.path)
    run.create(spec.run.share or default_share())  # refuses another user's directory first
    script_path = os.path.join(run.path, "job.sh")
    owned = False  # removed on failure only when this call created it and held its lock
    try:
        with run.exclusive():
            owned = fresh
            state = run.read_state() if os.path.exists(run.state_file) else {}
            _refuse_if_active(run, state, scheduler)
            prepare()
            atomic_write_bytes(script_path, script.encode(), sync=False, mode=run.script_mode)
            job_id = scheduler.submit(script_path)
            with run.update_state() as s:
                s.setdefault("name", run.name)
                s["status"] = "PENDING"
                s.setdefault(SUBMISSIONS, []).append(
                    {"job_id": job_id, "scheduler": scheduler.name, "time": time.time(),
                     "script": "job.sh"})
                s["scheduler"] = scheduler.name
    except BaseException:
        if owned:
            shutil.rmtree(run.path, ignore_errors=True)
        raise
    return Submission(job_id, scheduler.name, run.path, script_path)


def _refuse_if_active(run: RunDir, state: Dict[str, Any], scheduler: Any) -> None:
    last = (state.get(SUBMISSIONS) or [None])[-1]
    if not last:
        return

    try:
        job = get_scheduler(last["scheduler"]).state(last["job_id"])
    except Exception:  # noqa: BLE001 - the scheduler cannot tell: do not block on it
        return
    if not job.done:
        raise ConfigError(
            f"run.name: the run {run.name!r} already has job {last['job_id']} "
            f"({job.state}) at {run.path}",
            hint=f"wait for it, cancel it (hpctrain cancel {run.path}), or pick another name")


def last_job(run: RunDir) -> Optional[Dict[str, Any]]:
    state = run.read_state() if os.path.exists(run.state_file) else {}
    subs = state.get(SUBMISSIONS) or []
    return subs[-1] if subs else None


def follow(run_path: str, *, verbose: int = 1, poll_s: float = 2.0, stream=None,
           requeue_wait_s: float = 120.0) -> str:
    """Show progress of the run's jobs until the run ended; return the run's status then
    (FINISHED, FAILED, STOPPED, or the job's own end state when the run did not get to
    record one). A requeued job (Slurm: same id, pending again) and a resubmitted one
    (PBS: the next job in ``state.json``) are followed on. Ctrl-C detaches and re-raises
    KeyboardInterrupt."""

    run = RunDir(run_path)
    job = last_job(run)
    if job is None:
        raise ConfigError(f"{run.path} has no submitted job", hint="hpctrain submit job.toml")
    stream = stream or sys.stdout
    progress = Progress(run, verbose=verbose, stream=stream)

    def say(msg: str) -> None:
        if verbose >= 1:
            progress_line(f"[hpctrain] {msg}")

    def tail_of(j):  # rank 0's output, as a local run shows it
        return LineTail(os.path.join(run.logs_dir(j["job_id"]), "rank-0.out"))

    rank0 = tail_of(job)

    def echo(final: bool = False) -> None:
        for line in rank0.lines(final):
            progress.worker_line(0, line)

    seen = None
    requeue_waited = 0.0
    try:
        while True:
            echo()
            progress.tick()
            newest = last_job(run) or job
            if newest["job_id"] != job["job_id"]:
                echo(final=True)
                say(f"job {job['job_id']} resubmitted itself as job {newest['job_id']}; "
                    "following that one")
                job, seen, rank0 = newest, None, tail_of(newest)
            js = get_scheduler(job["scheduler"]).state(job["job_id"])
            if js.state != seen:
                seen = js.state
                reason = f" ({js.reason})" if js.reason and js.reason != "None" else ""
                say(f"job {job['job_id']}: {js.state}{reason}")
            if js.done:
                # a job that requeued (or resubmitted) itself: its successor shows up soon
                if run.read_state().get("status") == "REQUEUED" and requeue_waited < requeue_wait_s:
                    requeue_waited += poll_s
                    time.sleep(poll_s)
                    continue
                break
            requeue_waited = 0.0
            time.sleep(poll_s)
    except KeyboardInterrupt:
        progress.close()
        progress_line(detach_message(run.path, job["job_id"]))
        raise
    echo(final=True)
    progress.close()
    status = run.read_state().get("status")
    if status in ("FINISHED", "FAILED", "STOPPED"):
        return status
    return f"JOB_{seen}"


def detach_message(run_path: str, job_id: str) -> str:
    return (f"\n[hpctrain] detached; job {job_id} keeps running (nothing was cancelled).\n"
            f"  follow it again:  hpctrain status {run_path} --follow\n"
            f"  its logs:         hpctrain logs {run_path} --follow\n"
            f"  its result:       hpctrain results {run_path}   "
            f"(Python: hpctrain.Result.from_path({run_path!r}))\n"
            f"  cancel it:        hpctrain cancel {run_path}")


def result_of(run_path: str, status: str) -> Result:
    """The Result after ``follow()``; raises TrainingFailedError when the run failed or
    its job ended before the run did."""

    if status in ("FINISHED", "FAILED", "STOPPED"):
        return result_or_raise(run_path, status)
    result = Result.from_path(run_path)
    job = last_job(RunDir(run_path)) or {}
    # the batch job, not a rank, ended the run (Ray 2.x's ControllerError)
    raise ControllerError(RuntimeError(
        f"job {job.get('job_id')} ended ({status[4:] if status.startswith('JOB_') else status})"
        f" before the run finished; see {os.path.join(run_path, 'logs')}"), result=result)


def named_locations(name_or_path: str) -> List[str]:
    """Where ``name_or_path`` may be: itself, and when it is a name (``my-run``, a sweep's
    trial ``sweep-demo/trial_00001``: relative, not ``./…``, not a URI) under each
    default storage path."""
    candidates = [name_or_path]
    if (not os.path.isabs(name_or_path) and not name_or_path.startswith(".")
            and "://" not in name_or_path):
        for storage in default_storage_paths():  # the default's, the site's, the center's
            storage = os.path.expanduser(storage)
            candidates.append(storage_for(storage).run_location(storage, name_or_path))
    return candidates


def resolve_run(name_or_path: str) -> RunDir:
    """A run directory from a path (or a storage location), or from a run name (a sweep's
    trial: ``SWEEP/trial_NNNNN``) under the default storage path."""

    candidates = named_locations(name_or_path)
    for c in candidates:
        run = RunDir(c)  # (a location of another storage kind: its control directory)
        if os.path.isdir(run.internal_dir) or os.path.exists(run.state_file):
            return run
    raise ConfigError(f"no run directory at {name_or_path!r}"
                      + "".join(f" or {c!r}" for c in candidates[1:]),
                      hint="give the run directory's path, or set HPCTRAIN_STORAGE_PATH "
                           "(or storage_path in ~/.config/hpctrain/config.toml) "
                           "to find runs by name")


def job_ids(run: RunDir) -> List[str]:
    state = run.read_state() if os.path.exists(run.state_file) else {}
    return [s["job_id"] for s in state.get(SUBMISSIONS) or []]
