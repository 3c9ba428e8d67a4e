"""Launchers start the worker processes of one attempt inside the allocation.

One small module each: ``local`` (spawn on this machine), ``srun`` (a Slurm job step)
and ``mpiexec`` (``mpiexec``/``mpirun`` of Open MPI, MPICH/Hydra, Intel MPI or Cray
PALS). The supervisor talks to all of them through :class:`Launcher`.
"""
from __future__ import annotations

import shlex
import shutil
from typing import TYPE_CHECKING, List, Optional, Sequence

from ..common.registry import (LAUNCHERS, default_launcher, get_scheduler, launcher_class,
                                      register_launcher)
from ..backends import needs_mpi_launcher
from ..containers import rank_container, worker_command
from .base import ExitRecord, Launcher, WorkerGroup
from .local import LocalLauncher
from .mpiexec import detect_flavor, flavor_from_args, mpiexec_argv
from .pbsdsh import pbsdsh_argv
from .srun import srun_argv

if TYPE_CHECKING:  # (for the hints only)
    from hpctrain.spec import JobSpec

__all__ = ["ExitRecord", "Launcher", "WorkerGroup", "LocalLauncher", "launcher_for",
           "launch_line", "without_gpu_args"]

# The launcher registry (hpctrain.common.registry): one line per ``scheduler.launcher``
# value, in the order the docs and the schema list them.
register_launcher("srun", "hpctrain.launchers.srun:SrunLauncher")
register_launcher("mpiexec", "hpctrain.launchers.mpiexec:MpiexecLauncher")
register_launcher("mpirun", "hpctrain.launchers.mpiexec:MpiexecLauncher")
register_launcher("pbsdsh", "hpctrain.launchers.pbsdsh:PbsdshLauncher")
register_launcher("local", "hpctrain.launchers.local:LocalLauncher")

#: The registered launcher names (a live view).
NAMES = LAUNCHERS


def launcher_for(spec: JobSpec, *, here: bool = False,
                 run_path: Optional[str] = None,
                 allocation_kind: Optional[str] = None) -> Launcher:
    """The launcher a :class:`~hpctrain.spec.JobSpec` asks for inside its allocation
    (``scheduler.launcher``; by default the scheduler's own: srun under Slurm, mpiexec
    under PBS), or, with ``here``, on this machine (the local spawner). The name is looked
    up in the launcher registry and the class builds itself (:meth:`Launcher.for_spec`).
    ``allocation_kind``: a run started by hand inside that batch system's allocation
    (``salloc``, ``qsub -I``): its launcher (``scheduler.launcher``, else srun/mpiexec).

    Backends whose ranks must be one MPI job (``mpi``; ``horovod`` with the MPI
    controller) get ``mpiexec`` instead of the local spawner, and ``srun --mpi=pmix``
    unless ``scheduler.launcher_args`` names an ``--mpi`` plugin itself.

    With ``run_path`` (the run directory) and a ``[container]``, the launcher's
    ``container`` is the :class:`~hpctrain.containers.RankContainer` its ranks run in
    (a launcher plugin's options, pyxis' ``--container-image``, among its arguments)."""

    sched, scaling = spec.scheduler, spec.scaling
    launcher_args = without_gpu_args(sched.launcher_args) if not scaling.gpus_each \
        else list(sched.launcher_args)
    name = "local" if here else sched.launcher_name
    if allocation_kind is not None:
        name = sched.launcher or default_launcher(allocation_kind)
    mpi = needs_mpi_launcher(spec.backend, spec.backend_options)
    if name == "local" and mpi:
        name = "mpiexec"
    container = None if run_path is None else rank_container(spec, run_path=run_path,
                                                             launcher=name)
    if container is not None:
        launcher_args = list(container.launcher_args) + launcher_args
    launcher = launcher_class(name).for_spec(spec, name=name, launcher_args=launcher_args,
                                             mpi=mpi)
    launcher.container = container
    return launcher


def _is_gpu_option(arg: str) -> bool:
    name, _, value = arg.partition("=")
    return arg.startswith("-") and ("gpu" in name.lower() or (
        name == "--gres" and value.lower().startswith("gpu")))


