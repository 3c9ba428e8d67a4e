"""Enroot through pyxis (NVIDIA's srun plugin): no wrapper, srun itself starts each task in
the container: ``srun --container-image=IMAGE --container-mounts=SRC:DST,...``. pyxis
keeps the task's environment (the ``SLURM_*`` variables, hpctrain's); the GPUs are
Enroot's hooks' business, so there is no GPU option. The ranks must be started by srun
(``scheduler.launcher = "srun"``, Slurm's default)."""
from __future__ import annotations

from typing import List, Sequence

from .base import Bind, ContainerRuntime


class Pyxis(ContainerRuntime):
    name = "pyxis"
    title = "pyxis (Enroot)"
    launcher = "srun"

    def wrapper(self, config, *, binds: Sequence[Bind], gpu: Sequence[str],
                env_names: Sequence[str]) -> List[str]:
        return []

    def launcher_args(self, config, *, binds: Sequence[Bind],
                      gpu: Sequence[str]) -> List[str]:
        """
        >>> from hpctrain.config import ContainerConfig
        >>> c = ContainerConfig(runtime="pyxis", image="nvcr.io#nvidia/pytorch:24.01-py3")
        >>> Pyxis().launcher_args(c, binds=[("/lustre/r", "/lustre/r"), ("/d", "/data")],
        ...                       gpu=[])
        ['--container-image=nvcr.io#nvidia/pytorch:24.01-py3', '--container-mounts=/lustre/r:/lustre/r,/d:/data']
        """
        argv = [f"--container-image={config.image}"]
        if binds:
            argv.append("--container-mounts=" + ",".join(f"{s}:{d}" for s, d in binds))
        return argv + list(gpu) + list(config.args)
