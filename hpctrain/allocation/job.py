"""The batch job a run's attempts run in: an :class:`Allocation`.

The batch step (and a sweep's array task) is a run inside an allocation that a scheduler
gave it: the job id, the scheduler that can requeue it, the warning that comes before
the walltime ends (the scheduler's signal, or the supervisor's own timer where the
scheduler sends none), and the signal handlers the batch step installed first thing.
:meth:`hpctrain.run.Run.run_here` takes one and wires the supervisor from it; a local
run has none.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from hpctrain import cluster_env
from hpctrain.schedulers import get_scheduler, scheduler_class
from hpctrain.schedulers.base import warning_seconds
from hpctrain.allocation.recovery import PendingStop, requeue
from hpctrain.rundir.layout import RunDir

#: Environment of every rank: GPU binding asked for by the site (applied in the worker).
ENV_GPU_BINDING = "HPCTRAIN_GPU_BINDING"
ENV_GPU_BINDING_VAR = "HPCTRAIN_GPU_BINDING_VAR"
ENV_GPUS_PER_WORKER = "HPCTRAIN_GPUS_PER_WORKER"
#: Set first thing by a job script: the job's start, for the supervisor's own timer.
ENV_JOB_STARTED = "HPCTRAIN_JOB_STARTED"


@dataclass
class Allocation:
    """The batch job this process runs in, as a run's supervisor needs it.

    :param job_id: the job's own id (an array task's, never the array's).
    :param scheduler_name: the scheduler that runs the job (``"slurm"``…), None where
        none was detected (a script run by hand).
    :param scheduler: its :class:`~hpctrain.schedulers.base.Scheduler`.
    :param pending: what the batch step's signal handlers (installed before anything
        else) reach until the supervisor takes over.
    :param warning_s: seconds of warning before the walltime ends.
    :param warn_at: when the supervisor warns by itself (epoch seconds): where the
        scheduler sends no warning signal; None otherwise.
    """

    job_id: str
    scheduler_name: Optional[str]
    scheduler: Any
    pending: PendingStop
    warning_s: int
    warn_at: Optional[float] = None
    #: when the allocation ends (the job's start + its walltime; None: unknown)
    ends_at: Optional[float] = None
    #: the job's nodes, and FailureConfig.max_excluded_nodes (badnodes.py)
    num_nodes: int = 1
    max_excluded_nodes: int = 0

    @property
    def is_batch(self) -> bool:
        """True inside a batch scheduler's job (it can record and requeue the job)."""
        return bool(self.scheduler.is_batch)

    @property
    def can_requeue(self) -> bool:
        return bool(self.scheduler.can_requeue)

    def requeue(self, run: RunDir) -> Optional[str]:
        """Continue ``run`` in a new allocation (``state.json`` says REQUEUED)."""
        return requeue(run, self.scheduler, self.job_id, num_nodes=self.num_nodes,
                       max_excluded=self.max_excluded_nodes)


def allocation_from_env(spec: Any, pending: PendingStop,
                        env: Optional[Mapping[str, str]] = None) -> Allocation:
    """The allocation this process runs in, read from the scheduler's environment, for
    the run ``spec`` describes (its walltime and warning time)."""
    env = dict(os.environ if env is None else env)
    name = cluster_env.detect_scheduler(env)
    scheduler = get_scheduler(name)
    job_id = (scheduler.job_id_from_env(env) if scheduler.is_batch else None) \
        or f"batch-{os.getpid()}"
    walltime_s = job_walltime(name, spec, job_id)
    warning_s = warning_seconds(spec, walltime_s=walltime_s)
    return Allocation(job_id=job_id, scheduler_name=name, scheduler=scheduler,
                      pending=pending, warning_s=warning_s,
                      warn_at=warning_timer(name, walltime_s, warning_s, env),
                      ends_at=allocation_end(walltime_s, env),
                      num_nodes=spec.scaling.nodes,
                      max_excluded_nodes=spec.run.failure_config.max_excluded_nodes)


def job_walltime(scheduler: Optional[str], spec: Any, job_id: str) -> Optional[int]:
    """The job's walltime in seconds: the spec's, else the one the scheduler gave the job
    (PBS: a queue's ``resources_default.walltime`` limits it just the same)."""
    if spec.scheduler.walltime_s is not None or scheduler is None:
        return spec.scheduler.walltime_s
    return get_scheduler(scheduler).job_walltime(job_id)


def allocation_end(walltime_s: Optional[int], env: Mapping[str, str]) -> Optional[float]:
    """When the allocation ends: the job's start (``HPCTRAIN_JOB_STARTED``, set first thing
    by the script) + its walltime; None when either is unknown."""
    started = env.get(ENV_JOB_STARTED, "")
    if walltime_s is None or not started.isdigit():
        return None
    return float(int(started) + walltime_s)


def warning_timer(scheduler: Optional[str], walltime_s: Optional[int], warning_s: int,
                  env: Mapping[str, str]) -> Optional[float]:
    """When the supervisor warns by itself: where the scheduler sends no warning signal
    (PBS), from the job's start (``HPCTRAIN_JOB_STARTED``, set first thing by the script)
    and walltime."""
    started = env.get(ENV_JOB_STARTED, "")
    if scheduler is None or walltime_s is None or not started.isdigit():
        return None
    cls = scheduler_class(scheduler)
    if not cls.template or cls.sends_warning:
        return None
    return int(started) + walltime_s - warning_s


def gpu_binding_env(spec: Any) -> Dict[str, str]:
    """The ranks' environment for the GPU binding the site asks for (applied in the
    worker); empty without one."""
    sched = spec.scheduler
    if sched.gpu_binding == "none":
        return {}
    return {ENV_GPU_BINDING: sched.gpu_binding, ENV_GPU_BINDING_VAR: sched.gpu_binding_var,
            ENV_GPUS_PER_WORKER: str(max(1, spec.scaling.gpus_each))}


def describe_timer(allocation: Allocation) -> Optional[str]:
    """The job log's line about the supervisor's own warning timer; None without one."""
    if allocation.warn_at is None:
        return None
    return (f"no scheduler warning on {allocation.scheduler_name}: the supervisor's timer "
            f"warns at {time.strftime('%H:%M:%S', time.localtime(allocation.warn_at))}, "
            f"{allocation.warning_s} s before the walltime ends")
