"""Launchers start the worker processes of one attempt inside the allocation.

One small module each: ``local`` (spawn on this machine), ``srun`` (a Slurm job step)
and ``mpiexec`` (``mpiexec``/``mpirun`` of Open MPI, MPICH/Hydra, Intel MPI or Cray
PALS). The supervisor talks to all of them through :class:`Launcher`.
"""
from __future__ import annotations

from typing import Any

from .base import ExitRecord, Launcher, WorkerGroup
from .local import LocalLauncher

__all__ = ["ExitRecord", "Launcher", "WorkerGroup", "LocalLauncher", "launcher_for"]

NAMES = ("local", "srun", "mpiexec", "mpirun")


def launcher_for(spec: Any, *, here: bool = False) -> Launcher:
    """The launcher a :class:`~hpctrain.spec.JobSpec` asks for inside its allocation
    (``scheduler.launcher``; by default srun under Slurm, mpiexec under PBS), or, with
    ``here``, on this machine (the local spawner).

    Backends whose ranks must be one MPI job (``mpi``; ``horovod`` with the MPI
    controller) get ``mpiexec`` instead of the local spawner, and ``srun --mpi=pmix``
    unless ``scheduler.launcher_args`` names an ``--mpi`` plugin itself."""
    from ..backends import needs_mpi_launcher

    sched, scaling = spec.scheduler, spec.scaling
    name = "local" if here else sched.launcher_name
    mpi = needs_mpi_launcher(spec.backend, spec.backend_options)
    if name == "local" and mpi:
        name = "mpiexec"
    if name == "local":
        return LocalLauncher()
    if name == "srun":
        from .srun import SrunLauncher

        extra = tuple(sched.launcher_args)
        if mpi and not any(a == "--mpi" or a.startswith("--mpi=") for a in extra):
            extra = ("--mpi=pmix",) + extra
        return SrunLauncher(nodes=scaling.nodes, workers_per_node=scaling.per_node,
                            cpus_per_worker=scaling.cpus_each,
                            gpus_per_worker=scaling.gpus_each if sched.gpu_binding == "none"
                            else 0, extra_args=extra)
    if name in ("mpiexec", "mpirun"):
        from .mpiexec import DEFAULT_EXPORT_PREFIXES, MpiexecLauncher

        # Open MPI passes only -x variables to ranks on other nodes: also the spec's own
        # [env] and what modules and environments set up
        exports = tuple(DEFAULT_EXPORT_PREFIXES) + tuple(sorted(spec.env)) + (
            "PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX")
        return MpiexecLauncher(flavor="auto", executable=name,
                               workers_per_node=scaling.per_node,
                               extra_args=sched.launcher_args, export_prefixes=exports)
    raise ValueError(f"unknown launcher {name!r}; expected one of: {', '.join(NAMES)}")
