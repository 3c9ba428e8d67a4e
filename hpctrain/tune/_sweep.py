"""Running a sweep's trials: here (one after another, or side by side where cores allow)
or as job arrays (one array task per trial). The sweep directory itself (its layout, its
manifest, following its jobs) is :mod:`hpctrain.tune.sweepdir`.
"""
from __future__ import annotations

import contextlib
import copy
import math
import os
import shlex
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ..errors import ConfigError
from ..schedulers import BatchRequest, describe, get_scheduler, scheduler_class, scheduler_names
from ..schedulers.base import array_ranges
from ..sites import check_limits
from hpctrain.allocation.recovery import EARLY, THREADED, stop_signals
from hpctrain.driver.progress import user_metrics
from hpctrain.common.fsutil import atomic_write_bytes
from hpctrain.rundir.layout import RunDir, read_results
from hpctrain.common.trust import makedirs, modes_of
from ._control import tell_search
from .sweepdir import (FINISHED, INTERRUPTED, PENDING, RUNNING, SweepDir, array_active,
                       own_job, stopped_by, trial_id)
from hpctrain.common.log import progress_line

if TYPE_CHECKING:  # (for the hints only)
    from hpctrain.run import Run
    from hpctrain.spec import JobSpec


# --------------------------------------------------------------------------- here
class _Interrupted(Exception):
    """Raised from a trial's tick to stop it (Ctrl-C, SIGTERM)."""


def worker_cpus(scaling: Any) -> Optional[float]:
    """The cores one worker of a trial counts for when trials share this machine:
    ``cpus_per_worker``, else ``resources_per_worker["CPU"]`` as given (Ray's fractional
    CPUs: ``{"CPU": 0.5}`` packs two workers on a core), else None (one core).

    >>> from hpctrain import ScalingConfig
    >>> worker_cpus(ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}))
    0.5
    """
    if scaling.cpus_per_worker is not None:
        return scaling.cpus_per_worker
    return (scaling.resources_per_worker or {}).get("CPU")


def local_concurrency(num_workers: int, cpus_per_worker: Optional[float],
                      max_concurrent: Optional[int], gpus_per_worker: int = 0) -> int:
    """How many trials run side by side here: as many as the cores hold (each trial
    needs ``num_workers`` × ``cpus_per_worker`` cores, a fraction allowed as in Ray), at
    most ``max_concurrent``; one at a time when the workers use GPUs (each trial's ranks
    bind to GPUs by their local rank, from GPU 0: trials side by side would share those).

    >>> local_concurrency(1, None, None) >= 1
    True
    >>> local_concurrency(64, None, None)
    1
    >>> local_concurrency(1, None, 8, gpus_per_worker=1)
    1
    """
    if gpus_per_worker:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    need = max(1, num_workers) * (cpus_per_worker or 1)
    n = max(1, math.floor(cores / need + 1e-9))
    return min(n, max_concurrent) if max_concurrent else n


