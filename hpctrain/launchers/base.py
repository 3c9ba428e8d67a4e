"""The launcher interface: start N ranks, learn how each one ended, stop them."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Callable, Dict, List, Optional, Sequence

from hpctrain.common.trust import fix_mode, modes_of

if TYPE_CHECKING:  # (for the hints only)
    from hpctrain.spec import JobSpec

LineSink = Callable[[int, str], None]


@dataclass(frozen=True)
class ExitRecord:
    """How one rank (or, for launchers that see only one process, the whole step: rank -1)
    ended: its exit code (negative: killed by that signal) and when it was seen.
    ``message``: set when the launcher itself could not start the ranks ("the launcher
    mpirun could not start the ranks: ssh: connect to host n2 port 22: Connection
    refused"), reported as that instead of a rank's death."""

    rank: int
    returncode: int
    time: float
    message: str = ""


class WorkerGroup:
    def wait_any_failure(self, timeout: float) -> Optional[List[ExitRecord]]:
        """Block up to ``timeout`` seconds. Returns None while ranks are running and no rank
        failed; else the exit records seen so far (all ranks done, or a failure)."""
        raise NotImplementedError

    def exits(self) -> List[ExitRecord]:
        raise NotImplementedError

    def terminate(self, grace: float = 10.0) -> None:
        """SIGTERM every rank, SIGKILL whatever is left after ``grace`` seconds."""
        raise NotImplementedError

    def ended(self) -> bool:
        """Every rank's process is gone, as far as this launcher can tell (after
        :meth:`terminate`, a process stuck in the kernel may outlive it). The supervisor
        commits what the ranks staged only then. A launcher that cannot tell says False."""
        return False


class Launcher:
    name = "base"
    #: The container each rank runs in (:class:`hpctrain.containers.RankContainer`, set by
    #: :func:`hpctrain.launchers.launcher_for`); None: the ranks run on the host.
    container = None

    @classmethod
    def for_spec(cls, spec: JobSpec, *, name: str, launcher_args: Sequence[str],
                 mpi: bool) -> "Launcher":
        """This launcher for a :class:`~hpctrain.spec.JobSpec`'s ranks in its allocation
        (``name``: the ``scheduler.launcher`` value it is registered as; ``launcher_args``:
        the site's and job's arguments, GPU options gone when the job asks for no GPU;
        ``mpi``: the backend needs its ranks to be one MPI job). The base takes no
        options."""
        return cls()

    def launch(self, *, command: Sequence[str], env: Dict[str, str], num_workers: int,
               log_dir: str, on_line: Optional[LineSink] = None) -> WorkerGroup:
        raise NotImplementedError


def open_log(log_dir: str, name: str) -> BinaryIO:
    """``<log_dir>/<name>`` for appending (``open(..., "ab")``: its ``name`` is the path),
    created with the run's file mode (``0600``, or ``0640`` in a run shared with the
    group) whatever the umask."""
    mode = modes_of(log_dir)[1]

    def opener(path: str, flags: int) -> int:
        fd = os.open(path, flags, mode)
        fix_mode(fd, mode)
        return fd

    return open(os.path.join(log_dir, name), "ab", opener=opener)
