"""``Run``: one run, the one owner of what a run is and does.

A :class:`Run` is data: the resolved :class:`~hpctrain.spec.JobSpec`, the payload its
workers load (:class:`~hpctrain.rundir.payload.WorkerPayload`: the training
function, its config, the backend…) and the :class:`RunOptions` of this one run. Three
constructors make one, and they are the only code that knows where those come from:

- :meth:`Run.for_trainer` — a trainer's configs (``fit()``, ``submit()``, a sweep's
  trials, the Ray 1.x API); the only code that reads a trainer's attributes;
- :meth:`Run.from_spec` — a job file's spec (``hpctrain run/submit/render``, the batch
  step of a hand-submitted script, a job file's sweep);
- :meth:`Run.at` — an existing run directory (``Trainer.restore``, the batch step, a
  sweep's array task): payload, spec and callbacks read once.

::

    from hpctrain import Run

    run = Run.for_trainer(trainer)   # or Run.from_spec(load_job_spec("job.toml"))
    run.prepare()                    # the run directory: spec.toml, the payload, callbacks
    status = run.run_here()          # supervise the attempts here: FINISHED, FAILED, STOPPED
    result = run.result(status)      # the Result (TrainingFailedError as fit() raises it)

    job = run.submit()               # or as a batch job: prepare, render, submit
    result = run.result(run.follow())

:meth:`Run.run_here` is the one place that wires the supervisor: a local run with no
argument, the batch step and a sweep's array task with their
:class:`~hpctrain.allocation.job.Allocation`.
"""
from __future__ import annotations

import copy
import itertools
import json
import os
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

from hpctrain.allocation.attempts import supervise
from hpctrain.allocation.interactive import interactive_allocation
from hpctrain.allocation.job import gpu_binding_env
from hpctrain.allocation.metrics import MetricsFile
from hpctrain.allocation.supervisor import FINISHED, AttemptPlan, Supervisor
from hpctrain.allocation.tracking import CallbackRunner, load_callbacks, save_callbacks
from hpctrain.allocation.validation import ValidationJobs, validation_spec
from hpctrain.common.formats import versioned_spec
from hpctrain.common.fsutil import atomic_write_bytes, atomic_write_json, read_json
from hpctrain.common.log import get_logger, progress_line
from hpctrain.common.registry import (backend_entry, describe, is_local_path, load,
                                              scheduler_names, storage_for)
from hpctrain.common.trust import (make_private_dir, read_trusted, share_of,
                                           trusted_pythonpath)
from hpctrain.driver import submission
from hpctrain.driver.progress import Progress
from hpctrain.rundir.checks import ensure_storage_dir
from hpctrain.rundir.layout import RunDir, existing_run
from hpctrain.rundir.payload import WorkerPayload
from hpctrain.rundir.resume import check_resume

from .backends import backend_options, check_installed
from .config import DataConfig, RunConfig, default_storage_path
from .errors import ConfigError
from .job import Job
from .launchers import launcher_for
from .launchers.inprocess import InProcessLauncher
from .result import Result, result_or_raise
from .sites import derive_nodes
from .spec import JobSpec, load_site, merge_layers, resolved_spec, spec_from_dict
from .user_callback import wants_rank_results
from .userconfig import default_share, load_center_defaults, load_user_defaults

_LOCAL_RUNS = itertools.count()

#: What the job script says about rendering it again, for a run submitted from Python.
FROM_PYTHON = "(submitted from Python; `hpctrain render` renders job files)"

_warn = get_logger("run").warning


class _Placement(NamedTuple):
    """Where a run's ranks run (Run._placement): the launcher, what their environment
    adds, the job's id, the warning (its lead, the supervisor's own timer), and a local
    run's progress panel and worker-line sink."""
    launcher: Any
    extra_env: Dict[str, str]
    job_id: str
    warning_s: float
    warn_at: Optional[float]
    progress: Optional[Progress] = None
    on_line: Optional[Callable[[int, str], None]] = None