def without_gpu_args(args) -> list:
    """A site's launcher arguments without its GPU options, for a job that asks for no
    GPU (``--gpu-bind=none`` or ``--gpus-per-task 1`` of a GPU site would make srun ask
    for, or bind, GPUs a CPU node does not have).

    >>> without_gpu_args(["--gpu-bind=none", "--cpu-bind=cores", "--gpus-per-task", "1",
    ...                   "--gres=gpu:4", "--depth=8"])
    ['--cpu-bind=cores', '--depth=8']
    """
    out, skip_value = [], False
    for arg in args:
        if skip_value:
            skip_value = False
            if not arg.startswith("-"):
                continue
        if _is_gpu_option(arg):
            skip_value = "=" not in arg  # "--gpu-bind none": its value goes too
            continue
        out.append(arg)
    return out


_RUN_DIR = "\0RUN_DIR\0"


def launch_line(spec: JobSpec, *, python: Sequence[str], run_dir: str,
                run_path: str) -> List[str]:
    """What each attempt of the batch job runs to start the ranks, as shell text
    (``hpctrain render`` shows it as a comment): the srun or mpiexec argv, with the
    container runtime's words around each rank's interpreter. ``python``: the batch step's
    interpreter (its words); ``run_dir`` is the run directory as the script spells it,
    ``run_path`` the path itself. For ``mpiexec``, whose dialect is read from
    ``mpiexec --version`` inside the job, the form of the MPI found here is shown (MPICH's
    when there is none), and a second line says so."""

    launcher = launcher_for(spec, run_path=run_path)
    command = launcher.container.command(_RUN_DIR) if launcher.container is not None \
        else worker_command(list(python), _RUN_DIR)
    notes: List[str] = []
    if launcher.name == "srun":

        argv = srun_argv(nodes=launcher.nodes, workers_per_node=launcher.workers_per_node,
                         cpus_per_worker=launcher.cpus_per_worker,
                         gpus_per_worker=launcher.gpus_per_worker,
                         extra_args=launcher.extra_args, command=command)
    elif launcher.name == "mpiexec":


        # shown: the dialect the launcher_args are written in (a site's own MPI), else
        # this machine's, else MPICH's
        flavor, why = flavor_from_args(launcher.extra_args), "as its launcher_args say"
        if flavor is None and shutil.which(launcher.executable):
            why = "as here"
            try:
                flavor = detect_flavor(launcher.executable)
            except Exception:  # noqa: BLE001 - only a display choice
                flavor = None
        notes.append(f"(the {launcher.executable} dialect is read from `"
                     f"{launcher.executable} --version` in the job; shown: "
                     + (f"{flavor}, {why}" if flavor else "mpich, the MPI of this "
                        "machine is unknown") + "; Open MPI adds -x NAME per variable)")
        flavor = flavor or "mpich"

        var = get_scheduler(spec.scheduler.kind).hostfile_var
        hostfile = f"${var}" if var else None
        argv = mpiexec_argv(flavor, executable=launcher.executable,
                            num_workers=spec.scaling.num_workers,
                            workers_per_node=launcher.workers_per_node,
                            hostfile=hostfile,
                            extra_args=launcher.extra_args, command=command, env={})
    elif launcher.name == "pbsdsh":
        argv = pbsdsh_argv("pbsdsh", node_index="NODE", env_file="ENV_FILE", command=command,
                           extra_args=launcher.extra_args)
        notes.append(f"(one per rank, {spec.scaling.num_workers} in all, "
                     f"{launcher.workers_per_node or 'all slots'} per node: NODE is the "
                     "node's first line in $PBS_NODEFILE, ENV_FILE the rank's environment, "
                     "logs/<job>/.tm-env.rank-R)")
    else:
        local = f"{launcher.name}: {spec.scaling.num_workers} local processes"
        if launcher.container is not None:
            local += ", each: " + shlex.join(command)
        return [local.replace(shlex.quote(_RUN_DIR), run_dir)]
    text = shlex.join(argv)
    if launcher.name == "mpiexec" and hostfile:  # the variable expands in the job
        text = text.replace(shlex.quote(hostfile), f'"{hostfile}"')
    return [text.replace(shlex.quote(_RUN_DIR), run_dir).replace(_RUN_DIR, run_dir)] + notes
