"""The backend interface."""
from __future__ import annotations

from typing import Any, Mapping

from hpctrain.common.context import Coordinator, SingleProcessCoordinator
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

    def prepare_environment(self) -> None:
        """Called on every rank before anything of the user's is unpickled: sets the
        environment variables its framework reads when it is imported. Imports no
        framework."""

    def on_start(self, info: WorkerInfo, *, use_gpu: bool) -> None:
        """Called before the training function, on every rank (after
        :meth:`prepare_environment` and the payload's unpickling)."""

    def coordinator(self, info: WorkerInfo) -> Coordinator:
        """The collective ``report()`` uses; world size 1 needs none."""
        return SingleProcessCoordinator()

    def on_shutdown(self, info: WorkerInfo) -> None:
        """Called after the training function returned normally."""