@dataclass
class RunOptions:
    """How one run goes, beside its spec and payload (the defaults are ``fit()``'s).

    :param path: the run directory, given explicitly: the run of ``Trainer.restore``, a
        batch job's, a sweep trial's. It is continued as it is: neither refused when it
        finished nor checked against its earlier spec. None: ``RunConfig``'s
        ``storage_path``/``name``.
    :param local_only: run here, whatever scheduler the spec names (``hpctrain run``, a
        sweep's trials inside an allocation).
    :param force_resume: continue a run of that name although its spec changed
        (``hpctrain run/submit --force``).
    :param trial: a sweep trial's ``experiment_name``, ``trial_id`` and ``trial_name``,
        for its workers' ``get_context()``.
    :param per_rank_results: every rank's reported metrics are kept, not rank 0's alone
        (the seed-era API).
    :param keep_return_values: every rank's return value is kept (the seed-era ``run()``
        returns them).
    :param first_checkpoint_index: the number of the first checkpoint (the seed-era API
        numbers from 1, as Ray 1.x did).
    :param echo_worker_output: print the ranks' output here; None: when ``verbose >= 1``.
    :param resume_from: the checkpoint the run starts from while it has none of its own
        (``resume_from_checkpoint=``'s path); kept in ``state.json``, so that the batch
        step and a restore start from it too.
    """

    path: Optional[str] = None
    local_only: bool = False
    force_resume: bool = False
    trial: Optional[Dict[str, str]] = None
    per_rank_results: bool = False
    keep_return_values: bool = False
    first_checkpoint_index: int = 0
    echo_worker_output: Optional[bool] = None
    resume_from: Optional[str] = None