def run_local(sweep: SweepDir, indices: Sequence[int], make_run: Callable[[int], Any], *,
              concurrency: int, verbose: int = 1, warning_signal: str = "USR1") -> bool:
    """Run the trials ``indices`` here, ``concurrency`` at a time (``make_run(index)``:
    the trial's :class:`~hpctrain.run.Run`). Ctrl-C (or SIGTERM,
    SIGHUP) stops every running trial (each resumes from its latest checkpoint when the
    sweep runs again) and re-raises KeyboardInterrupt. The scheduler's warning
    (``warning_signal``: a sweep run inside a batch job) stops the running trials cleanly
    at a checkpoint (STOPPED) and starts no more; returns True then, else False."""
    stop = threading.Event()
    warned: List[str] = []  # (a list: the signal handler only appends)
    done = []
    lock = threading.Lock()

    def tick() -> None:
        if stop.is_set():
            raise _Interrupted("the sweep was interrupted")

    def one(index: int) -> None:
        if stop.is_set() or warned:
            return
        trial = make_run(index)
        run = trial.run_dir
        run.create(trial.spec.run.share)
        status = INTERRUPTED
        try:
            with run.exclusive():
                trial.prepare()
                sweep.set_trial(index, status=RUNNING)
                status = trial.run_here(on_tick=tick)
        except _Interrupted:
            status = INTERRUPTED
        finally:
            sweep.set_trial(index, status=status, **stopped_by(run))
        tell_search(sweep, index, status)
        with lock:
            done.append(index)
            if verbose >= 1:
                rows = {} if status != FINISHED else _last_row(run)
                shown = ", ".join(f"{k}={v}" for k, v in user_metrics(rows).items())
                why = stopped_by(run).get("stopped_by")
                progress_line(f"[hpctrain] {trial_id(index)} {status} ({len(done)} of "
                              f"{len(indices)})" + (f", stopped early ({why})" if why else "")
                              + (f": {shown}" if shown else ""))

    def warn(reason: str) -> None:
        warned.append(reason)
        THREADED.request_stop(reason)  # each running trial's supervisor: checkpoint, stop

    THREADED.reset()
    early = EARLY.take()  # a warning while `hpctrain sweep` was starting
    if early:
        warn(early)
    try:
        with _sweep_signals(warning_signal, warn):
            with ThreadPoolExecutor(max_workers=concurrency,
                                    thread_name_prefix="hpctrain-trial") as pool:
                futures = [pool.submit(one, i) for i in indices]
                try:
                    while True:
                        finished, pending = wait(futures, timeout=0.2)
                        for f in finished:
                            if f.exception() is not None:
                                raise f.exception()
                        if not pending:
                            break
                except BaseException:
                    stop.set()
                    wait(futures)
                    raise
    finally:
        THREADED.reset()
    if warned and verbose >= 1:
        left = [i for i in indices if sweep.trial_status(i) != FINISHED]
        progress_line(f"[hpctrain] sweep {sweep.name} stopped ({warned[0]}): {len(left)} "
                      "trial(s) did not finish; running the sweep again continues them from "
                      "their latest checkpoints")
    return bool(warned)


def _last_row(run: RunDir) -> Dict[str, Any]:
    rows = read_results(run.result_file)
    return rows[-1] if rows else {}


