"""Schedulers: render a batch script for an allocation, submit it, watch it, cancel it.

One small module per scheduler behind :class:`~hpctrain.schedulers.base.Scheduler`:
``local`` (the embedded default), ``slurm`` (through submitit) and ``pbs`` (a submitit
plugin executor over qsub/qstat/qdel).
"""
from __future__ import annotations

from .base import BatchRequest, JobState, Scheduler

__all__ = ["BatchRequest", "JobState", "Scheduler", "get_scheduler", "SCHEDULERS"]

SCHEDULERS = ("local", "slurm", "pbs")


def get_scheduler(kind: str) -> Scheduler:
    """The scheduler named ``kind`` (``local``, ``slurm`` or ``pbs``)."""
    if kind == "slurm":
        from .slurm import SlurmScheduler

        return SlurmScheduler()
    if kind == "pbs":
        from .pbs import PbsScheduler

        return PbsScheduler()
    if kind == "local":
        from .local import LocalScheduler

        return LocalScheduler()
    raise ValueError(f"unknown scheduler {kind!r}; expected one of {', '.join(SCHEDULERS)}")
