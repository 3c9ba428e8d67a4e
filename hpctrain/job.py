"""A batch run submitted without waiting for it: ``job = trainer.submit()``.

The handle is the run directory plus its jobs in ``state.json``, so it keeps working
across requeues (Slurm: the same id; PBS: the next job of the chain), in another
process (``Job(run_path)``), and after the submitting process has gone. Names follow
submitit's ``Job`` where they mean the same: ``job_id``, ``done()``, ``wait()``,
``result()``, ``cancel()``; ``status()`` is the run's status.

    job = TorchTrainer(train_func, ..., scheduler="slurm", site="perlmutter").submit()
    job.status()          # "PENDING", "RUNNING", "REQUEUED", "FINISHED", "FAILED", …
    result = job.result() # waits; the Result, or TrainingFailedError as fit() raises it
"""
from __future__ import annotations

import enum
import os
import re
import time
from typing import Any, Dict, Optional, Union

from .errors import ConfigError
from .result import Result
from .schedulers import get_scheduler
from hpctrain.driver.submission import last_job, result_of
from hpctrain.rundir.layout import RunDir

#: Run statuses after which nothing more happens to the run.
__all__ = ["Job", "JobStatus"]

FINAL = ("FINISHED", "FAILED", "STOPPED")


class JobStatus(str, enum.Enum):
    """What :meth:`Job.status` returns: a string (``status == "FINISHED"`` holds) whose
    members are the run's statuses, plus ``JOB_<STATE>`` when the batch job ended before
    the run recorded an end of its own (``<STATE>``: the scheduler's word in Slurm's
    terms, e.g. ``JOB_CANCELLED``, ``JOB_TIMEOUT``, ``JOB_ENDED``). Any other word of
    capitals (another scheduler state, a status a later hpctrain writes) is a member too,
    made when first seen, so that ``status()`` never fails on a word it does not list."""

    PENDING = "PENDING"
    """Submitted; the job has not started."""
    RUNNING = "RUNNING"
    REQUEUED = "REQUEUED"
    """Waiting for the run's next allocation (a requeue or a resubmission)."""
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    INTERRUPTED = "INTERRUPTED"
    """The batch step was told to stop (a signal) and stopped the ranks; the run has not
    ended: submitting or restoring it again continues it."""
    JOB_CANCELLED = "JOB_CANCELLED"
    JOB_TIMEOUT = "JOB_TIMEOUT"
    JOB_FAILED = "JOB_FAILED"
    JOB_COMPLETED = "JOB_COMPLETED"
    JOB_ENDED = "JOB_ENDED"
    """The scheduler no longer knows the job (PBS and LSF forget finished jobs)."""

    @classmethod
    def _missing_(cls, value: object) -> Optional["JobStatus"]:
        # another scheduler word (JOB_NODE_FAIL, JOB_OUT_OF_MEMORY…): a member of its own
        if not isinstance(value, str) or not re.fullmatch(r"[A-Z][A-Z0-9_]*", value):
            return None
        member = str.__new__(cls, value)
        member._name_ = member._value_ = value
        return cls._value2member_map_.setdefault(value, member)  # type: ignore[return-value]

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str(self), spec)

    @property
    def done(self) -> bool:
        """True once the run ended (or its job ended without it)."""
        return self.value in FINAL or self.value.startswith("JOB_")


class Job:
    """One submitted batch run (see the module docstring)."""

    def __init__(self, run_path: Union[str, "os.PathLike[str]"]) -> None:

        self._run = RunDir(run_path)

    def __repr__(self) -> str:
        return f"Job({self.path!r}, job_id={self.job_id!r})"

    @property
    def path(self) -> str:
        """The run directory."""
        return self._run.path

    def _last(self) -> Dict[str, Any]:

        job = last_job(self._run)
        if job is None:

            raise ConfigError(f"{self.path} has no submitted job",
                              hint="trainer.submit() or hpctrain submit job.toml")
        return job

    @property
    def job_id(self) -> str:
        """The scheduler's id of the run's latest job."""
        return str(self._last()["job_id"])

    @property
    def scheduler(self) -> str:
        """The name of the scheduler that runs the run's latest job (``slurm``, ``pbs``…)."""
        return str(self._last()["scheduler"])

    def status(self) -> JobStatus:
        """The run's status (``state.json``): PENDING until the job starts, RUNNING,
        REQUEUED while it waits for its next allocation, then FINISHED, FAILED or
        STOPPED. ``JOB_<STATE>`` (e.g. ``JOB_CANCELLED``) when the job ended before the
        run could record an end of its own."""

        status = self._run.read_state().get("status", "PENDING")
        if status in FINAL or status == "REQUEUED":
            return JobStatus(status)
        job = self._last()
        js = get_scheduler(job["scheduler"]).state(job["job_id"])
        if js.done:
            status = self._run.read_state().get("status", "PENDING")  # it may just have ended
            return JobStatus(status if status in FINAL or status == "REQUEUED"
                             else f"JOB_{js.state}")
        return JobStatus(status)

    def done(self) -> bool:
        """True once the run ended (or its job ended without it)."""
        return self.status().done

    def wait(self, timeout: Optional[float] = None, poll_s: float = 2.0) -> JobStatus:
        """Block until :meth:`done`; return the final status. ``TimeoutError`` after
        ``timeout`` seconds (the job runs on)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status()
            if status.done:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.job_id} of {self.path} is still {status} after "
                                   f"{timeout} s; it runs on (Job({self.path!r}).wait() "
                                   "again, or cancel())")
            time.sleep(poll_s)

    def result(self, timeout: Optional[float] = None) -> "Result":
        """Wait, then the run's :class:`~hpctrain.Result`; raises TrainingFailedError /
        TrainingStoppedError as ``fit()`` does."""

        return result_of(self.path, self.wait(timeout))

    def cancel(self) -> bool:
        """Cancel the run's latest job (scancel / qdel); committed checkpoints stay and
        submitting the run again resumes it. False when the job had already ended."""

        job = self._last()
        scheduler = get_scheduler(job["scheduler"])
        if scheduler.state(job["job_id"]).done:
            return False
        scheduler.cancel(job["job_id"])
        if self._run.read_state().get("status") == "REQUEUED":  # a chain that will not go on
            with self._run.update_state() as s:
                s["status"] = "STOPPED"
                s["stopped_because"] = f"its queued job {job['job_id']} was cancelled"
        return True
