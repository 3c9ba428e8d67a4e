"""The framework-free backend: a Tune function trainable (``Tuner(train_fn)``), or any
training function that sets up its framework itself.

Nothing is imported and no process group is formed (Ray runs a function trainable in a
Tune actor with no framework). With one rank ``report()`` needs no agreement; with more
(``tune.with_resources(f, ScalingConfig(num_workers=2))``, ``job.backend = "function"``)
the ranks agree over hpctrain's TCP group, as the tensorflow backend's do.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hpctrain.common.context import Coordinator
from hpctrain.rendezvous import TcpGroup, group_token
from ..cluster_env import WorkerInfo
from ..config import toml
from ..errors import ConfigError
from .base import Backend


@dataclass
class FunctionConfig:
    """``timeout_s``: how long the ranks of a run with more than one wait for each other
    (one rank waits for no one)."""

    timeout_s: int = field(default=1800, metadata=toml(
        "int", "Seconds to wait for the other ranks before giving up.", minimum=1))

    def __post_init__(self) -> None:
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, int) \
                or self.timeout_s <= 0:
            raise ConfigError(f"function.timeout_s: expected a positive integer, got "
                              f"{self.timeout_s!r}")


class FunctionBackend(Backend):
    def __init__(self, config: Optional[FunctionConfig] = None):
        super().__init__(config or FunctionConfig())
        self._group: Optional[TcpGroup] = None

    def on_start(self, info: WorkerInfo, *, use_gpu: bool) -> None:
        # (a group of one opens no socket)
        self._group = TcpGroup(rank=info.world_rank, world_size=info.world_size,
                               addr=info.master_addr, port=info.master_port,
                               timeout_s=self.config.timeout_s, token=group_token(info))

    def coordinator(self, info: WorkerInfo) -> Coordinator:
        assert self._group is not None, "on_start comes first"
        return self._group

    def on_shutdown(self, info: WorkerInfo) -> None:
        if self._group is not None:
            self._group.close()
