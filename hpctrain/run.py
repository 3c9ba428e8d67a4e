"""``Run``: one run of a trainer, below ``fit()``.

A :class:`Run` holds what a trainer's configs resolve to for one run: the resolved
:class:`~hpctrain.spec.JobSpec`, the run directory, and the payload its workers load.
``DataParallelTrainer.fit()`` is ``Run(trainer, trainer.run_options).fit()``; the
``hpctrain`` command, the batch step, a sweep's trials and the Ray 1.x API build a
``Run`` the same way and use its steps::

    from hpctrain import Run, RunOptions

    run = Run(trainer)             # or Run(trainer_from_spec(spec), RunOptions(...))
    run.prepare()                  # the run directory: spec.toml, the payload, callbacks
    status = run.run_here()        # supervise the attempts here: FINISHED, FAILED, STOPPED
    result = run.result(status)    # the Result (TrainingFailedError as fit() raises it)

    job = run.submit()             # or as a batch job: prepare, render, submit
    result = run.result(run.follow())

What is about one run rather than about the trainer (run here whatever the scheduler,
continue a changed run, an explicit run directory, a sweep trial's identity, the seed-era
API's payload options) is a :class:`RunOptions`.
"""
from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from hpctrain._internal.fsutil import atomic_write_bytes, atomic_write_json
from hpctrain._internal.log import get_logger
from hpctrain._internal.rundir.layout import RunDir
from hpctrain._internal.trust import make_private_dir, share_of, trusted_pythonpath
from hpctrain._internal.worker.entry import WorkerPayload
from .errors import ConfigError
from .result import Result, result_or_raise
from .userconfig import default_share

_LOCAL_RUNS = itertools.count()

#: What the job script says about rendering it again, for a run submitted from Python.
FROM_PYTHON = "(submitted from Python; `hpctrain render` renders job files)"

_warn = get_logger("run").warning


@dataclass
class RunOptions:
    """How one run goes, beside its trainer's configs (the defaults are ``fit()``'s).

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
    """

    path: Optional[str] = None
    local_only: bool = False
    force_resume: bool = False
    trial: Optional[Dict[str, str]] = None
    per_rank_results: bool = False
    keep_return_values: bool = False
    first_checkpoint_index: int = 0
    echo_worker_output: Optional[bool] = None


