"""The sweep directory, and running its trials: here (one after another, or side by side
where cores allow) or as job arrays (one array task per trial).

```
<storage_path>/<sweep name>/
  sweep.json             the manifest: seed, search space, tune settings, and per trial its
                         id, config and status; the arrays submitted (written atomically,
                         under sweep.json.lock)
  arrays/array-S-C.sh    the array scripts of submission S (C: one per array after a split)
  trial_00000/ …         one normal run directory per trial (spec.toml, state.json,
                         result.json, checkpoints/, logs/, job.sh: the trial alone)
```
Each trial's ``state.json`` is the truth about it; the manifest's statuses are refreshed
from them (by the driver, and by each array task when it starts and ends).
"""
from __future__ import annotations

import contextlib
import copy
import os
import secrets
import shlex
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from filelock import FileLock

from ..errors import ConfigError
from ..schedulers.base import array_ranges  # noqa: F401 - (moved there) used here and by tuner
from hpctrain._internal.fsutil import atomic_write_bytes, atomic_write_json, read_json
from hpctrain._internal.rundir.layout import RunDir
from hpctrain._internal.trust import make_private_dir, makedirs, modes_of, share_of

if TYPE_CHECKING:  # (for the hints only)
    from hpctrain.spec import JobSpec

MANIFEST = "sweep.json"
FINISHED, FAILED, RUNNING, PENDING, INTERRUPTED = (
    "FINISHED", "FAILED", "RUNNING", "PENDING", "INTERRUPTED")


def trial_id(index: int) -> str:
    """``trial_00007``: the run directory of trial 7 under the sweep directory."""
    return f"trial_{index:05d}"


class SweepDir:
    """Paths and manifest of one sweep directory."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.path.abspath(os.fspath(path))

    name = property(lambda self: os.path.basename(self.path))
    manifest_file = property(lambda self: os.path.join(self.path, MANIFEST))
    #: the modes of what a sweep writes: those of its directory's share (private or group)
    file_mode = property(lambda self: modes_of(self.path)[1])
    script_mode = property(lambda self: modes_of(self.path)[2])

    @staticmethod
    def is_sweep(path: str | os.PathLike) -> bool:
        return os.path.isfile(os.path.join(os.fspath(path), MANIFEST))

    def exists(self) -> bool:
        return os.path.isfile(self.manifest_file)

    def trial_path(self, index: int) -> str:
        return os.path.join(self.path, trial_id(index))

    def read(self) -> Dict[str, Any]:
        return read_json(self.manifest_file, default={}) or {}

    @contextlib.contextmanager
    def update(self, timeout: float = 60) -> Iterator[Dict[str, Any]]:
        """Read, modify, write the manifest atomically under ``sweep.json.lock`` (waiting
        at most ``timeout`` s for it: :class:`filelock.Timeout`)."""
        # (checked every time: someone else's, or one others can write, is refused)
        make_private_dir(self.path, share=share_of(self.path), what="sweep directory")
        with FileLock(self.manifest_file + ".lock", timeout=timeout, mode=0o600):
            data = self.read()
            yield data
            data["updated"] = time.time()
            atomic_write_json(self.manifest_file, data, mode=self.file_mode)

    def set_trial(self, index: int, timeout: float = 60, **fields: Any) -> None:
        with self.update(timeout) as m:
            m["trials"][index].update(fields)

    def trial_status(self, index: int, manifest: Optional[Dict[str, Any]] = None) -> str:
        """The trial's status from its state.json, else what the manifest says."""
        run = RunDir(self.trial_path(index))
        if run.exists():
            status = run.read_state().get("status")
            if status:
                return status
        m = manifest if manifest is not None else self.read()
        return m["trials"][index].get("status", PENDING)

    def refresh(self) -> Dict[int, str]:
        """Every trial's status, written back to the manifest where it changed."""
        m = self.read()
        statuses = {t["index"]: self.trial_status(t["index"], m) for t in m.get("trials", [])}
        if any(m["trials"][i].get("status") != s for i, s in statuses.items()):
            with self.update() as fresh:
                for i, s in statuses.items():
                    fresh["trials"][i]["status"] = s
        return statuses