class Run:
    """One run: its resolved spec (:attr:`spec`), its workers' payload
    (:attr:`payload`), its options (:attr:`options`) and its run directory
    (:attr:`path`, :attr:`run_dir`).

    :param spec: the resolved :class:`~hpctrain.spec.JobSpec`; ``spec.run`` is the
        run's ``RunConfig`` (its callbacks, failure and checkpoint configs, verbosity).
    :param payload: what every worker loads.
    :param options: the run's :class:`RunOptions`.

    The run directory is fixed when the Run is made: :attr:`RunOptions.path`, else
    ``spec.run.storage_path``/``spec.run.name`` (a spec without a name gets a fresh
    timestamped one then, kept in ``spec.run.name``). Build one with :meth:`for_trainer`,
    :meth:`from_spec` or :meth:`at`.

    What a user calls: :meth:`fit`, :meth:`submit`, :meth:`render`, :meth:`result` and
    the attributes :attr:`spec`, :attr:`path`, :attr:`name`. The rest —
    :attr:`payload`, :meth:`prepare`, :meth:`run_here`, :meth:`follow`,
    :meth:`check_datasets`, :attr:`run_dir`, :attr:`options` — is the plumbing of
    hpctrain's own entry points (the batch step, the CLI, a Tuner's trials): public
    so that they can reach it, but no stable API; it may change in any release.
    """

    def __init__(self, spec: JobSpec, payload: Optional[WorkerPayload],
                 options: Optional[RunOptions] = None):
        self.spec = spec
        """The resolved :class:`~hpctrain.spec.JobSpec`."""
        self.options: RunOptions = options if options is not None else RunOptions()
        """The run's options."""
        if self.options.path:  # a directory, or a storage kind's location (s3://…)
            path = self.options.path if not is_local_path(self.options.path) \
                else os.path.abspath(self.options.path)
        else:
            rc = spec.run
            if rc.name is None:
                trial = (payload.trial or {}) if payload is not None else {}
                trainer = trial.get("trainer") or "run"
                rc.name = f"{trainer}_{time.strftime('%Y-%m-%d_%H-%M-%S')}_{os.getpid() % 10000:04d}"
            storage = os.path.expandvars(os.path.expanduser(
                rc.storage_path or default_storage_path()))
            # posix: <storage_path>/<name>; another storage kind: the run's location there
            path = storage_for(storage).run_location(storage, rc.name)
        self.run_dir = RunDir(path)
        """The run directory (its files and ``state.json``; its storage kind's)."""
        if not self.options.path and spec.run.storage_filesystem is not None:
            self.run_dir.storage.filesystem_object = spec.run.storage_filesystem
        self.path: str = self.run_dir.path
        """The run directory's absolute path (the control directory of a run whose
        storage kind is not posix)."""
        self._payload = payload
        if payload is not None:
            payload.run_name = self.name

    def __repr__(self) -> str:
        return f"Run({self.path!r})"

    @property
    def payload(self) -> WorkerPayload:
        """Plumbing (see the class docstring). What every worker loads (its ``run_name`` is the run directory's). A run read
        back by the batch step (:meth:`at` with the job script's spec) loads it from the
        run directory only when asked: unpickling it imports the user's modules, which
        the ranks do, not the batch step."""
        if self._payload is None:
            self._payload = WorkerPayload.load(self.run_dir)
            self._payload.run_name = self.name
        return self._payload

    # -- the three constructors ---------------------------------------------------------
    @classmethod
    def for_trainer(cls, trainer: Any, options: Optional[RunOptions] = None) -> "Run":
        """The run of ``trainer`` (a :class:`~hpctrain.trainer.DataParallelTrainer`):
        its configs resolved over its site and the user's defaults. ``options``:
        default, those of the run ``restore()`` continues (its directory…), else the
        defaults."""
        restored = trainer.restored
        if options is None:
            options = copy.copy(restored.options) if restored is not None else RunOptions()
        t, rc = trainer, trainer.run_config
        spec = spec_of_trainer(trainer)
        if t.resume_from_checkpoint is not None:
            options = replace(options, resume_from=t.resume_from_checkpoint.path)
        payload = WorkerPayload(
            train_func=t.train_loop_per_worker,
            train_loop_config=t.train_loop_config,
            backend=spec.backend,
            backend_config=t.backend_config,
            scaling=t.scaling_config,
            checkpoint_config=rc.checkpoint_config,
            run_name="",
            # a UserCallback's after_report sees every rank's metrics
            per_rank_results=options.per_rank_results or wants_rank_results(rc.callbacks),
            keep_return_values=options.keep_return_values,
            datasets=t.datasets,
            datasets_to_split=t.dataset_config.datasets_to_split,
            metadata=t.metadata,
            trial={"trainer": type(t).__name__, **(options.trial or {})},
            mtbi_s=rc.failure_config.mtbi_s,
            validation=getattr(t, "validation_config", None))
        return cls(spec, payload, options)

    @classmethod
    def from_spec(cls, spec: JobSpec, options: Optional[RunOptions] = None) -> "Run":
        """The run a job file's spec describes. The entry point is checked here without
        running user code (each worker imports it); the datasets' names too."""
        options = options if options is not None else RunOptions()
        if spec.entrypoint is None:
            raise ConfigError("job.entrypoint: expected \"module:function\" or "
                              "\"file.py:function\", got nothing", file=spec.source)
        spec.entrypoint.check()
        entry = backend_entry(spec.backend)
        datasets: Dict[str, Any] = {}
        if spec.datasets:  # hpctrain.data needs numpy: only a spec with datasets imports it
            from .data import as_datasets

            datasets = as_datasets(spec.datasets)
        spec.data_config.check_names(list(datasets),
                                     file=spec.where("data.datasets_to_split"))
        rc = spec.run
        payload = WorkerPayload(
            train_func=spec.entrypoint,
            train_loop_config=dict(spec.config),
            backend=spec.backend,
            backend_config=load(entry.config)(**spec.backend_options),
            scaling=spec.scaling,
            checkpoint_config=rc.checkpoint_config,
            run_name="",
            per_rank_results=options.per_rank_results,
            keep_return_values=options.keep_return_values,
            datasets=datasets,
            datasets_to_split=spec.data_config.datasets_to_split,
            metadata={},
            trial={"trainer": entry.trainer.partition(":")[2], **(options.trial or {})},
            mtbi_s=rc.failure_config.mtbi_s)
        return cls(spec, payload, options)

    @classmethod
    def at(cls, path: str | os.PathLike, *, spec: Optional[JobSpec] = None,
           caller: str = "Run.at") -> "Run":
        """The run in the existing run directory ``path``, read once: its state (the
        checkpoint it starts from), its tracking callbacks, its spec (``spec.toml``;
        or ``spec``, the one a job script carries) and its payload (with ``spec`` given,
        only when asked: see :attr:`payload`). A directory without a payload raises
        :class:`~hpctrain.errors.RunNotFoundError` naming ``caller``."""
        run = RunDir(path)
        if not os.path.isfile(run.payload_file):  # (say what is wrong with the directory)
            existing_run(path, caller, restorable=True)
        options = RunOptions(path=run.path, resume_from=run.read_state().get("resume_from"))
        payload = None
        if spec is None:  # a restore, in the driver: its modules import here
            payload = WorkerPayload.load(run)
            spec = spec_at(run, payload)
            options.trial = {k: v for k, v in (payload.trial or {}).items()
                             if k != "trainer"} or None
            options.per_rank_results = payload.per_rank_results
            options.keep_return_values = payload.keep_return_values
        spec.run.callbacks = load_callbacks(run)
        return cls(spec, payload, options)

    # -- what the run is -------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The run's name: its directory's."""
        return os.path.basename(self.path)

    @property
    def here(self) -> bool:
        """True when the run runs in this process (the local scheduler, or
        ``local_only``); False when it runs as a batch job."""
        return self.spec.scheduler.kind == "local" or self.options.local_only

    @property
    def share(self) -> Optional[str]:
        """Who besides the user reads the run directory: ``run.share``, else the user
        config's ``share``; None keeps an existing directory's (private when new)."""
        return self.spec.run.share or default_share()

    def check_datasets(self) -> None:
        """Open each dataset's file and check its columns before anything is written
        (errors of a job file's dataset name the file)."""
        for name, source in self.payload.datasets.items():
            try:
                source.check(name)
            except ConfigError as e:
                if self.spec.source is None or e.file is not None:
                    raise
                raise ConfigError(e.message, file=self.spec.where(f"datasets.{name}"),
                                  hint=e.hint) from None

    # -- the run directory ---------------------------------------------------------------
    def prepare(self) -> RunDir:
        """Plumbing (see the class docstring): create (or update) the run directory: ``spec.toml``, the payload, the tracking
        callbacks and the driver's ``sys.path`` additions. Refuses a finished run of the
        same name, and a run whose spec changed in a way that cannot continue (unless
        :attr:`RunOptions.path` or :attr:`RunOptions.force_resume`). Callers that run or
        submit it hold ``run_dir.exclusive()`` around this and what follows."""
        run, explicit = self.run_dir, self.options.path is not None
        state = run.read_state() if run.exists() else {}
        if state.get("status") == FINISHED and not explicit:
            raise ConfigError(
                f"run.name: a finished run named {self.name!r} already exists at {run.path}",
                hint="pick another name, or leave run.name unset for a fresh timestamped one")
        if run.exists() and not explicit and not self.options.force_resume:
            check_resume(run.path, run.spec_file, self.spec.to_toml_dict(), self.name)
        share = self.share
        if self.options.trial:  # a sweep's directory: checked, and shared as its trials are
            sweep = os.path.dirname(run.path)
            make_private_dir(sweep, share=share or share_of(sweep), what="sweep directory")
        run.create(share)
        atomic_write_bytes(run.spec_file, versioned_spec(self.spec.to_toml()).encode(),
                           sync=False, mode=run.file_mode)
        self.payload.save(run)
        save_callbacks(run, self.spec.run.callbacks)
        validation = getattr(self.payload, "validation", None)
        if validation is not None:  # what starting a validation needs, without unpickling
            settings = {"ray_remote_kwargs": validation.ray_remote_kwargs,
                        "scheduler": validation.scheduler}
            if self.spec.scheduler.kind != "local":  # a key the scheduler lacks: now
                validation_spec(self.spec, settings)
            run.makedirs(os.path.dirname(run.validation_file("settings", "config")))
            atomic_write_json(run.validation_file("settings", "config"), settings,
                              sync=False, mode=run.file_mode)
        if self.options.resume_from:
            with run.update_state() as s:
                s["resume_from"] = self.options.resume_from
        # The driver's sys.path additions, for a batch job to import what the payload
        # pickled by reference (read before the payload is unpickled).
        atomic_write_json(run.driver_file, {"pythonpath": trusted_pythonpath(
            driver_pythonpath()["PYTHONPATH"], warn=_warn)}, sync=False, mode=0o600)
        return run

    # -- here ------------------------------------------------------------------------------
    def run_here(self, allocation: Any = None, *,
                 on_tick: Optional[Callable[[], None]] = None) -> str:
        """Supervise the prepared run's attempts in this process to the end; return its
        status (FINISHED, FAILED, STOPPED after a warning signal, REQUEUED).

        Without ``allocation`` (a local run): shows progress as ``RunConfig.verbose``
        says, handles SIGTERM/SIGHUP (the ranks stop, KeyboardInterrupt) and the warning
        signal (the ranks stop at a checkpoint); nothing can requeue it.
        With an :class:`~hpctrain.allocation.job.Allocation` (the batch step, a
        sweep's array task): the spec's launcher over the job's nodes, the job's id, its
        warning (the scheduler's signal or the supervisor's own timer) and a requeue
        after a clean stop where the scheduler can. ``on_tick`` is called with the
        supervisor's every poll (raise from it to stop the run). The tracking callbacks
        run beside the supervisor either way."""
        run, spec = self.run_dir, self.spec
        rc = spec.run
        fc = rc.failure_config
        tracking = CallbackRunner(run, rc.callbacks)
        ticks = [tracking.tick] + ([on_tick] if on_tick else [])
        where = self._placement(allocation)
        if where.progress is not None:
            ticks.insert(0, where.progress.tick)
        extra_env = where.extra_env

        metrics = MetricsFile(run, spec.scaling.num_workers)  # for operators (Prometheus)
        ticks.append(metrics.tick)
        validations = None
        settings = read_json(run.validation_file("settings", "config"))
        if settings:  # the trainer's ValidationConfig (prepare() wrote what jobs need)
            validations = ValidationJobs(run, spec, settings,
                                         batch=allocation is not None and allocation.is_batch,
                                         env=extra_env)
            ticks.append(validations.tick)

        def tick() -> None:
            for t in ticks:
                t()

        plan = AttemptPlan(
            spec.scaling.num_workers, where.job_id, failure=fc,
            checkpoint=spec.run.checkpoint_config, warning_s=where.warning_s,
            warn_at=where.warn_at, ends_at=None if allocation is None else allocation.ends_at,
            initial_checkpoint=self.options.resume_from,
            first_checkpoint_index=self.options.first_checkpoint_index, extra_env=extra_env)
        sup = Supervisor(run, plan, launcher=where.launcher, on_line=where.on_line,
                         on_tick=tick)
        try:
            if allocation is None:
                # nothing here can requeue a local run: a clean stop ends it STOPPED
                return supervise(run, sup, fc, tracking=tracking,
                                 on_close=where.progress.close)
            return supervise(run, sup, fc, tracking=tracking, pending=allocation.pending,
                             requeue=lambda: allocation.requeue(run),
                             can_requeue=allocation.can_requeue)
        finally:
            metrics.write()  # the run's end state
            if validations is not None:
                # the last checkpoints' validations start now; a local run waits for
                # its own (as Ray's fit() does), a batch job leaves them to their jobs
                if validations.batch:
                    validations.tick(force=True)
                else:
                    validations.wait()

    def _placement(self, allocation: Any) -> "_Placement":
        """Where the ranks run and how they are told: a local run here (its progress
        panel; the allocation started by hand around it, inside salloc / qsub -I), or
        the batch job's allocation."""
        run, spec, rc = self.run_dir, self.spec, self.spec.run
        if allocation is not None:
            extra_env = allocation_pythonpath(run)
            extra_env.update(gpu_binding_env(spec))
            return _Placement(launcher_for(spec, run_path=run.path), extra_env,
                              allocation.job_id, allocation.warning_s, allocation.warn_at)
        # started by hand inside salloc / qsub -I: the allocation's nodes, its launcher
        inside = interactive_allocation(spec) if spec.scaling.num_workers else None
        extra_env = driver_pythonpath()
        if inside is not None:
            launcher = launcher_for(inside.spec, allocation_kind=inside.kind, run_path=run.path)
            extra_env.update(gpu_binding_env(spec))
            if rc.verbose >= 1:
                progress_line(f"[hpctrain] {inside.describe(launcher.name)}", stdout=True)
        elif spec.scaling.num_workers == 0:  # local mode: in this process
            launcher = InProcessLauncher()
        else:
            launcher = launcher_for(spec, here=True, run_path=run.path)
            if launcher.name != "local":
                extra_env.update(local_mpi_env())
        progress = Progress(run, verbose=rc.verbose, echo=self.options.echo_worker_output)
        # unique per run, also for trials side by side in one process (a sweep): the
        # job id seeds the derived rendezvous ports of MPI-launched ranks
        job_id = f"local-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{next(_LOCAL_RUNS)}"
        return _Placement(launcher, extra_env, job_id, rc.failure_config.warning_s, None,
                          progress, progress.worker_line)

    def fit(self) -> Result:
        """Run to the end (here, or as a batch job that is followed) and return the
        Result; raises :class:`~hpctrain.TrainingFailedError` when the run failed."""
        if not self.here:
            job = self.submit()
            if self.spec.run.verbose >= 1:
                progress_line(f"[hpctrain] submitted {job.scheduler} job {job.job_id}; run "
                              f"directory {self.path}", stdout=True)
            return self.result(self.follow())
        self.check_datasets()  # open each data file before anything is written
        interactive_allocation(self.spec)  # inside salloc: a spread it cannot hold, refused now
        check_installed(self.spec.backend)  # before anything is written, not after every rank failed
        ensure_storage_dir(os.path.dirname(self.path), self.spec)
        self.run_dir.create(self.share)  # refuses another user's directory first
        with self.run_dir.exclusive():  # refuse a second live run of this directory first
            self.prepare()
            status = self.run_here()
        return self.result(status)

    # -- as a batch job ----------------------------------------------------------------------
    def render(self, rerender: str = FROM_PYTHON) -> Tuple[Any, str]:
        """The :class:`~hpctrain.schedulers.BatchRequest` and the job script a submission
        would submit, checked against the site's limits; writes nothing."""
        return submission.render(self.path, self.spec, rerender)

    def submit(self, rerender: str = FROM_PYTHON) -> "Job":
        """Prepare the run directory, submit its job script and return the
        :class:`~hpctrain.job.Job` at once. Needs a batch scheduler. The datasets' files
        are checked first. ``rerender``: what the script says about rendering it again."""
        if self.spec.scheduler.kind == "local":
            raise ConfigError("scheduler: submit() needs a batch scheduler, got \"local\"",
                              hint=f"give scheduler= {describe(scheduler_names(batch_only=True))}"
                                   ' or site="NAME"; fit() runs a local run here')
        self.check_datasets()
        sub = submission.submit(self.path, self.spec, self.prepare, rerender=rerender)
        return Job(sub.run_path)

    def follow(self, verbose: Optional[int] = None) -> str:
        """Show the submitted run's progress until its jobs ended; return its status
        (FINISHED, FAILED, STOPPED, or ``JOB_<STATE>`` when the job ended first). Ctrl-C
        detaches (the job runs on) and re-raises KeyboardInterrupt."""
        if verbose is None:
            verbose = self.spec.run.verbose
        return submission.follow(self.path, verbose=verbose)

    # -- the end ---------------------------------------------------------------------------
    def result(self, status: Optional[str] = None) -> Result:
        """The run's :class:`~hpctrain.Result`, as ``fit()`` returns it: raises
        :class:`~hpctrain.TrainingFailedError` when it failed (or its job ended before
        it did) and :class:`~hpctrain.TrainingStoppedError` when it stopped without a
        requeue. ``status``: what :meth:`run_here` or :meth:`follow` returned; default:
        the status in ``state.json``."""
        if status is None:
            status = self.run_dir.read_state().get("status", "")
        if self.here:
            return result_or_raise(self.path, status)

        return submission.result_of(self.path, status)


