"""Local mode (``ScalingConfig(num_workers=0)``, Ray Train 2.x's local mode): the one rank
runs in the calling process, in its thread, so that a debugger (``breakpoint()``, an
IDE's) stops inside the training function. No framework process group is set up
(``world_size`` 1); reports, checkpoints, errors and the run directory are those of any
run, and the supervisor's bookkeeping (attempts, retries) is the same. Output goes to
the driver's own stdout and stderr."""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence

from hpctrain.worker.entry import run_in_process
from .base import ExitRecord, Launcher, LineSink, WorkerGroup


class FinishedGroup(WorkerGroup):
    """The rank of an in-process launch: already ended when ``launch`` returns."""

    def __init__(self, records: List[ExitRecord]):
        self._records = records

    def wait_any_failure(self, timeout: float) -> Optional[List[ExitRecord]]:
        return list(self._records)

    def exits(self) -> List[ExitRecord]:
        return list(self._records)

    def terminate(self, grace: float = 10.0) -> None:
        pass  # nothing left running

    def ended(self) -> bool:
        return True


class InProcessLauncher(Launcher):
    name = "in-process"

    def launch(self, *, command: Sequence[str], env: Dict[str, str], num_workers: int,
               log_dir: str, on_line: Optional[LineSink] = None) -> WorkerGroup:
        returncode = run_in_process(env)
        return FinishedGroup([ExitRecord(0, returncode, time.time())])