# --------------------------------------------------------------------------- the manifest
def open_manifest(sweep: SweepDir, *, space: Dict[str, Any], expand_fn: Callable[[int], List[Dict]],
                  fingerprint: str, num_samples: int, seed: Optional[int], tune: Dict[str, Any],
                  shape: str, space_tables: Any, where: str = "param_space",
                  file: Optional[str] = None) -> Dict[str, Any]:
    """The sweep's manifest: created with every trial's config (sampled with ``seed``, a
    fresh one recorded when None), or the existing one, whose trials are kept as they
    are (a re-run sees the same configs). A different search space in an existing sweep
    directory is refused, and so is a value JSON cannot hold (sweep.json records every
    config: a function or an object would come back as its repr)."""
    check_json(space_tables, where, file)
    if sweep.exists():
        m = sweep.read()
        if m.get("fingerprint") != fingerprint or (seed is not None and m.get("seed") != seed):
            raise ConfigError(
                f"{where}: the sweep {sweep.name!r} at {sweep.path} was made with another "
                f"search space, num_samples or seed", file=file,
                hint="pick another name for this sweep, or run the same space again to "
                     "finish the trials that did not finish")
        return m
    seed = secrets.randbelow(2 ** 31) if seed is None else seed
    configs = expand_fn(seed)
    from hpctrain._version import __version__

    with sweep.update() as m:
        m.update({"name": sweep.name, "created": time.time(), "hpctrain_version": __version__,
                  "seed": seed, "num_samples": num_samples, "fingerprint": fingerprint,
                  "param_space": space_tables, "config_shape": shape, **tune,
                  "trials": [{"index": i, "trial_id": trial_id(i), "config": c,
                              "status": PENDING} for i, c in enumerate(configs)],
                  "arrays": []})
    return sweep.read()  # as every later run sees it (tuples are lists in JSON)


def check_json(value: Any, key: str, file: Optional[str] = None) -> None:
    """Refuse what JSON cannot hold as it is: only None, booleans, numbers, strings, lists
    (tuples) and tables with string keys.

    >>> check_json({"lr": [0.1, 0.2], "opt": "adam"}, "param_space")
    >>> check_json({"act": {"grid_search": [max]}}, "param_space")
    Traceback (most recent call last):
    ...
    hpctrain.errors.ConfigError: param_space.act.grid_search[0]: expected a JSON value ...
    HINT: ...
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_json(v, f"{key}[{i}]", file)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigError(f"{key}: expected string keys (JSON), got {k!r}", file=file,
                                  hint="sweep.json records every trial's config as JSON")
            check_json(v, f"{key}.{k}", file)
        return
    raise ConfigError(
        f"{key}: expected a JSON value (number, string, boolean, list or table of those), "
        f"got {type(value).__name__} {value!r}", file=file,
        hint="sweep.json records every trial's config, and a re-run or Tuner.restore reads "
             "it back: search over names or numbers and look the object up in the training "
             "function (e.g. tune.choice([\"adam\", \"sgd\"]))")


def to_run(sweep: SweepDir, manifest: Dict[str, Any], retry_failed: bool = False) -> List[int]:
    """The trials that did not finish (FAILED ones only with ``retry_failed``)."""
    skip = {FINISHED} if retry_failed else {FINISHED, FAILED}
    return [t["index"] for t in manifest["trials"]
            if sweep.trial_status(t["index"], manifest) not in skip]


def train_loop_config(base: Optional[Dict[str, Any]], config: Dict[str, Any], shape: str
                      ) -> Dict[str, Any]:
    """A trial's train_loop_config: its sampled config merged over the trainer's."""
    from .search import deep_update

    update = config.get("train_loop_config", {}) if shape == "train_loop_config" else config
    return deep_update(base or {}, update)


# --------------------------------------------------------------------------- here
class _Interrupted(Exception):
    """Raised from a trial's tick to stop it (Ctrl-C, SIGTERM)."""


