"""The public module for extending hpctrain: a scheduler, launcher, backend, container runtime
or storage kind of a site's own (docs/adding-a-scheduler.md).

A plugin distribution names its classes in an entry-point group (``hpctrain.schedulers``,
``hpctrain.launchers``, ``hpctrain.backends``, ``hpctrain.containers``); a backend's entry point
names a :class:`BackendEntry`. Code that registers by hand (a site's start-up module, a test)
calls the ``register_*`` functions. Both go into the registries of
:mod:`hpctrain.common.registry`; this module is their stable address, which the internals'
folders are not.

>>> from hpctrain.plugins import BackendEntry, backend_names
>>> "torch" in backend_names()
True
"""
from .common.registry import (
    BackendEntry,
    backend_names,
    launcher_names,
    register_backend,
    register_container,
    register_launcher,
    register_scheduler,
    register_storage,
    scheduler_names,
    storage_schemes,
    unregister_backend,
    unregister_launcher,
)

__all__ = ["BackendEntry", "backend_names", "launcher_names", "register_backend",
           "register_container", "register_launcher", "register_scheduler", "register_storage",
           "scheduler_names", "storage_schemes", "unregister_backend", "unregister_launcher"]