def spec_of_trainer(trainer: Any) -> JobSpec:
    """The resolved :class:`~hpctrain.spec.JobSpec` of a trainer's Python configs,
    layered over its site config (``site=``), the user's defaults and, for a restored
    batch run, the ``[setup]``/``[env]`` it was submitted with. The Python objects stay
    authoritative for what the workers run (``spec.run`` is the trainer's RunConfig)."""
    t = trainer
    spec = JobSpec(entrypoint=t.train_loop_per_worker if hasattr(
        t.train_loop_per_worker, "resolve") else None,
        backend=t.backend_name, scaling=t.scaling_config, run=t.run_config,
        config=dict(t.train_loop_config or {}),
        backend_options=backend_options(t.backend_config),
        scheduler=t.scheduler, site=t.site, datasets=dict(t.datasets),
        data_config=t.dataset_config)
    if t.site is None and t.scheduler.kind == "local":
        return spec
    layers = load_center_defaults().layer(storage=False)  # the center's account
    site = None
    if t.site is not None:
        site = load_site(t.site, key="site", file="TorchTrainer(site=...)")
        layers.append((site.layer, site.path))
    layers.extend(load_user_defaults().layer(storage=False))  # the user's account
    restored = t.restored
    if restored is not None and t.scheduler.kind != "local":
        data = restored.spec.to_toml_dict()
        earlier = {k: data[k] for k in ("setup", "env") if data.get(k)}
        if earlier:
            layers.append((earlier, restored.run_dir.spec_file))
    data = spec.to_toml_dict()
    if t.site is not None and t.scheduler.kind == "local":
        data.get("scheduler", {}).pop("kind", None)  # site="x" alone: the site's scheduler
    layers.append((data, None))
    origins: Dict[str, str] = {}
    merged = merge_layers(layers, origins)
    if site is not None:
        merged["site"] = site.name
    merged.setdefault("job", {}).pop("entrypoint", None)
    resolved = spec_from_dict(merged, file="the trainer's configs", origins=origins)
    resolved.entrypoint = spec.entrypoint
    resolved.site_config = site
    if site is not None:

        derive_nodes(resolved)
    resolved.run = t.run_config
    return resolved


