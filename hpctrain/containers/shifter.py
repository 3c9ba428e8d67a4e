"""Shifter (NERSC): ``shifter --image=IMAGE --volume=SRC:DST --module=gpu python ...``.
Shifter keeps the host environment."""
from __future__ import annotations

from typing import List, Sequence

from .base import Bind, ContainerRuntime


class Shifter(ContainerRuntime):
    name = "shifter"
    title = "Shifter"
    gpu_default = ("--module=gpu",)

    def wrapper(self, config, *, binds: Sequence[Bind], gpu: Sequence[str],
                env_names: Sequence[str]) -> List[str]:
        """
        >>> from hpctrain.config import ContainerConfig
        >>> c = ContainerConfig(runtime="shifter", image="docker:me/train:1")
        >>> Shifter().wrapper(c, binds=[("/pscratch/r", "/pscratch/r")], gpu=[], env_names=[])
        ['shifter', '--image=docker:me/train:1', '--volume=/pscratch/r:/pscratch/r']
        """
        argv = [self.name, f"--image={config.image}", *gpu]
        argv += [f"--volume={src}:{dst}" for src, dst in binds]
        return argv + list(config.args)
