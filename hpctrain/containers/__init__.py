"""Container runtimes: each rank of a job runs inside the ``[container]`` it names.

One small module per runtime (``apptainer``: Apptainer and Singularity; ``podman_hpc``;
``shifter``; ``pyxis``: Enroot through srun; ``charliecloud``), each a
:class:`~hpctrain.containers.base.ContainerRuntime` registered below
(:func:`hpctrain.common.registry.register_container`). :func:`rank_container`
turns a job spec into what the launcher runs: the wrapper before each rank's interpreter,
or the launcher options of a runtime that is a launcher plugin. The batch step itself, which
runs srun/mpiexec, stays on the host.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Tuple

from ..common.registry import (CONTAINERS, container_runtime, register_container,
                               scheduler_class, scheduler_names)
from ..errors import ConfigError
from .base import ContainerRuntime

if TYPE_CHECKING:  # (for the hints only)
    from hpctrain.spec import JobSpec

__all__ = ["CONTAINERS", "ContainerRuntime", "PASSED_ENV", "RankContainer", "passed_env",
           "rank_container", "worker_command"]

register_container("apptainer", "hpctrain.containers.apptainer:Apptainer")
register_container("singularity", "hpctrain.containers.apptainer:Singularity")
register_container("podman-hpc", "hpctrain.containers.podman_hpc:PodmanHpc")
register_container("shifter", "hpctrain.containers.shifter:Shifter")
register_container("pyxis", "hpctrain.containers.pyxis:Pyxis")
register_container("charliecloud", "hpctrain.containers.charliecloud:Charliecloud")

#: The host variables a rank needs, for a runtime that does not pass the environment
#: (podman-hpc), after each scheduler's own (:func:`passed_env`): the launchers' (where
#: each rank learns its place, :mod:`hpctrain.cluster_env`), hpctrain's own (run
#: directory, attempt, the group's secret), the interpreter's and the GPUs'. ``[env]``'s
#: names and ``container.env`` add to them.
PASSED_ENV: Tuple[str, ...] = (
    "PMI_*", "PMIX_*", "PALS_*", "OMPI_*", "MPI_*",
    "HPCTRAIN_*", "MASTER_ADDR", "MASTER_PORT", "PYTHONPATH", "PYTHONSAFEPATH",
    "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def passed_env() -> Tuple[str, ...]:
    """Every registered scheduler's variables (:attr:`Scheduler.env_patterns
    <hpctrain.schedulers.base.Scheduler.env_patterns>`), then :data:`PASSED_ENV`.

    >>> passed_env()[:5]
    ('SLURM_*', 'SLURMD_NODENAME', 'PBS_*', 'LSB_*', 'LSF_*')
    """
    own = (p for name in scheduler_names() for p in scheduler_class(name).env_patterns)
    return tuple(dict.fromkeys([*own, *PASSED_ENV]))


def worker_command(python: List[str], run_path: str) -> List[str]:
    """One rank's command: the interpreter's words, then the worker and the run directory."""
    return [*python, "-m", "hpctrain.worker", run_path]


@dataclass(frozen=True)
class RankContainer:
    """What the launcher runs for a job whose ranks run in a container."""

    runtime: str
    #: the words before the interpreter in each rank's command (a wrapper runtime's)
    prefix: Tuple[str, ...]
    #: options for the launcher (pyxis: ``--container-image=...`` for srun)
    launcher_args: Tuple[str, ...]
    #: the interpreter inside the container
    python: str

    def command(self, run_path: str) -> List[str]:
        return worker_command([*self.prefix, self.python], run_path)


def rank_container(spec: "JobSpec", *, run_path: str,
                   launcher: Optional[str] = None) -> Optional[RankContainer]:
    """The container the ranks of ``spec`` run in (None: no ``[container]``, they run on
    the host). ``run_path`` is the run directory: its parent is bound at the same path, so
    the ranks read the payload and write checkpoints where the supervisor looks.
    ``launcher``: the launcher that starts the ranks (a runtime that is a launcher plugin,
    pyxis, refuses another one).

    >>> from hpctrain.spec import JobSpec
    >>> from hpctrain.config import ContainerConfig
    >>> spec = JobSpec(container=ContainerConfig(runtime="apptainer", image="/p/t.sif",
    ...                binds={"/lustre/data": True}))
    >>> rank_container(spec, run_path="/scratch/me/runs/exp").command("/scratch/me/runs/exp")
    ['apptainer', 'exec', '--bind', '/scratch/me/runs', '--bind', '/lustre/data', '/p/t.sif', 'python3', '-m', 'hpctrain.worker', '/scratch/me/runs/exp']
    """
    config = spec.container
    if not config.enabled:
        return None
    try:
        runtime = container_runtime(config.runtime)
    except ValueError as e:
        raise ConfigError(f"container.runtime: {e}",
                          file=spec.where("container.runtime")) from None
    if runtime.launcher is not None and launcher is not None and launcher != runtime.launcher:
        raise ConfigError(
            f"container.runtime: {runtime.title} starts the ranks through "
            f"{runtime.launcher}'s own options, but scheduler.launcher is {launcher!r}",
            file=spec.where("container.runtime"),
            hint=f'set scheduler.launcher = "{runtime.launcher}", or use a runtime that '
                 "wraps each rank (apptainer, podman-hpc, shifter, charliecloud)")
    run_parent = os.path.dirname(os.path.abspath(run_path))
    binds = [(src, dst) for src, dst in config.bind_pairs() if src != run_parent]
    binds.insert(0, (run_parent, run_parent))
    gpu: List[str] = []
    if spec.scaling.gpus_each:  # a CPU job gets no GPU option, whatever the site says
        gpu = shlex.split(config.gpu) if config.gpu is not None else list(runtime.gpu_default)
    env_names: List[str] = []
    if not runtime.passes_env:
        wanted = [*passed_env(), spec.scheduler.gpu_binding_var, *sorted(spec.env),
                  *config.env]
        env_names = list(dict.fromkeys(wanted))
    return RankContainer(
        runtime=runtime.name,
        prefix=tuple(runtime.wrapper(config, binds=binds, gpu=gpu, env_names=env_names)),
        launcher_args=tuple(runtime.launcher_args(config, binds=binds, gpu=gpu)),
        python=config.python)
