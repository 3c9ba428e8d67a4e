"""Launchers start the worker processes of one attempt inside the allocation.

One small module each: ``local`` (spawn on this machine), and — on a cluster — ``srun``
and ``mpiexec``. The supervisor talks to all of them through :class:`Launcher`.
"""
from __future__ import annotations

from .base import ExitRecord, Launcher, WorkerGroup
from .local import LocalLauncher

__all__ = ["ExitRecord", "Launcher", "WorkerGroup", "LocalLauncher", "get_launcher"]


def get_launcher(name: str) -> Launcher:
    if name == "local":
        return LocalLauncher()
    raise ValueError(f"unknown launcher {name!r}; expected one of: local")
