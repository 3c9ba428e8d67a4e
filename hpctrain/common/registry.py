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

Members can also come from outside the package: an installed distribution declares them in
the entry-point groups ``hpctrain.schedulers``, ``hpctrain.launchers`` (``name =
"module:Class"``) and ``hpctrain.backends`` (``name = "module:ENTRY"``, a
:class:`BackendEntry`). They are read once, on an index's first query after hpctrain's own
lines (never at ``import hpctrain``); a plugin that fails to load, names something else
or takes a name already registered is left out with a warning naming its distribution and
entry point (docs/adding-a-scheduler.md, "Plugins").
"""
from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from .log import get_logger

_log = get_logger("registry")

from hpctrain.errors import ConfigError


class _Index(Sequence):
    """One axis's registrations by name, in registration order, filled on first use by
    importing ``package`` (which holds hpctrain's own ``register_*`` lines, so that
    ``import hpctrain`` stays light), then, on the first query, by the installed plugins
    of the entry-point group ``group``. As a sequence it is the live view of the names:
    ``in``, iteration and ``", ".join(...)`` see an entry registered later."""

    def __init__(self, package: str, what: str, listing: str = " ", *, group: str = "",
                 plugin: Optional[Callable[[str, str, Any], Any]] = None):
        self._package, self._what, self._listing = package, what, listing
        self._group, self._plugin = group, plugin
        self._entries: Dict[str, Any] = {}
        self._objects: Dict[str, Any] = {}  # name -> what its target names, once loaded
        self._loaded = False
        self._plugins_read = False
        #: name -> where a plugin's entry came from (``the entry point "x = m:C" of the
        #: distribution "d 1.0"``), for those registered and those left out
        self.plugins: Dict[str, str] = {}
        self.broken: Dict[str, str] = {}  # name -> why its plugin was left out

    def _own(self) -> Dict[str, Any]:
        """name -> entry, after hpctrain's own registrations (no plugins read)."""
        if not self._loaded:
            self._loaded = True
            importlib.import_module(self._package)
        return self._entries

    def entries(self) -> Dict[str, Any]:
        """name -> entry, after hpctrain's own registrations and the installed plugins."""
        own = self._own()
        if not self._plugins_read:
            self._plugins_read = True
            self._read_plugins()
        return own

    def _read_plugins(self) -> None:
        for ep in entry_points(self._group):
            where = describe_entry_point(ep)
            if ep.name in self._entries:
                owner = self.plugins.get(ep.name, "hpctrain's own")
                self._leave_out(ep.name, where, f"the {self._what} name {ep.name!r} is "
                                f"already taken by {owner}; a plugin cannot replace it",
                                keep=True)
                continue
            try:
                obj = ep.load()
                entry = self._plugin(ep.name, ep.value, obj) if self._plugin else ep.value
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the rest
                self._leave_out(ep.name, where, f"{type(exc).__name__}: {exc}")
                continue
            self._entries[ep.name] = entry
            if isinstance(entry, str):
                self._objects[ep.name] = obj
            self.plugins[ep.name] = where

    def _leave_out(self, name: str, where: str, why: str, keep: bool = False) -> None:
        message = f"{where} was not loaded, so it adds no {self._what} {name!r}: {why}"
        if not keep:
            self.broken[name] = message
        _log.warning("%s", message)

    def add(self, name: str, entry: Any) -> None:
        self._own()[name] = entry
        self._objects.pop(name, None)

    def remove(self, name: str) -> None:
        self.entries().pop(name, None)
        self._objects.pop(name, None)

    def lookup(self, name: str) -> Any:
        """``name``'s entry (KeyError when there is none). One of hpctrain's own is found
        without reading the installed plugins (a plugin cannot replace it): a rank's
        ``get_backend("torch")`` and the batch step's own scheduler do not scan every
        installed distribution's entry points (15–40 ms a process)."""
        own = self._own()
        return own[name] if name in own else self.entries()[name]

    def entry(self, name: str) -> Any:
        """``name``'s entry; ValueError naming the known ones otherwise."""
        try:
            return self.lookup(name)
        except KeyError:
            pass
        if name in self.broken:
            raise ValueError(self.broken[name])
        raise ValueError(f"unknown {self._what} {name!r}; expected one of"
                         f"{self._listing}{', '.join(self.entries())}")

    def load(self, name: str) -> Any:
        """What ``name``'s ``"module:Class"`` entry names (imported on first use)."""
        if name not in self._objects or name not in self:
            self._objects[name] = load(self.entry(name))
        return self._objects[name]

    @contextlib.contextmanager
    def scoped(self) -> Iterator["_Index"]:
        """Registrations made inside the block are undone at its end (tests)."""
        saved = dict(self.entries())
        try:
            yield self
        finally:
            self._entries.clear()
            self._entries.update(saved)
            self._objects.clear()

    def __getitem__(self, i):  # type: ignore[override]
        return tuple(self.entries())[i]

    def __len__(self) -> int:
        return len(self.entries())

    def __contains__(self, name: object) -> bool:
        # one of hpctrain's own: no need to read the installed plugins (`import hpctrain`
        # checks the default scheduler's name)
        return name in self._own() or name in self.entries()

    def __repr__(self) -> str:
        return repr(tuple(self.entries()))


