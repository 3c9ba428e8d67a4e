"""The embedded default: no batch system, the supervisor runs in the calling process
(``hpctrain run``, ``Trainer.fit()`` without a scheduler)."""
from __future__ import annotations

from .base import Allocation, Scheduler


class LocalScheduler(Scheduler):
    name = "local"
    title = "local"
    template = None

    @classmethod
    def allocation_from_env(cls, env, *, launcher, read_file) -> Allocation:
        return Allocation("local")
