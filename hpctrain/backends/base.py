"""The backend interface."""
from __future__ import annotations

from typing import Any

from hpctrain._internal.context import Coordinator, SingleProcessCoordinator
from ..cluster_env import WorkerInfo


class Backend:
    """Set up and tear down one framework inside one worker."""

    def __init__(self, config: Any = None):
        self.config = config

    def on_start(self, info: WorkerInfo, *, use_gpu: bool) -> None:
        """Called before the training function, on every rank."""

    def coordinator(self, info: WorkerInfo) -> Coordinator:
        """The collective ``report()`` uses; world size 1 needs none."""
        return SingleProcessCoordinator()

    def on_shutdown(self, info: WorkerInfo) -> None:
        """Called after the training function returned normally."""