def local_concurrency(num_workers: int, cpus_per_worker: Optional[int],
                      max_concurrent: Optional[int], gpus_per_worker: int = 0) -> int:
    """How many trials run side by side here: as many as the cores hold (each trial
    needs ``num_workers`` × ``cpus_per_worker`` cores), at most ``max_concurrent``; one
    at a time when the workers use GPUs (each trial's ranks bind to GPUs by their local
    rank, from GPU 0: trials side by side would share those).

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
    n = max(1, cores // max(1, num_workers * (cpus_per_worker or 1)))
    return min(n, max_concurrent) if max_concurrent else n


def run_local(sweep: SweepDir, indices: Sequence[int], make_run: Callable[[int], Any], *,
              concurrency: int, verbose: int = 1, warning_signal: str = "USR1") -> bool:
    """Run the trials ``indices`` here, ``concurrency`` at a time (``make_run(index)``:
    the trial's :class:`~hpctrain.run.Run`). Ctrl-C (or SIGTERM,
    SIGHUP) stops every running trial (each resumes from its latest checkpoint when the
    sweep runs again) and re-raises KeyboardInterrupt. The scheduler's warning
    (``warning_signal``: a sweep run inside a batch job) stops the running trials cleanly
    at a checkpoint (STOPPED) and starts no more; returns True then, else False."""
    from concurrent.futures import ThreadPoolExecutor, wait

    from hpctrain._internal.driver.progress import user_metrics
    from hpctrain._internal.allocation.recovery import EARLY, THREADED

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
                print(f"[hpctrain] {trial_id(index)} {status} ({len(done)} of {len(indices)})"
                      + (f", stopped early ({why})" if why else "")
                      + (f": {shown}" if shown else ""), file=sys.stderr, flush=True)

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
        print(f"[hpctrain] sweep {sweep.name} stopped ({warned[0]}): {len(left)} trial(s) "
              "did not finish; running the sweep again continues them from their latest "
              "checkpoints", file=sys.stderr, flush=True)
    return bool(warned)


def stopped_by(run: RunDir) -> Dict[str, Any]:
    """``{"stopped_by": why}`` for a trial its scheduler or a stopping criterion ended
    early (what sweep.json records beside its status), else {}."""
    why = run.read_state().get("stopped_by") if run.exists() else None
    return {"stopped_by": why} if why else {}


def tell_search(sweep: SweepDir, index: int, status: str) -> None:
    """A trial ended: its search algorithm (if any) learns how it did."""
    from ._control import trial_ended

    try:
        trial_ended(sweep.path, index, status)
    except Exception as e:  # noqa: BLE001 - the trial's own result stands
        print(f"[hpctrain] WARNING: {trial_id(index)}'s result was not told to the search "
              f"algorithm ({type(e).__name__}: {e})", file=sys.stderr, flush=True)


def _last_row(run: RunDir) -> Dict[str, Any]:
    from hpctrain._internal.rundir.layout import read_results

    rows = read_results(run.result_file)
    return rows[-1] if rows else {}


@contextlib.contextmanager
def _sweep_signals(warning_signal: str, on_warning: Callable[[str], None]) -> Iterator[None]:
    """A local sweep's signals (main thread only; the trials' supervisors run in other
    threads, where none can be installed): the warning signal calls ``on_warning``;
    SIGTERM/SIGHUP stop the sweep like Ctrl-C, as they stop a single run."""
    from hpctrain._internal.allocation.recovery import stop_signals

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
    from ..schedulers import scheduler_class

    return scheduler_class(spec.scheduler.kind).max_array_size


def render_array(spec: JobSpec, sweep_path: str, offset: int, tasks: Sequence[int], *,
                 max_concurrent: Optional[int], rerender: str, label: str) -> str:
    """The batch script of one job array: task ``t`` runs trial ``offset + t`` of the sweep
    (its run directory ``trial_NNNNN``) with the spec's scaling, scheduler and recovery
    settings. Slurm: ``#SBATCH --array=<tasks>%<max_concurrent>``; PBS: ``#PBS -J lo-hi``
    (and ``-W max_run_subjobs``; ``-J`` takes no lists, so the subjobs between the trials
    of a re-run end at once: the script lists its trials), or a plain job for a single
    trial (PBS arrays need two indices or more)."""
    from ..schedulers import BatchRequest, get_scheduler

    scheduler = get_scheduler(spec.scheduler.kind)
    for key in scheduler.array_directive_keys:
        if key in spec.scheduler.directives:
            raise ConfigError(f"scheduler.directives.{key}: a sweep makes its own job arrays",
                              file=spec.where(f"scheduler.directives.{key}"),
                              hint="remove it; [sweep] max_concurrent_trials limits how many "
                                   "trials run at once")
    if not scheduler.is_batch:
        from ..schedulers import describe, scheduler_names

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
    from ..schedulers import get_scheduler

    return get_scheduler(kind).array_task_id(array_id, task) if is_array else array_id


def array_active(kind: str, job_id: str) -> bool:
    """True while any task of the array (or the job) is queued or running."""
    from ..schedulers import get_scheduler

    return get_scheduler(kind).array_active(job_id)


def own_job(sweep: SweepDir, index: int) -> Optional[Dict[str, Any]]:
    """The latest submission of trial ``index`` when it is a job of the trial's own (a
    resubmission after a stop: PBS), not an array task; else None."""
    subs = RunDir(sweep.trial_path(index)).read_state().get("submissions") or []
    return subs[-1] if subs and "array" not in subs[-1] else None


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
            from ..schedulers import get_scheduler

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
    from ..schedulers import get_scheduler
    from ..sites import check_limits

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


def active(sweep: SweepDir, manifest: Dict[str, Any], statuses: Dict[int, str]) -> bool:
    """True while the sweep's latest arrays, or a trial's own resubmitted job, are queued
    or running."""
    arrays = manifest.get("arrays", [])
    latest = max((a.get("submission", 0) for a in arrays), default=None)
    if any(array_active(a["scheduler"], a["job_id"]) for a in arrays
           if a.get("submission", 0) == latest):
        return True
    for i, status in statuses.items():
        if status in (FINISHED, FAILED, "STOPPED"):
            continue
        job = own_job(sweep, i)  # (REQUEUED, or RUNNING in it)
        if job and array_active(job["scheduler"], job["job_id"]):
            return True
    return False


def follow(sweep: SweepDir, *, verbose: int = 1, poll_s: float = 2.0,
           requeue_wait_s: float = 180.0) -> Dict[int, str]:
    """Show each trial's status changes until no job of the sweep is queued or running;
    return the statuses then. Ctrl-C detaches (the jobs run on) and re-raises."""
    seen: Dict[int, str] = {}
    waited = 0.0
    try:
        while True:
            statuses = sweep.refresh()
            for i, s in sorted(statuses.items()):
                if seen.get(i) != s and verbose >= 1 and (i in seen or s != PENDING):
                    print(f"[hpctrain] {trial_id(i)}: {s}", file=sys.stderr, flush=True)
                seen[i] = s
            if not active(sweep, sweep.read(), statuses):
                # a task that requeued itself: its next instance shows up soon
                if any(s == "REQUEUED" for s in statuses.values()) and waited < requeue_wait_s:
                    waited += poll_s
                    time.sleep(poll_s)
                    continue
                break
            waited = 0.0
            time.sleep(poll_s)
    except KeyboardInterrupt:
        print(f"\n[hpctrain] detached; the sweep's jobs keep running (nothing was cancelled)."
              f"\n  its results so far:  hpctrain results {sweep.path}", file=sys.stderr,
              flush=True)
        raise
    return sweep.refresh()
