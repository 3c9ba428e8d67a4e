"""podman-hpc (NERSC Perlmutter): ``podman-hpc run --rm --net=host --env=NAME ... -v
SRC:DST IMAGE python ...``. Podman starts the container with an environment of its own, so
each variable the ranks need is passed by name (``--env=SLURM_*`` takes every host
variable with that prefix, ``--env=NAME`` the host's value of one); the ranks use the
host's network, where their peers and ``MASTER_ADDR`` are."""
from __future__ import annotations

from typing import List, Sequence

from .base import Bind, ContainerRuntime


class PodmanHpc(ContainerRuntime):
    name = "podman-hpc"
    title = "podman-hpc"
    passes_env = False
    gpu_default = ("--gpu",)

    def wrapper(self, config, *, binds: Sequence[Bind], gpu: Sequence[str],
                env_names: Sequence[str]) -> List[str]:
        """
        >>> from hpctrain.config import ContainerConfig
        >>> c = ContainerConfig(runtime="podman-hpc", image="me/train:1")
        >>> PodmanHpc().wrapper(c, binds=[("/pscratch/r", "/pscratch/r")], gpu=["--gpu"],
        ...                     env_names=["SLURM_*", "PYTHONPATH"])
        ['podman-hpc', 'run', '--rm', '--net=host', '--gpu', '--env=SLURM_*', '--env=PYTHONPATH', '--volume=/pscratch/r:/pscratch/r', 'me/train:1']
        """
        argv = [self.name, "run", "--rm", "--net=host", *gpu]
        argv += [f"--env={name}" for name in env_names]
        argv += [f"--volume={src}:{dst}" for src, dst in binds]
        return argv + list(config.args) + [config.image]
