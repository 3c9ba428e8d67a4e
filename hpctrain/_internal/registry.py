"""The registries' index, one per axis: schedulers, backends and launchers.

Scheduler names → ``"module:Class"``, imported on first
use. It lives apart from :mod:`hpctrain.schedulers` (whose modules render and submit, and
so sit high in the layers) so that the low layers — the config dataclasses, the job spec,
``cluster_env`` — can ask "which schedulers exist, which one holds this process" without
importing them. A new scheduler is one :func:`register_scheduler` line in
:mod:`hpctrain.schedulers` (docs/adding-a-scheduler.md); a backend one
:func:`register_backend` line in :mod:`hpctrain.backends`, a launcher one
:func:`register_launcher` line in :mod:`hpctrain.launchers` (each index imports its
package, which holds those lines, on first use).
"""
from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
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


# --------------------------------------------------------------------------- backends
@dataclass(frozen=True)
class BackendEntry:
    """One backend's facts (:func:`register_backend`); the targets are ``"module:Class"``,
    imported on first use."""

    name: str
    backend: str  #: the :class:`~hpctrain.backends.base.Backend` subclass
    config: str  #: its config dataclass, also the schema of the job file's ``[name]`` section
    trainer: str  #: the trainer class ``hpctrain run`` builds for ``job.backend = name``
    config_keyword: str  #: the trainer's keyword for the config (``torch_config``)
    requires: Tuple[str, ...] = ()  #: modules the framework needs (checked, not imported)
    install: str = ""  #: how to install them
    legacy_api: bool = False  #: a ``backend=`` name of the 1.x ``hpctrain.train`` API


_BACKENDS: Dict[str, BackendEntry] = {}
_BACKENDS_LOADED = False


def register_backend(name: str, *, backend: str, config: str, trainer: str,
                     config_keyword: str, requires: Sequence[str] = (), install: str = "",
                     legacy_api: bool = False) -> None:
    """Register a backend: its :class:`Backend`, config dataclass (whose fields, declared
    with :func:`hpctrain.config.toml`, are the keys of the job file's ``[name]`` section),
    trainer and the trainer's keyword for the config, and the modules it needs."""
    _backends()[name] = BackendEntry(name, backend, config, trainer, config_keyword,
                                   tuple(requires), install, legacy_api)


def unregister_backend(name: str) -> None:
    """Forget backend ``name`` (tests)."""
    _backends().pop(name, None)


def _backends() -> Dict[str, BackendEntry]:
    global _BACKENDS_LOADED
    if not _BACKENDS_LOADED:
        _BACKENDS_LOADED = True
        importlib.import_module("hpctrain.backends")
    return _BACKENDS


def backend_names() -> Tuple[str, ...]:
    """The registered backend names, in registration order."""
    return tuple(_backends())


def backend_entry(name: str) -> BackendEntry:
    """Backend ``name``'s registration (KeyError when there is none)."""
    return _backends()[name]


def backend_entries() -> Tuple[BackendEntry, ...]:
    """Every registration, in order (a snapshot: equal while nothing was (un)registered)."""
    return tuple(_backends().values())


def load(target: str) -> Any:
    """The object a ``"module:Name"`` target names (its module imported now)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


class _BackendNames(Sequence):
    """The registered backend names, always current."""

    def __getitem__(self, i):  # type: ignore[override]
        return backend_names()[i]

    def __len__(self) -> int:
        return len(_backends())

    def __contains__(self, name: object) -> bool:
        return name in _backends()

    def __repr__(self) -> str:
        return repr(backend_names())


#: The registered backend names (a live view).
BACKENDS: Sequence[str] = _BackendNames()


# --------------------------------------------------------------------------- launchers
_LAUNCHERS: Dict[str, str] = {}
_LAUNCHERS_LOADED = False


def register_launcher(name: str, target: str) -> None:
    """Register the :class:`~hpctrain.launchers.base.Launcher` ``target``
    (``"module:Class"``) as the ``scheduler.launcher`` value ``name``."""
    _launchers()[name] = target


def unregister_launcher(name: str) -> None:
    """Forget launcher ``name`` (tests)."""
    _launchers().pop(name, None)


def _launchers() -> Dict[str, str]:
    global _LAUNCHERS_LOADED
    if not _LAUNCHERS_LOADED:
        _LAUNCHERS_LOADED = True
        importlib.import_module("hpctrain.launchers")
    return _LAUNCHERS


def launcher_names() -> Tuple[str, ...]:
    """The registered launcher names, in registration order."""
    return tuple(_launchers())


def launcher_class(name: str) -> Any:
    """The launcher class registered as ``name``; ValueError naming the known ones."""
    if name not in _launchers():
        raise ValueError(f"unknown launcher {name!r}; expected one of: "
                         f"{', '.join(_launchers())}")
    return load(_launchers()[name])


class _LauncherNames(Sequence):
    """The registered launcher names, always current."""

    def __getitem__(self, i):  # type: ignore[override]
        return launcher_names()[i]

    def __len__(self) -> int:
        return len(_launchers())

    def __contains__(self, name: object) -> bool:
        return name in _launchers()

    def __repr__(self) -> str:
        return repr(launcher_names())


#: The registered launcher names (a live view).
LAUNCHERS: Sequence[str] = _LauncherNames()
