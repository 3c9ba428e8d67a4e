"""The scheduler registry's index: scheduler names → ``"module:Class"``, imported on first
use. It lives apart from :mod:`hpctrain.schedulers` (whose modules render and submit, and
so sit high in the layers) so that the low layers — the config dataclasses, the job spec,
``cluster_env`` — can ask "which schedulers exist, which one holds this process" without
importing them. A new scheduler is one :func:`register_scheduler` line in
:mod:`hpctrain.schedulers` (docs/adding-a-scheduler.md).
"""
from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, Dict, Optional, Tuple

#: name -> "module:Class" (imported on first use, so that `import hpctrain` stays light)
_REGISTRY: Dict[str, str] = {}
_LOADED = False


def _registry() -> Dict[str, str]:
    """The index, after hpctrain's own schedulers registered themselves (the first call
    imports :mod:`hpctrain.schedulers`, which holds the ``register_scheduler`` lines)."""
    global _LOADED
    if not _LOADED:
        _LOADED = True
        importlib.import_module("hpctrain.schedulers")
    return _REGISTRY
_CLASSES: Dict[str, Any] = {}


def register_scheduler(name: str, target: str) -> None:
    """Register the scheduler class ``target`` (``"package.module:Class"``) as ``name``.
    Batch schedulers are detected from the environment in registration order; ``local``
    is the fallback."""
    _REGISTRY[name] = target
    _CLASSES.pop(name, None)



class _Names(Sequence):
    """The registered names, always current (a scheduler registered later is in it)."""

    def __getitem__(self, i):  # type: ignore[override]
        return tuple(_registry())[i]

    def __len__(self) -> int:
        return len(_registry())

    def __repr__(self) -> str:
        return repr(tuple(_registry()))


#: The registered scheduler names (a live view: ``in``, ``join``, iteration).
SCHEDULERS: Sequence[str] = _Names()


def scheduler_names(*, batch_only: bool = False) -> Tuple[str, ...]:
    """The registered scheduler names (``batch_only``: those with a batch script)."""
    return tuple(n for n in _registry() if not batch_only or scheduler_class(n).template)


def scheduler_class(kind: str) -> Any:
    """The class registered as ``kind``; ValueError naming the known ones otherwise."""
    cls = _CLASSES.get(kind)
    if cls is None:
        if kind not in _registry():
            raise ValueError(f"unknown scheduler {kind!r}; expected one of "
                             f"{', '.join(_registry())}")
        module, _, attr = _registry()[kind].partition(":")
        cls = _CLASSES[kind] = getattr(importlib.import_module(module), attr)
    return cls


def get_scheduler(kind: str) -> Any:
    """The scheduler named ``kind`` (``local``, ``slurm``, ``pbs``, ``lsf``, …)."""
    return scheduler_class(kind)()


def detect_scheduler(env) -> str:
    """The batch system holding this process's allocation: the first registered one whose
    :meth:`~Scheduler.detect` recognises ``env``, else ``local``."""
    for name in _registry():
        cls = scheduler_class(name)
        if cls.template and cls.detect(env):
            return name
    return "local"


def default_launcher(kind: str) -> str:
    """The launcher a scheduler uses unless ``scheduler.launcher`` says otherwise."""
    return scheduler_class(kind).default_launcher if kind in _registry() else "local"


def describe(kinds: Optional[Tuple[str, ...]] = None) -> str:
    """``"local", "slurm" or "pbs"``: for error messages."""
    names = [f'"{n}"' for n in (kinds or scheduler_names())]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