def spec_at(run: RunDir, payload: WorkerPayload) -> JobSpec:
    """The spec a run directory was started with (``spec.toml``, read once through the
    checked loader; a damaged one raises, naming it). The training function, its config
    and the datasets are the payload's: the spec's ``[job]``/``[config]`` are not
    needed to continue."""
    data = run.read_spec()
    if data is None:  # (a run directory older than spec.toml: the payload alone)
        return JobSpec(backend=payload.backend, scaling=payload.scaling,
                       run=RunConfig(name=run.name, storage_path=os.path.dirname(run.path),
                                     checkpoint_config=payload.checkpoint_config),
                       data_config=DataConfig(payload.datasets_to_split))
    data = dict(data)
    data.pop("format", None)
    data.pop("datasets", None)
    data.pop("data", None)
    data.get("job", {}).pop("entrypoint", None)
    data.get("job", {}).pop("entrypoint_dir", None)
    spec = resolved_spec(data, file=run.spec_file, base_dir=run.path)
    spec.run.name = run.name
    spec.run.storage_path = os.path.dirname(run.path)
    spec.run.checkpoint_config = payload.checkpoint_config
    spec.datasets = dict(payload.datasets)
    spec.data_config = DataConfig(payload.datasets_to_split)
    return spec


def allocation_pythonpath(run: RunDir) -> Dict[str, str]:
    """``PYTHONPATH`` for the ranks of a batch job: the job's directory (``python -m``
    put it first on sys.path, which the job script's ``PYTHONSAFEPATH=1`` no longer
    does; only when nobody else can write it), after the submitting process's own
    additions (``.hpctrain/driver.json``, read through the checked loader)."""
    extra = driver_pythonpath(also=[os.getcwd()], warn=_warn)
    submitted_from = trusted_pythonpath(submitted_pythonpath(run), warn=_warn)
    if submitted_from:
        extra["PYTHONPATH"] = os.pathsep.join(
            p for p in (submitted_from, extra["PYTHONPATH"]) if p)
    return extra