@contextlib.contextmanager
def _sweep_signals(warning_signal: str, on_warning: Callable[[str], None]) -> Iterator[None]:
    """A local sweep's signals (main thread only; the trials' supervisors run in other
    threads, where none can be installed): the warning signal calls ``on_warning``;
    SIGTERM/SIGHUP stop the sweep like Ctrl-C, as they stop a single run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with stop_signals(warning_signal, on_warning):
        yield


# --------------------------------------------------------------------------- job arrays
def split_arrays(indices: Sequence[int], max_size: int) -> List[Tuple[int, List[int]]]:
    """Trial indices → ``(offset, array indices)`` per array: an array's indices stay below
    ``max_size`` (the site's maximum array size), and task ``t`` of an array runs trial
    ``offset + t``.

    >>> split_arrays([0, 1, 2], 1001)
    [(0, [0, 1, 2])]
    >>> split_arrays(range(5), 2)
    [(0, [0, 1]), (2, [0, 1]), (4, [0])]
    >>> split_arrays([3, 1500], 1001)
    [(0, [3]), (1001, [499])]
    """
    if max_size < 1:
        raise ValueError(f"max_size must be ≥ 1, got {max_size}")
    groups: Dict[int, List[int]] = {}
    for i in sorted(indices):
        offset = i // max_size * max_size
        groups.setdefault(offset, []).append(i - offset)
    return sorted(groups.items())


def max_array_size(spec: JobSpec) -> int:
    """The site's ``[limits] max_array_size`` (for the partition/qos asked for), else the
    scheduler's default (Slurm 1001, PBS 10000)."""
    site = getattr(spec, "site_config", None)
    if site is not None:
        sched = spec.scheduler
        limits, _ = site.limits.effective(**sched.selectors())
        if limits.get("max_array_size"):
            return int(limits["max_array_size"])
    return scheduler_class(spec.scheduler.kind).max_array_size


def render_array(spec: JobSpec, sweep_path: str, offset: int, tasks: Sequence[int], *,
                 max_concurrent: Optional[int], rerender: str, label: str) -> str:
    """The batch script of one job array: task ``t`` runs trial ``offset + t`` of the sweep
    (its run directory ``trial_NNNNN``) with the spec's scaling, scheduler and recovery
    settings. Slurm: ``#SBATCH --array=<tasks>%<max_concurrent>``; PBS: ``#PBS -J lo-hi``
    (and ``-W max_run_subjobs``; ``-J`` takes no lists, so the subjobs between the trials
    of a re-run end at once: the script lists its trials), or a plain job for a single
    trial (PBS arrays need two indices or more)."""
    scheduler = get_scheduler(spec.scheduler.kind)
    for key in scheduler.array_directive_keys:
        if key in spec.scheduler.directives:
            raise ConfigError(f"scheduler.directives.{key}: a sweep makes its own job arrays",
                              file=spec.where(f"scheduler.directives.{key}"),
                              hint="remove it; [sweep] max_concurrent_trials limits how many "
                                   "trials run at once")
    if not scheduler.is_batch:
        raise ConfigError(f"scheduler.kind: a sweep runs as job arrays on "
                          f"{describe(scheduler_names(batch_only=True))}, got "
                          f"{spec.scheduler.kind!r}", file=spec.where("scheduler.kind"))
    array = scheduler.array_job(tasks, offset, max_concurrent)
    array_spec = copy.copy(spec)
    array_spec.scheduler = copy.copy(spec.scheduler)
    array_spec.scheduler.directives = {**spec.scheduler.directives, **array.directives}
    log = array.log_file
    prelude = [
        f"# this task runs one trial of the sweep: trial_<{offset} + array index>",
        f"HPCTRAIN_TRIAL_INDEX={array.index}",
    ] + array.prelude
    prelude += [
        f"printf -v HPCTRAIN_TRIAL_DIR '%s/trial_%05d' {shlex.quote(sweep_path)} "
        '"$HPCTRAIN_TRIAL_INDEX"',
    ]
    request = BatchRequest(array_spec, sweep_path, rerender=rerender)
    return scheduler.render(
        request, run_dir='"$HPCTRAIN_TRIAL_DIR"', log_file=log, prelude=prelude,
        batch_args=' --sweep-trial "$HPCTRAIN_TRIAL_INDEX"', spec_toml=spec.to_toml(),
        run_name=label)


def trial_job_id(kind: str, array_id: str, task: int, is_array: bool = True) -> str:
    """The id of one array task (the scheduler's :meth:`array_task_id`), or the job's own
    for a plain job."""
    return get_scheduler(kind).array_task_id(array_id, task) if is_array else array_id


def refuse_if_active(sweep: SweepDir, manifest: Dict[str, Any]) -> None:
    """Refuse a submission while an array of the sweep, or a trial's own job, is queued or
    running (a trial submitted twice would run in two jobs)."""
    queued = [(f"job array {a['job_id']}", a["scheduler"], a["job_id"])
              for a in manifest.get("arrays", [])]
    for t in manifest.get("trials", []):
        job = own_job(sweep, t["index"])
        if job:
            queued.append((f"{trial_id(t['index'])}'s own job {job['job_id']}",
                           job["scheduler"], job["job_id"]))
    for what, kind, job_id in queued:
        if array_active(kind, job_id):
            cancel = get_scheduler(kind).cancel_command
            raise ConfigError(
                f"run.name: the sweep {sweep.name!r} still has {what} queued or running "
                f"({sweep.path})",
                hint=f"wait for it (hpctrain sweep ... --follow), cancel it ({cancel} "
                     f"{job_id}), or pick another name")


def render_arrays(spec: JobSpec, sweep: "SweepDir", chunks: List[Tuple[int, List[int]]], *,
                  max_concurrent: Optional[int], rerender: str) -> List[str]:
    """The job array script of each ``(offset, tasks)`` chunk of
    :func:`split_arrays`, labelled with the trials it runs."""
    scripts = []
    for c, (offset, tasks) in enumerate(chunks):
        trials = [offset + t for t in tasks]
        label = (f"{sweep.name} (a sweep; this job array runs trials {array_ranges(trials)}"
                 + (f", array {c + 1} of {len(chunks)}" if len(chunks) > 1 else "") + ")")
        scripts.append(render_array(spec, sweep.path, offset, tasks,
                                    max_concurrent=max_concurrent, rerender=rerender,
                                    label=label))
    return scripts


def submit_arrays(sweep: SweepDir, spec: JobSpec, indices: Sequence[int], *,
                  prepare_trial: Callable[[int], None], max_concurrent: Optional[int],
                  rerender: str) -> List[Dict[str, Any]]:
    """Prepare the trials ``indices`` (run directory, payload, ``job.sh``), render their
    job arrays (split at the site's maximum array size; with ``max_concurrent`` the arrays
    run one after another, each at most ``max_concurrent`` tasks at once), submit them and
    record them in the manifest and in each trial's ``state.json``. Everything is rendered
    before anything is written or submitted."""
    kind = spec.scheduler.kind
    check_limits(spec)
    scheduler = get_scheduler(kind)
    manifest = sweep.read()
    submission = len({a.get("submission", 0) for a in manifest.get("arrays", [])})
    chunks = split_arrays(indices, max_array_size(spec))
    scripts = render_arrays(spec, sweep, chunks, max_concurrent=max_concurrent,
                            rerender=rerender)
    scheduler.check_available()
    refuse_if_active(sweep, manifest)
    for i in indices:
        prepare_trial(i)
    makedirs(os.path.join(sweep.path, "arrays"), modes_of(sweep.path)[0])
    records = []
    previous = None
    for c, ((offset, tasks), script) in enumerate(zip(chunks, scripts)):
        path = os.path.join(sweep.path, "arrays", f"array-{submission:03d}-{c:03d}.sh")
        atomic_write_bytes(path, script.encode(), sync=False, mode=sweep.script_mode)
        if previous is not None and max_concurrent:
            after = previous if not spec.scheduler.after else f"{spec.scheduler.after}:{previous}"
            job_id = scheduler.resubmit(path, after=after)
        else:
            job_id = scheduler.submit(path)
        previous = job_id
        is_array = scheduler.is_array(tasks)
        record = {"job_id": job_id, "scheduler": kind, "script": os.path.relpath(path, sweep.path),
                  "submission": submission, "offset": offset, "tasks": array_ranges(tasks),
                  "trials": [offset + t for t in tasks], "time": time.time()}
        records.append(record)
        with sweep.update() as m:
            m.setdefault("arrays", []).append(record)
            for t in tasks:
                m["trials"][offset + t].update(
                    status=PENDING, job_id=trial_job_id(kind, job_id, t, is_array))
        for t in tasks:
            run = RunDir(sweep.trial_path(offset + t))
            with run.update_state() as s:
                s.setdefault("name", run.name)
                s["status"] = PENDING
                s["scheduler"] = kind
                s.setdefault("submissions", []).append(
                    {"job_id": trial_job_id(kind, job_id, t, is_array), "scheduler": kind,
                     "time": time.time(), "script": record["script"], "array": job_id})
    return records


# --------------------------------------------------------------------------- shared by the
# Python route (Tuner.fit) and the job-file route (hpctrain sweep)
def trial_context(sweep: SweepDir, index: int) -> Dict[str, str]:
    """What a trial's ``get_context()`` says: the sweep's name as the experiment name,
    the trial's id (its directory name, as in ``sweep.json``) as its id and name."""
    return {"experiment_name": sweep.name, "trial_id": trial_id(index),
            "trial_name": trial_id(index)}


def prepare_batch_trial(trial: Run, sweep: SweepDir) -> None:
    """A trial's run directory for a batch job: payload, spec.toml and its own job.sh
    (the trial alone: what a resubmission after a stop submits)."""
    run = trial.run_dir
    run.create(trial.spec.run.share)
    with run.exclusive():
        trial.prepare()
        script = BatchRequest(trial.spec, run.path,
                              rerender=f"(a trial of the sweep {sweep.path})").materialize()
        atomic_write_bytes(run.job_script, script.encode(), sync=False, mode=run.script_mode)


@contextlib.contextmanager
def removed_on_failure(sweep: SweepDir, fresh: bool) -> Iterator[None]:
    """When the submission fails (an array refused, Ctrl-C): a sweep directory it created
    is removed again if no array was submitted yet (nothing is left behind); otherwise it
    stays, for the submitted arrays' tasks, and the user is told what runs and what not."""
    before = len(sweep.read().get("arrays", []))
    try:
        yield
    except BaseException:
        sent = sweep.read().get("arrays", [])[before:]
        if fresh and not sent:
            shutil.rmtree(sweep.path, ignore_errors=True)
        elif sent:
            trials = [i for a in sent for i in a["trials"]]
            progress_line(
                f"[hpctrain] the submission failed after {len(sent)} job array(s) "
                f"({', '.join(a['job_id'] for a in sent)}, trials {array_ranges(trials)}) "
                f"were submitted; they run. The sweep directory is kept: {sweep.path}\n"
                "  the other trials are submitted when the sweep runs again, after those "
                "arrays ended")
        raise


def at_a_time(n: int, gpus_each: int) -> str:
    """How many trials run here at once, in words."""
    return f"{n} at a time" + (" (their workers use GPUs: one trial at a time)"
                               if gpus_each and n == 1 else "")
