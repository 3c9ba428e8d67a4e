"""The container runtime interface: the argv that runs one rank inside the container.

A runtime is one small class whose pure methods turn the ``[container]`` config, the binds
and the host variables the ranks need into a command-line prefix (the wrapper that runs
each rank: ``apptainer exec --nv -B ... IMAGE``) or, for a runtime that is a launcher
plugin (pyxis), into options of the launcher (``srun --container-image=...``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Sequence, Tuple

if TYPE_CHECKING:  # (for the hints only)
    from hpctrain.config import ContainerConfig

Bind = Tuple[str, str]


class ContainerRuntime:
    #: the ``container.runtime`` value
    name = "base"
    #: how people write its name, for messages
    title = "base"
    #: The runtime hands the host's environment to the container (Apptainer, Shifter,
    #: Charliecloud, pyxis); False: the variables the ranks need are named one by one
    #: (podman-hpc).
    passes_env = True
    #: Its GPU option when the job asks for GPUs and ``container.gpu`` is not set.
    gpu_default: Tuple[str, ...] = ()
    #: The launcher it needs (pyxis: srun), or None for a wrapper that any launcher runs.
    launcher = None

    def wrapper(self, config: "ContainerConfig", *, binds: Sequence[Bind],
                gpu: Sequence[str], env_names: Sequence[str]) -> List[str]:
        """The words before the interpreter in each rank's command (none for a launcher
        plugin)."""
        raise NotImplementedError

    def launcher_args(self, config: "ContainerConfig", *, binds: Sequence[Bind],
                      gpu: Sequence[str]) -> List[str]:
        """Options of the launcher (pyxis' srun options); none for a wrapper."""
        return []


def bind_text(binds: Sequence[Bind], sep: str = ":") -> List[str]:
    """``SRC:DST`` of each bind (``SRC`` alone where both are the same path).

    >>> bind_text([("/lustre", "/lustre"), ("/work/data", "/data")])
    ['/lustre', '/work/data:/data']
    """
    return [src if src == dst else f"{src}{sep}{dst}" for src, dst in binds]
