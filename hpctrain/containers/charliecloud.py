"""Charliecloud (LANL; unprivileged, user namespaces): ``ch-run -b SRC:DST IMAGE -- python
...``, where IMAGE is an image directory (or a SquashFS file). ch-run keeps the host
environment. A bind's destination must exist in the image (make the directory in it once,
or add ``-w`` to ``container.args`` to mount the image read-write). GPUs come from the
libraries ``ch-fromhost`` put into the image, so there is no GPU option."""
from __future__ import annotations

from typing import List, Sequence

from .base import Bind, ContainerRuntime


class Charliecloud(ContainerRuntime):
    name = "charliecloud"
    title = "Charliecloud"

    def wrapper(self, config, *, binds: Sequence[Bind], gpu: Sequence[str],
                env_names: Sequence[str]) -> List[str]:
        """
        >>> from hpctrain.config import ContainerConfig
        >>> c = ContainerConfig(runtime="charliecloud", image="/var/tmp/img")
        >>> Charliecloud().wrapper(c, binds=[("/r", "/r")], gpu=[], env_names=[])
        ['ch-run', '--bind=/r:/r', '/var/tmp/img', '--']
        """
        argv = ["ch-run", *gpu]
        argv += [f"--bind={src}:{dst}" for src, dst in binds]
        return argv + list(config.args) + [config.image, "--"]
