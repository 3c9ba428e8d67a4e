"""The backend interface."""
from __future__ import annotations

from typing import Any, Mapping

from hpctrain._internal.base.context import Coordinator, SingleProcessCoordinator
from ..cluster_env import WorkerInfo


class Backend:
    """Set up and tear down one framework inside one worker."""

    def __init__(self, config: Any = None):
        self.config = config

    @classmethod
    def needs_mpi_launcher(cls, options: Mapping[str, Any]) -> bool:
        """True when, with these options (the job file's section), the ranks must be
        started by an MPI launcher (mpirun/mpiexec, or srun with an ``--mpi`` plugin)."""
        return False

    def on_start(self, info: WorkerInfo, *, use_gpu: bool) -> None:
        """Called before the training function, on every rank."""

    def coordinator(self, info: WorkerInfo) -> Coordinator:
        """The collective ``report()`` uses; world size 1 needs none."""
        return SingleProcessCoordinator()

    def on_shutdown(self, info: WorkerInfo) -> None:
        """Called after the training function returned normally."""
