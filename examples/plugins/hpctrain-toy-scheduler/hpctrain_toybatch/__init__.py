"""toybatch: a toy batch system, as a plugin package shows one (docs/adding-a-scheduler.md).

"Submitting" runs the job script in the background with bash, in a session of its own; the
job's id, process id and exit status are files in a spool folder (``$TOYBATCH_SPOOL``, by
default ``<tmp>/toybatch-<uid>``). Inside the job, ``TOYBATCH_JOB_ID`` says where it runs.
The directives are comments (``#TOY nodes=1``), read by nobody: a real plugin renders its
batch system's own. Only the common options are used: ``scaling.nodes``, ``scheduler.time``.
"""
from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import tempfile
from typing import List, Optional

from hpctrain.errors import ConfigError
from hpctrain.schedulers.base import (Allocation, BatchRequest, JobPhase, JobState, Scheduler,
                                      check_directive, job_name, merge_directives)

__all__ = ["ToyBatchScheduler"]

_WRAPPER = 'bash "$1"; echo $? >"$2.tmp" && mv "$2.tmp" "$2"'


def spool() -> str:
    """The folder holding each job's ``<id>.pid`` and ``<id>.status``."""
    path = os.environ.get("TOYBATCH_SPOOL") or os.path.join(
        tempfile.gettempdir(), f"toybatch-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


class ToyBatchScheduler(Scheduler):
    name = "toybatch"
    template = "toybatch.sh.j2"
    template_dir = os.path.dirname(os.path.abspath(__file__))
    job_id_var = "TOYBATCH_JOB_ID"
    cancel_command = "hpctrain cancel"
    default_launcher = "local"
    sends_warning = False  # the supervisor's own timer warns before scheduler.time ends
    #: the words state() uses → what they mean (Scheduler.job_state)
    phases = {"RUNNING": JobPhase.RUNNING, "COMPLETED": JobPhase.COMPLETED,
              "FAILED": JobPhase.FAILED, "CANCELLED": JobPhase.CANCELLED,
              "ENDED": JobPhase.ENDED}

    # -- rendering --------------------------------------------------------------------
    def directives(self, request: BatchRequest) -> List[str]:
        spec = request.spec
        computed = [("name", job_name(request)), ("nodes", spec.scaling.nodes),
                    ("walltime", spec.scheduler.walltime_s if spec.scheduler.time else None)]
        return [f"{key}={check_directive(key, value, spec)}"
                for key, value in merge_directives(computed, spec)]

    # -- the batch system's commands ----------------------------------------------------
    def check_available(self) -> None:
        """Nothing to look for on PATH: bash runs the job on this machine."""

    def submit(self, script_path: str) -> str:
        job_id = secrets.token_hex(4)
        status = os.path.join(spool(), f"{job_id}.status")
        env = dict(os.environ, TOYBATCH_JOB_ID=job_id)
        with open(os.devnull, "rb") as stdin, open(os.devnull, "wb") as out:
            proc = subprocess.Popen(["bash", "-c", _WRAPPER, "toybatch", script_path, status],
                                    stdin=stdin, stdout=out, stderr=out, env=env,
                                    start_new_session=True)
        with open(os.path.join(spool(), f"{job_id}.pid"), "w") as f:
            f.write(str(proc.pid))
        return job_id

    def state(self, job_id: str) -> JobState:
        status = _read(job_id, "status")
        if status is not None:
            if status == "cancelled":
                return self.job_state(job_id, "CANCELLED")
            return self.job_state(job_id, "COMPLETED" if status == "0" else "FAILED",
                                  reason=f"exit status {status}")
        pid = _read(job_id, "pid")
        if pid is None:
            return self.job_state(job_id, "ENDED")
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return self.job_state(job_id, "ENDED")
        return self.job_state(job_id, "RUNNING", nodes=socket.gethostname())

    def cancel(self, job_id: str) -> None:
        pid = _read(job_id, "pid")
        if pid is None:
            raise ConfigError(f"toybatch: no job {job_id!r} in {spool()}")
        with open(os.path.join(spool(), f"{job_id}.status"), "w") as f:
            f.write("cancelled")
        try:
            os.killpg(int(pid), signal.SIGTERM)
        except ProcessLookupError:
            pass

    # -- inside the job -------------------------------------------------------------------
    @classmethod
    def detect(cls, env) -> bool:
        return bool(env.get(cls.job_id_var))

    @classmethod
    def allocation_from_env(cls, env, *, launcher, read_file) -> Allocation:
        return Allocation(cls.job_id_from_env(env) or "", hosts=(socket.gethostname(),),
                          hosts_var=cls.job_id_var)


def _read(job_id: str, what: str) -> Optional[str]:
    if not job_id.isalnum():
        raise ConfigError(f"toybatch: {job_id!r} is not a toybatch job id")
    try:
        with open(os.path.join(spool(), f"{job_id}.{what}")) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None