class Run:
    """One run of ``trainer`` (a :class:`~hpctrain.trainer.DataParallelTrainer`): its
    resolved spec (:attr:`spec`), its run directory (:attr:`path`, :attr:`run_dir`) and
    its workers' payload (:meth:`payload`).

    :param trainer: the trainer whose configs the run resolves; for a job file's spec,
        ``hpctrain.trainer.trainer_from_spec(spec)``.
    :param options: the run's :class:`RunOptions`; default: ``trainer.run_options`` (the
        options of the run ``restore()`` continues, else the defaults).

    The run directory and the spec are fixed when the Run is made (a trainer without
    ``RunConfig(name=...)`` gets a fresh timestamped name then).
    """

    def __init__(self, trainer: Any, options: Optional[RunOptions] = None):
        self.trainer = trainer
        """The trainer."""
        self.options: RunOptions = options if options is not None else trainer.run_options
        """The run's options."""
        self.run_dir = RunDir(self.options.path or trainer.run_path)
        """The run directory (its files and ``state.json``; its storage kind's)."""
        self.path: str = self.run_dir.path
        """The run directory's absolute path (the control directory of a run whose
        storage kind is not posix)."""
        self.spec = trainer.job_spec()
        """The resolved :class:`~hpctrain.spec.JobSpec`."""

    def __repr__(self) -> str:
        return f"Run({self.path!r})"

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

    # -- the run directory ---------------------------------------------------------------
    def payload(self) -> WorkerPayload:
        """What every worker loads: the training function, its config, the backend, the
        scaling, the checkpoint config, the datasets…"""
        t, o = self.trainer, self.options
        rc = t.run_config
        return WorkerPayload(
            train_func=t.train_loop_per_worker,
            train_loop_config=t.train_loop_config,
            backend=self.spec.backend,
            backend_config=t.backend_config,
            scaling=t.scaling_config,
            checkpoint_config=rc.checkpoint_config,
            run_name=self.name,
            per_rank_results=o.per_rank_results,
            keep_return_values=o.keep_return_values,
            datasets=t.datasets,
            datasets_to_split=t.dataset_config.datasets_to_split,
            metadata=t.metadata,
            trial={"trainer": type(t).__name__, **(o.trial or {})},
            mtbi_s=rc.failure_config.mtbi_s)

    def prepare(self) -> RunDir:
        """Create (or update) the run directory: ``spec.toml``, the payload, the tracking
        callbacks and the driver's ``sys.path`` additions. Refuses a finished run of the
        same name, and a run whose spec changed in a way that cannot continue (unless
        :attr:`RunOptions.path` or :attr:`RunOptions.force_resume`). Callers that run or
        submit it hold ``run_dir.exclusive()`` around this and what follows."""
        from hpctrain._internal.allocation.supervisor import FINISHED

        run, explicit = self.run_dir, self.options.path is not None
        state = run.read_state() if run.exists() else {}
        if state.get("status") == FINISHED and not explicit:
            raise ConfigError(
                f"run.name: a finished run named {self.name!r} already exists at {run.path}",
                hint="pick another name, or leave run.name unset for a fresh timestamped one")
        if run.exists() and not explicit and not self.options.force_resume:
            from hpctrain._internal.rundir.resume import check_resume

            check_resume(run.path, run.spec_file, self.spec.to_toml_dict(), self.name)
        share = self.share
        if self.options.trial:  # a sweep's directory: checked, and shared as its trials are
            sweep = os.path.dirname(run.path)
            make_private_dir(sweep, share=share or share_of(sweep), what="sweep directory")
        run.create(share)
        from hpctrain._internal.formats import versioned_spec  # format = 1 first

        atomic_write_bytes(run.spec_file, versioned_spec(self.spec.to_toml()).encode(),
                           sync=False, mode=run.file_mode)
        self.payload().save(run)
        from hpctrain._internal.allocation.tracking import save_callbacks

        save_callbacks(run, self.trainer.run_config.callbacks)
        # The driver's sys.path additions, for a batch job to import what the payload
        # pickled by reference (read before the payload is unpickled).
        atomic_write_json(run.driver_file, {"pythonpath": trusted_pythonpath(
            driver_pythonpath()["PYTHONPATH"], warn=_warn)}, sync=False, mode=0o600)
        return run

    # -- here ------------------------------------------------------------------------------
    def run_here(self, *, on_tick: Optional[Callable[[], None]] = None) -> str:
        """Supervise the prepared run's attempts in this process to the end; return its
        status (FINISHED, FAILED, or STOPPED after a warning signal). Shows progress as
        ``RunConfig.verbose`` says, runs the tracking callbacks, handles SIGTERM/SIGHUP
        (the ranks stop, KeyboardInterrupt) and the warning signal (the ranks stop at a
        checkpoint). ``on_tick`` is called with the supervisor's every poll (raise
        from it to stop the run)."""
        from hpctrain._internal.allocation.attempts import supervise
        from hpctrain._internal.allocation.supervisor import Supervisor
        from hpctrain._internal.allocation.tracking import CallbackRunner
        from hpctrain._internal.driver.progress import Progress
        from .launchers import launcher_for

        run, rc = self.run_dir, self.trainer.run_config
        launcher = launcher_for(self.spec, here=True)
        extra_env = driver_pythonpath()
        if launcher.name != "local":
            extra_env.update(local_mpi_env())
        progress = Progress(run, verbose=rc.verbose, echo=self.options.echo_worker_output)
        tracking = CallbackRunner(run, rc.callbacks)
        ticks = [progress.tick, tracking.tick] + ([on_tick] if on_tick else [])

        def tick() -> None:
            for t in ticks:
                t()

        # unique per run, also for trials side by side in one process (a sweep): the
        # job id seeds the derived rendezvous ports of MPI-launched ranks
        job_id = f"local-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{next(_LOCAL_RUNS)}"
        fc = rc.failure_config
        start = self.trainer.resume_from_checkpoint
        sup = Supervisor(
            run, launcher=launcher, num_workers=self.trainer.scaling_config.num_workers,
            max_failures=fc.max_failures, job_id=job_id,
            initial_checkpoint=start.path if start else None,
            on_line=progress.worker_line, on_tick=tick, extra_env=extra_env,
            first_checkpoint_index=self.options.first_checkpoint_index,
            warning_s=fc.warning_s, warning_signal=fc.warning_signal)
        # nothing here can requeue a local run: a clean stop ends it STOPPED
        return supervise(run, sup, fc, tracking=tracking, on_close=progress.close)

    def fit(self) -> Result:
        """Run to the end (here, or as a batch job that is followed) and return the
        Result; raises :class:`~hpctrain.TrainingFailedError` when the run failed."""
        if not self.here:
            job = self.submit()
            if self.trainer.run_config.verbose >= 1:
                print(f"[hpctrain] submitted {job.scheduler} job {job.job_id}; run directory "
                      f"{self.path}", flush=True)
            return self.result(self.follow())
        self.trainer.check_datasets()  # open each data file before anything is written
        from .backends import check_installed

        check_installed(self.spec.backend)  # before anything is written, not after every rank failed
        from hpctrain._internal.rundir.checks import ensure_storage_dir

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
        from hpctrain._internal.driver.submission import render

        return render(self.path, self.spec, rerender)

    def submit(self, rerender: str = FROM_PYTHON):
        """Prepare the run directory, submit its job script and return the
        :class:`~hpctrain.job.Job` at once. Needs a batch scheduler. The datasets' files
        are checked first. ``rerender``: what the script says about rendering it again."""
        if self.spec.scheduler.kind == "local":
            raise ConfigError("scheduler: submit() needs a batch scheduler, got \"local\"",
                              hint='give scheduler="slurm"/"pbs" or site="NAME"; fit() runs '
                                   "a local run here")
        self.trainer.check_datasets()
        from hpctrain._internal.driver import submission
        from .job import Job

        sub = submission.submit(self.path, self.spec, self.prepare, rerender=rerender)
        return Job(sub.run_path)

    def follow(self, verbose: Optional[int] = None) -> str:
        """Show the submitted run's progress until its jobs ended; return its status
        (FINISHED, FAILED, STOPPED, or ``JOB_<STATE>`` when the job ended first). Ctrl-C
        detaches (the job runs on) and re-raises KeyboardInterrupt."""
        from hpctrain._internal.driver import submission

        if verbose is None:
            verbose = self.trainer.run_config.verbose
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
        from hpctrain._internal.driver.submission import result_of

        return result_of(self.path, status)


def driver_pythonpath(*, also: Sequence[str] = (),
                      warn: Optional[Callable[[str], None]] = None) -> Dict[str, str]:
    """``PYTHONPATH`` for workers: the driver's own sys.path additions (the script's
    directory, a notebook's cwd, pytest's rootdir…, then ``also``) so that functions
    pickled by reference import in the workers exactly as they did in the driver, then
    ``$PYTHONPATH``. With ``warn``, the additions another user could write are left out
    (:func:`~hpctrain._internal.trust.trusted_pythonpath`); ``$PYTHONPATH`` is the
    user's own choice and kept."""
    import sys

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
