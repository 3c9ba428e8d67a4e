"""Schedulers: render a batch script for an allocation, submit it, watch it, cancel it.

One small module per scheduler behind :class:`~hpctrain.schedulers.base.Scheduler`:
``local`` (the embedded default), ``slurm`` (through submitit), ``pbs`` (a submitit
plugin executor over qsub/qstat/qdel) and ``lsf`` (bsub/bjobs/bkill; not yet run against
a real LSF).

This package is the **scheduler registry**: every fact about one batch system (its name,
default launcher, job-id variable, how a job is detected from the environment, its hosts,
warning rule, requeue, job arrays, walltime and memory formats) lives in its class, and
the rest of hpctrain asks :func:`get_scheduler` / :func:`scheduler_class` /
:func:`scheduler_names` instead of spelling scheduler names out. Adding one is a module
here, a template and one :func:`register_scheduler` line (docs/adding-a-scheduler.md).
"""
from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Dict, Optional, Tuple, Type

from .base import BatchRequest, JobState, Scheduler

__all__ = ["BatchRequest", "JobState", "Scheduler", "get_scheduler", "scheduler_class",
           "scheduler_names", "register_scheduler", "detect_scheduler", "SCHEDULERS"]

#: name -> "module:Class" (imported on first use, so that `import hpctrain` stays light)
_REGISTRY: Dict[str, str] = {}
_CLASSES: Dict[str, Type[Scheduler]] = {}


def register_scheduler(name: str, target: str) -> None:
    """Register the scheduler class ``target`` (``"package.module:Class"``) as ``name``.
    Batch schedulers are detected from the environment in registration order; ``local``
    is the fallback."""
    _REGISTRY[name] = target
    _CLASSES.pop(name, None)


register_scheduler("local", "hpctrain.schedulers.local:LocalScheduler")
register_scheduler("slurm", "hpctrain.schedulers.slurm:SlurmScheduler")
register_scheduler("pbs", "hpctrain.schedulers.pbs:PbsScheduler")
register_scheduler("lsf", "hpctrain.schedulers.lsf:LsfScheduler")  # not yet run on a real LSF

class _Names(Sequence):
    """The registered names, always current (a scheduler registered later is in it)."""

    def __getitem__(self, i):  # type: ignore[override]
        return tuple(_REGISTRY)[i]

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __repr__(self) -> str:
        return repr(tuple(_REGISTRY))


#: The registered scheduler names (a live view: ``in``, ``join``, iteration).
SCHEDULERS: Sequence[str] = _Names()


def scheduler_names(*, batch_only: bool = False) -> Tuple[str, ...]:
    """The registered scheduler names (``batch_only``: those with a batch script)."""
    return tuple(n for n in _REGISTRY if not batch_only or scheduler_class(n).template)


def scheduler_class(kind: str) -> Type[Scheduler]:
    """The class registered as ``kind``; ValueError naming the known ones otherwise."""
    cls = _CLASSES.get(kind)
    if cls is None:
        if kind not in _REGISTRY:
            raise ValueError(f"unknown scheduler {kind!r}; expected one of "
                             f"{', '.join(_REGISTRY)}")
        module, _, attr = _REGISTRY[kind].partition(":")
        cls = _CLASSES[kind] = getattr(importlib.import_module(module), attr)
    return cls


def get_scheduler(kind: str) -> Scheduler:
    """The scheduler named ``kind`` (``local``, ``slurm``, ``pbs``, ``lsf``, …)."""
    return scheduler_class(kind)()


def detect_scheduler(env) -> str:
    """The batch system holding this process's allocation: the first registered one whose
    :meth:`~Scheduler.detect` recognises ``env``, else ``local``."""
    for name in _REGISTRY:
        cls = scheduler_class(name)
        if cls.template and cls.detect(env):
            return name
    return "local"


def default_launcher(kind: str) -> str:
    """The launcher a scheduler uses unless ``scheduler.launcher`` says otherwise."""
    return scheduler_class(kind).default_launcher if kind in _REGISTRY else "local"


def describe(kinds: Optional[Tuple[str, ...]] = None) -> str:
    """``"local", "slurm" or "pbs"``: for error messages."""
    names = [f'"{n}"' for n in (kinds or scheduler_names())]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
