"""The ``[container]`` section: :class:`ContainerConfig`, the container each rank runs in.

The batch step (the supervisor) runs on the host, where ``srun``/``mpiexec`` are; each
rank it starts runs inside the container, through the runtime named by ``runtime``
(``apptainer``, ``singularity``, ``podman-hpc``, ``shifter``, ``pyxis``, ``charliecloud``:
the container runtime registry, :mod:`hpctrain.containers`). A site config can name its
center's runtime and default binds; a job file adds its image.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ..errors import ConfigError
from ..common.registry import CONTAINERS
from .keys import toml

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")


@dataclass
class ContainerConfig:
    """The container each rank runs in (no ``runtime`` or no ``image``: no container, the
    ranks run on the host; a site config names its runtime, a job its image). ``binds`` maps a host path to its path in the container (``true``: the same
    path; ``""`` removes a bind an earlier layer set); the run directory's parent is always
    bound. ``gpu`` is the runtime's GPU option for a job that asks for GPUs (default: the
    runtime's own, such as ``--nv``; ``""``: none); a CPU job gets none. ``env`` names more host variables
    the ranks need, for runtimes that do not pass the environment (podman-hpc)."""

    runtime: Optional[str] = field(default=None, metadata=toml(
        "str", "The container runtime each rank runs in (none: the ranks run on the host).",
        choices=CONTAINERS))
    image: Optional[str] = field(default=None, metadata=toml(
        "str", "The image: a .sif file (Apptainer), an image name (podman-hpc, Shifter, "
        "pyxis) or an image directory (Charliecloud)."))
    binds: Dict[str, Any] = field(default_factory=dict, metadata=toml(
        "binds", 'Host paths mounted in the container: {"/lustre" = true, "/work/data" = '
        '"/data"}; "" removes one.'))
    gpu: Optional[str] = field(default=None, metadata=toml(
        "str", 'The runtime\'s GPU option for a job that asks for GPUs, e.g. "--nv" or '
        '"--rocm" (default: the runtime\'s own; "": none).'))
    args: List[str] = field(default_factory=list, metadata=toml(
        "strlist", "More arguments for the runtime, before the image (pyxis: srun options)."))
    env: List[str] = field(default_factory=list, metadata=toml(
        "strlist", 'Host variables the ranks need besides the scheduler\'s and hpctrain\'s, '
        'for runtimes that do not pass the environment ("MY_VAR", "NCCL_*").'))
    python: str = field(default="python3", metadata=toml(
        "str", "The Python interpreter inside the container."))

    def __post_init__(self) -> None:
        if self.runtime is not None and self.runtime not in CONTAINERS:
            raise ConfigError(f"container.runtime: expected one of "
                              f"{', '.join(CONTAINERS)}, got {self.runtime!r}")
        if self.image and self.runtime is None:
            raise ConfigError("container.runtime: expected the runtime that runs "
                              f"container.image = {self.image!r}",
                              hint="runtime = " + " or ".join(f'"{c}"' for c in CONTAINERS))
        self.binds = dict(self.binds or {})
        for src, dst in self.binds.items():
            if not os.path.isabs(src):
                raise ConfigError(f"container.binds.{src}: expected an absolute host path "
                                  f"as the key, got {src!r}",
                                  hint='e.g. binds = {"/lustre/project" = true}')
            if dst is True or dst == "":
                continue
            if not isinstance(dst, str) or not os.path.isabs(dst):
                raise ConfigError(f"container.binds.{src}: expected true (the same path) or "
                                  f"the absolute path in the container, got {dst!r}",
                                  hint=f'e.g. binds = {{"{src}" = true}}')
        self.args = list(self.args or [])
        self.env = list(self.env or [])
        for i, name in enumerate(self.env):
            if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
                raise ConfigError(f"container.env[{i}]: expected a variable name (or a "
                                  f"prefix ending in *), got {name!r}",
                                  hint='e.g. env = ["WANDB_MODE", "NCCL_*"]')
        if not self.python or not self.python.strip():
            raise ConfigError("container.python: expected the interpreter in the "
                              "container, got an empty string", hint='e.g. python = "python3"')

    def check_complete(self, file: Optional[str] = None) -> None:
        """ConfigError when a job names a runtime without an image. (A site config names
        its runtime alone: its jobs that give an image run in it, the others on the host;
        so this is checked on the merged spec, only when the runtime is not the site's.)"""
        if self.runtime is not None and not self.image:
            raise ConfigError(f"container.image: expected the image the ranks run in, since "
                              f"container.runtime = \"{self.runtime}\"", file=file,
                              hint='e.g. image = "/project/images/train.sif"')

    @property
    def enabled(self) -> bool:
        """The ranks run in a container: a runtime and an image are set."""
        return self.runtime is not None and bool(self.image)

    def bind_pairs(self) -> List[tuple]:
        """``(host path, container path)`` of every bind, removed ones left out."""
        return [(src, src if dst is True else dst) for src, dst in self.binds.items()
                if dst != ""]
