"""Schedulers: render a batch script for an allocation, submit it, watch it, cancel it.

One small module per scheduler behind :class:`~hpctrain.schedulers.base.Scheduler`:
``local`` (the embedded default), ``slurm`` (through submitit), ``pbs`` (qsub/qstat/qdel,
states watched with submitit's InfoWatcher) and ``lsf`` (bsub/bjobs/bkill; not yet run against
a real LSF).

This package is the **scheduler registry**: every fact about one batch system (its name,
default launcher, job-id variable, how a job is detected from the environment, its hosts,
warning rule, requeue, job arrays, walltime and memory formats) lives in its class, and
the rest of hpctrain asks :func:`get_scheduler` / :func:`scheduler_class` /
:func:`scheduler_names` instead of spelling scheduler names out. Adding one is a module
here, a template and one :func:`register_scheduler` line (docs/adding-a-scheduler.md).
"""
from __future__ import annotations


from .base import BatchRequest, JobPhase, JobState, Scheduler

__all__ = ["BatchRequest", "JobPhase", "JobState", "Scheduler", "get_scheduler", "scheduler_class",
           "scheduler_names", "register_scheduler", "detect_scheduler", "SCHEDULERS"]
from hpctrain.common.registry import (SCHEDULERS, default_launcher, describe,
                                        detect_scheduler, get_scheduler, register_scheduler,
                                        scheduler_class, scheduler_names)

register_scheduler("local", "hpctrain.schedulers.local:LocalScheduler")
register_scheduler("slurm", "hpctrain.schedulers.slurm:SlurmScheduler")
register_scheduler("pbs", "hpctrain.schedulers.pbs:PbsScheduler")
register_scheduler("lsf", "hpctrain.schedulers.lsf:LsfScheduler")  # not yet run on a real LSF
