"""Apptainer (and its predecessor Singularity, same command line): ``apptainer exec --nv
-B SRC:DST IMAGE python ...``. It passes the host environment into the container by
default (unless ``--cleanenv`` is among ``container.args``), so the scheduler's variables
and hpctrain's reach each rank; ``$HOME``, ``/tmp`` and the working directory are bound
by default, other paths are listed in ``-B``."""
from __future__ import annotations

from typing import List, Sequence

from .base import Bind, ContainerRuntime, bind_text


class Apptainer(ContainerRuntime):
    name = "apptainer"
    title = "Apptainer"
    gpu_default = ("--nv",)

    def wrapper(self, config, *, binds: Sequence[Bind], gpu: Sequence[str],
                env_names: Sequence[str]) -> List[str]:
        """
        >>> from hpctrain.config import ContainerConfig
        >>> c = ContainerConfig(runtime="apptainer", image="/p/img.sif", args=["--cleanenv"])
        >>> Apptainer().wrapper(c, binds=[("/scratch/runs", "/scratch/runs")], gpu=["--nv"],
        ...                     env_names=[])
        ['apptainer', 'exec', '--nv', '--bind', '/scratch/runs', '--cleanenv', '/p/img.sif']
        """
        argv = [self.name, "exec", *gpu]
        for text in bind_text(binds):
            argv += ["--bind", text]
        return argv + list(config.args) + [config.image]


class Singularity(Apptainer):
    name = "singularity"
    title = "Singularity"
