"""The embedded default: no batch system, the supervisor runs in the calling process
(``hpctrain run``, ``Trainer.fit()`` without a scheduler)."""
from __future__ import annotations

from .base import Scheduler


class LocalScheduler(Scheduler):
    name = "local"
    template = None
