"""MPI backend: mpi4py's ``COMM_WORLD`` is the job's world.

The ranks are started by an MPI launcher — ``mpirun``/``mpiexec`` (locally, under PBS, or
inside a Slurm allocation) or ``srun --mpi=pmix`` — so MPI itself knows every rank. The
backend checks that ``COMM_WORLD`` agrees with the ranks hpctrain derived (a mismatch
means a launcher that MPI does not understand, e.g. ``srun`` without ``--mpi``, where every
rank would be a world of one) and runs ``report()``'s agreement over its own duplicate of
``COMM_WORLD``, so it never mixes with the training function's messages.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import List, Sequence

from hpctrain.common.context import Coordinator, Posted
from ..cluster_env import WorkerInfo
from ..config import toml
from ..errors import ConfigError
from .base import Backend


@dataclass
class MPIConfig:
    """``timeout_s``: kept for symmetry with the other backends (MPI has no timeout of
    its own; a rank that dies makes the launcher end the others)."""

    timeout_s: int = field(default=1800, metadata=toml(
        "int", "Seconds to wait for the other ranks before giving up.", minimum=1))

    def __post_init__(self) -> None:
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, int) or self.timeout_s <= 0:
            raise ConfigError(f"mpi.timeout_s: expected a positive integer, got {self.timeout_s!r}")


class MPICoordinator(Coordinator):
    def __init__(self, comm) -> None:
        from mpi4py import MPI

        self._comm = comm
        self._max = MPI.MAX

    def allreduce_max(self, values: Sequence[int]) -> List[int]:
        send = array("q", [int(v) for v in values])
        recv = array("q", send)
        self._comm.Allreduce(send, recv, op=self._max)
        return list(recv)

    def allreduce_max_async(self, values: Sequence[int]) -> Posted:
        """MPI's non-blocking Iallreduce (the buffers live until it is waited for)."""
        send = array("q", [int(v) for v in values])
        recv = array("q", send)
        request = self._comm.Iallreduce(send, recv, op=self._max)
        buffers = (send, recv)  # alive until the request is complete

        def finish() -> List[int]:
            request.Wait()
            return list(buffers[1])
        return Posted(finish)


class MPIBackend(Backend):
    @classmethod
    def needs_mpi_launcher(cls, options) -> bool:
        return True  # mpi4py's COMM_WORLD is what the launcher set up

    def __init__(self, config: MPIConfig = None):
        super().__init__(config or MPIConfig())
        self._comm = None

    def on_start(self, info: WorkerInfo, *, use_gpu: bool) -> None:
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        if (world.Get_size(), world.Get_rank()) != (info.world_size, info.world_rank):
            raise RuntimeError(
                f"MPI's COMM_WORLD is rank {world.Get_rank()} of {world.Get_size()}, but the "
                f"launcher ({info.launcher}) made this rank {info.world_rank} of "
                f"{info.world_size}: the ranks were not started as one MPI job.\n"
                "HINT: start MPI training functions with mpirun/mpiexec "
                "(scheduler.launcher = \"mpirun\"), or with srun --mpi=pmix "
                "(scheduler.launcher_args = [\"--mpi=pmix\"]) where Slurm's PMIx works "
                "with the installed MPI")
        self._comm = world.Dup()

    def coordinator(self, info: WorkerInfo) -> Coordinator:
        return MPICoordinator(self._comm)

    def on_shutdown(self, info: WorkerInfo) -> None:
        from mpi4py import MPI

        if self._comm is not None:
            self._comm.Free()
            self._comm = None
        # the worker leaves with os._exit (no atexit): finalize here, or mpirun takes the
        # rank's clean exit for an abnormal termination
        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.Finalize()