def load(target: str) -> Any:
    """The object a ``"module:Name"`` target names (its module imported now)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def entry_points(group: str) -> Tuple[Any, ...]:
    """The entry points of ``group`` that installed distributions declare."""
    found = _installed_entry_points()
    if hasattr(found, "select"):
        return tuple(found.select(group=group))
    return tuple(found.get(group, ()))  # Python 3.9: a dict by group


@functools.lru_cache(maxsize=1)
def _installed_entry_points() -> Any:
    """Every installed distribution's entry points: one scan for the three registries."""
    # (imported here: importlib.metadata and the scan of every installed distribution
    # would add ~25 ms to the CLI's start-up; they run on a registry's first query)
    import importlib.metadata

    return importlib.metadata.entry_points()


def describe_entry_point(ep: Any) -> str:
    """``the entry point "x = m:C" of the distribution "d 1.0"``: for messages."""
    dist = getattr(ep, "dist", None)
    owner = f"{dist.name} {dist.version}" if dist is not None else "an unknown distribution"
    return f'the entry point "{ep.name} = {ep.value}" (group {ep.group}) of the distribution "{owner}"'


def _class_plugin(what: str, attribute: Optional[str] = None):
    """A plugin entry of a ``"module:Class"`` axis: the value, once it names a class (and,
    with ``attribute``, a class whose ``attribute`` is the entry point's name)."""

    def check(name: str, value: str, obj: Any) -> str:
        if not isinstance(obj, type):
            raise TypeError(f"{value} is {obj!r}, expected a {what} class")
        if attribute and getattr(obj, attribute, None) != name:
            raise TypeError(f"{value}.{attribute} is {getattr(obj, attribute, None)!r}, "
                            f"expected {name!r} (the entry point's name)")
        return value

    return check


# --------------------------------------------------------------------------- schedulers
#: The registered scheduler names (a live view: ``in``, ``join``, iteration); entries are
#: ``"module:Class"`` targets, imported on first use.
SCHEDULERS = _Index("hpctrain.schedulers", "scheduler", group="hpctrain.schedulers",
                    plugin=_class_plugin("Scheduler", "name"))


def register_scheduler(name: str, target: str) -> None:
    """Register the scheduler class ``target`` (``"package.module:Class"``) as ``name``.
    Batch schedulers are detected from the environment in registration order; ``local``
    is the fallback."""
    SCHEDULERS.add(name, target)


def scheduler_names(*, batch_only: bool = False) -> Tuple[str, ...]:
    """The registered scheduler names (``batch_only``: those with a batch script)."""
    return tuple(n for n in SCHEDULERS if not batch_only or scheduler_class(n).template)


def scheduler_class(kind: str) -> Any:
    """The class registered as ``kind``; ValueError naming the known ones otherwise."""
    return SCHEDULERS.load(kind)


def get_scheduler(kind: str) -> Any:
    """The scheduler named ``kind`` (``local``, ``slurm``, ``pbs``, ``lsf``, …)."""
    return scheduler_class(kind)()


def detect_scheduler(env) -> str:
    """The batch system holding this process's allocation: the first registered one whose
    :meth:`~Scheduler.detect` recognises ``env``, else ``local``."""
    for name in SCHEDULERS:
        cls = scheduler_class(name)
        if cls.template and cls.detect(env):
            return name
    return "local"


def default_launcher(kind: str) -> str:
    """The launcher a scheduler uses unless ``scheduler.launcher`` says otherwise."""
    return scheduler_class(kind).default_launcher if kind in SCHEDULERS else "local"


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


def _backend_plugin(name: str, value: str, obj: Any) -> BackendEntry:
    """A backend plugin's entry point names its :class:`BackendEntry`."""
    if not isinstance(obj, BackendEntry) or obj.name != name:
        raise TypeError(f"{value} is {obj!r}, expected a BackendEntry named {name!r} "
                        "(hpctrain.plugins.BackendEntry)")
    return obj


#: The registered backend names (a live view); entries are :class:`BackendEntry`.
BACKENDS = _Index("hpctrain.backends", "backend", group="hpctrain.backends",
                  plugin=_backend_plugin)


def register_backend(name: str, *, backend: str, config: str, trainer: str,
                     config_keyword: str, requires: Sequence[str] = (), install: str = "",
                     legacy_api: bool = False) -> None:
    """Register a backend: its :class:`Backend`, config dataclass (whose fields, declared
    with :func:`hpctrain.config.toml`, are the keys of the job file's ``[name]`` section),
    trainer and the trainer's keyword for the config, and the modules it needs."""
    BACKENDS.add(name, BackendEntry(name, backend, config, trainer, config_keyword,
                                    tuple(requires), install, legacy_api))


def unregister_backend(name: str) -> None:
    """Forget backend ``name`` (tests)."""
    BACKENDS.remove(name)