def submitted_pythonpath(run: RunDir) -> str:
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


def driver_pythonpath(*, also: Sequence[str] = (),
                      warn: Optional[Callable[[str], None]] = None) -> Dict[str, str]:
    """``PYTHONPATH`` for workers: the driver's own sys.path additions (the script's
    directory, a notebook's cwd, pytest's rootdir…, then ``also``) so that functions
    pickled by reference import in the workers exactly as they did in the driver, then
    ``$PYTHONPATH``. With ``warn``, the additions another user could write are left out
    (:func:`~hpctrain.common.trust.trusted_pythonpath`); ``$PYTHONPATH`` is the
    user's own choice and kept."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    extra = []
    for entry in list(sys.path) + list(also):
        path = os.path.realpath(entry or os.getcwd())
        if os.path.isdir(path) and not any(path == p or path.startswith(p + os.sep)
                                           for p in prefixes) and path not in extra:
            extra.append(path)
    if warn is not None:
        extra = [p for p in trusted_pythonpath(os.pathsep.join(extra), warn=warn).split(
            os.pathsep) if p]
    current = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join(extra + ([current] if current else []))}


def local_mpi_env() -> Dict[str, str]:
    """What ``mpirun`` needs to start ranks on this one machine: more ranks than cores
    (Open MPI refuses without ``--oversubscribe``), and as root (a container, a test VM)
    Open MPI's explicit consent. Set only where the user's environment does not."""
    env = {"OMPI_MCA_rmaps_base_oversubscribe": "1"}
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return {k: os.environ.get(k, v) for k, v in env.items()}