def backend_names() -> Tuple[str, ...]:
    """The registered backend names, in registration order."""
    return tuple(BACKENDS)


def backend_entry(name: str) -> BackendEntry:
    """Backend ``name``'s registration (KeyError when there is none)."""
    return BACKENDS.lookup(name)


def backend_entries() -> Tuple[BackendEntry, ...]:
    """Every registration, in order (a snapshot: equal while nothing was (un)registered)."""
    return tuple(BACKENDS.entries().values())


# --------------------------------------------------------------------------- launchers
#: The registered launcher names (a live view); entries are ``"module:Class"`` targets.
LAUNCHERS = _Index("hpctrain.launchers", "launcher", listing=": ",
                   group="hpctrain.launchers", plugin=_class_plugin("Launcher"))


def register_launcher(name: str, target: str) -> None:
    """Register the :class:`~hpctrain.launchers.base.Launcher` ``target``
    (``"module:Class"``) as the ``scheduler.launcher`` value ``name``."""
    LAUNCHERS.add(name, target)


def unregister_launcher(name: str) -> None:
    """Forget launcher ``name`` (tests)."""
    LAUNCHERS.remove(name)


def launcher_names() -> Tuple[str, ...]:
    """The registered launcher names, in registration order."""
    return tuple(LAUNCHERS)


def launcher_class(name: str) -> Any:
    """The launcher class registered as ``name``; ValueError naming the known ones."""
    return LAUNCHERS.load(name)


# --------------------------------------------------------------------------- containers
#: The registered container runtimes (a live view; the ``container.runtime`` values);
#: entries are ``"module:Class"`` targets of
#: :class:`~hpctrain.containers.base.ContainerRuntime` subclasses.
CONTAINERS = _Index("hpctrain.containers", "container runtime", group="hpctrain.containers",
                    plugin=_class_plugin("ContainerRuntime", "name"))


def register_container(name: str, target: str) -> None:
    """Register the container runtime ``target`` (``"module:Class"``) as the
    ``container.runtime`` value ``name``."""
    CONTAINERS.add(name, target)


def container_runtime(name: str) -> Any:
    """The container runtime registered as ``name`` (an instance); ValueError naming the
    known ones."""
    return CONTAINERS.load(name)()


# --------------------------------------------------------------------------- storage
#: The registered storage kinds by URI scheme (a live view); entries are ``"module:Class"``
#: targets of :class:`~hpctrain.storage.base.Storage` subclasses. ``file`` (posix) also
#: takes every plain path.
STORAGES = _Index("hpctrain.storage", "storage scheme")

STORAGE_URI_HINT = ("use a directory on the shared filesystem every node mounts (e.g. "
                    "/lustre/$USER/runs or $SCRATCH/runs; a file:///absolute/path URI "
                    "works too), or an object store's URI (s3://bucket/prefix)")


#: the storage path form of a run or checkpoint given a ``pyarrow.fs`` filesystem object
#: (Ray's ``storage_filesystem``): ``pyarrowfs://<path inside it>``
FILESYSTEM_SCHEME = "pyarrowfs"


def register_storage(scheme: str, target: str) -> None:
    """Register the :class:`~hpctrain.storage.base.Storage` ``target`` (``"module:Class"``)
    for storage paths ``scheme://…``."""
    STORAGES.add(scheme.lower(), target)


def storage_schemes() -> Tuple[str, ...]:
    """The registered URI schemes, ``file`` first."""
    return tuple(STORAGES)


def uri_scheme(value: str) -> Optional[str]:
    """The lower-cased URI scheme of ``value`` (``s3`` in ``s3://b/p``), None for a path.

    >>> uri_scheme("S3://bucket/runs"), uri_scheme("/scratch/runs")
    ('s3', None)
    """
    head, sep, _ = value.partition("://")
    if sep and head[:1].isalpha() and all(c.isalnum() or c in "+.-" for c in head):
        return head.lower()
    return None


def is_local_path(value: str) -> bool:
    """Whether ``value`` names a path on this machine's filesystem (a plain path or a
    ``file://`` URI), not another storage kind's URI (``s3://…``): the one place that
    asks.

    >>> is_local_path("/scratch/runs"), is_local_path("file:///scratch"), is_local_path("s3://b")
    (True, True, False)
    """
    return uri_scheme(value) in (None, "file")


def storage_for(path: str, key: str = "run.storage_path") -> Any:
    """The storage kind of ``path``: posix for a plain path or ``file://``, else the kind
    registered for its scheme; a ConfigError naming ``key`` for a scheme nobody
    registered."""
    scheme = uri_scheme(path) or "file"
    if scheme not in STORAGES:
        known = ", ".join(f"{s}://" for s in STORAGES if s not in ("file", FILESYSTEM_SCHEME))
        raise ConfigError(f"{key}: expected a path on a shared filesystem or a storage URI "
                          f"({known}), got {path!r}: {scheme}:// storage is not supported",
                          hint=STORAGE_URI_HINT)
    return STORAGES.load(scheme)()
