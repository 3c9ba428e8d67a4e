"""Slurm: ``#SBATCH`` directives, submission through submitit, state without sacct.

Submission and job handles are submitit's, extended in :mod:`.slurm_submitit` (imported
only to submit or watch, so rendering stays light). This module holds the directives
and the pure parsers of ``squeue`` and ``scontrol`` output.
"""
from __future__ import annotations

import os
import re
import subprocess
from typing import Any, Dict, List, Optional, Tuple

from ..units import format_slurm_memory, format_slurm_walltime, parse_memory
from .base import (BatchRequest, JobState, Scheduler, check_directive, job_name,
                   merge_directives, warning_seconds)

#: States in which a Slurm job still holds or waits for an allocation.
#: (PREEMPTED is an end state in Slurm's list; STOPPED keeps its allocation.)
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
          "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED", "STAGE_OUT", "SIGNALING",
          "RESV_DEL_HOLD", "UNKNOWN"}
#: Our word for a job Slurm no longer knows (finished longer ago than MinJobAge).
ENDED = "ENDED"


def slurm_directives(request: BatchRequest) -> List[Tuple[str, Any]]:
    """hpctrain's ``#SBATCH`` options for a request, before the spec's own directives."""
    spec = request.spec
    s, sched, fail = spec.scaling, spec.scheduler, spec.run.failure_config
    gpus = s.gpus_each * s.per_node
    mem = parse_memory(s.mem_per_worker) * s.per_node if s.mem_per_worker else None
    return [
        ("job-name", job_name(request)),
        ("nodes", s.nodes),
        ("ntasks-per-node", s.per_node),
        ("cpus-per-task", s.cpus_each),
        # --gpus-per-node=[type:]count: the GPU type is part of the request
        ("gpus-per-node", (f"{s.accelerator_type}:{gpus}" if s.accelerator_type else gpus)
         if gpus else None),
        ("mem", format_slurm_memory(mem) if mem else None),
        ("time", format_slurm_walltime(sched.walltime_s) if sched.time else None),
        ("partition", sched.partition or sched.queue),
        ("account", sched.account),
        ("qos", sched.qos),
        ("constraint", sched.constraint),
        ("dependency", f"afterany:{sched.after}" if sched.after else None),
        # the warning before the time limit (and, where the site sets
        # preempt_send_user_signal, before a preemption) goes to the batch step
        ("signal", f"B:{fail.warning_signal}@{warning_seconds(spec)}"),
        ("requeue", True if fail.requeue else None),
    ]


class SlurmScheduler(Scheduler):
    name = "slurm"
    template = "slurm.sh.j2"
    job_id_var = "SLURM_JOB_ID"
    submit_command = "sbatch"

    def directives(self, request: BatchRequest) -> List[str]:
        """``--key=value`` per directive; ``true`` gives a bare ``--key``.

        A request for 2 nodes × 2 workers with ``time = "1-12:00:00"`` gives
        ``--job-name=…``, ``--nodes=2``, ``--ntasks-per-node=2``, ``--time=1-12:00:00``; a
        one-letter or ``-``-prefixed key is a short option (``t = "5"`` → ``-t 5``). There is
        no ``--output``: the script sends the job's output to ``<run>/logs/slurm-<job>.out``
        itself (a directive could not name a directory that does not exist yet)."""
        spec = request.spec
        lines = []
        for key, value in merge_directives(slurm_directives(request), spec):
            text = check_directive(key, value, spec)
            if key.startswith("-") or len(key) == 1:  # a short option: -t 5, -p debug
                flag = key if key.startswith("-") else f"-{key}"
                lines.append(flag if value is True else f"{flag} {text}")
            else:
                lines.append(f"--{key}" if value is True else f"--{key}={text}")
        return lines

    def submit(self, script_path: str) -> str:
        from .slurm_submitit import HpctrainSlurmExecutor

        return HpctrainSlurmExecutor(folder=_submitit_folder(script_path)).submit_script(
            script_path).job_id

    def requeue(self, job_id: str, script_path: str) -> Optional[str]:
        """``scontrol requeue`` (same job id, ``SLURM_RESTART_COUNT`` + 1; Slurm ends this
        instance at once). Where requeueing is disabled ("Requested operation is presently
        disabled": ``JobRequeue=0``, ``--no-requeue``) the script is submitted again with
        ``--dependency=afterany``; any other failure is an error (the requeue may have
        happened all the same, and two chains must never run)."""
        p = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True)
        if p.returncode == 0:
            return None
        if "disabled" not in p.stderr.lower():
            # (a timeout may have requeued it all the same: never start a second chain)
            raise RuntimeError(f"scontrol requeue {job_id} failed: {p.stderr.strip()}")
        from .._internal.log import get_logger

        get_logger("slurm").warning(f"scontrol requeue {job_id} was refused "
                                    f"({p.stderr.strip()}); submitting the job again instead")
        return self.resubmit(script_path, after=job_id)

    def resubmit(self, script_path: str, *, after: str) -> str:
        p = subprocess.run(["sbatch", "--parsable", f"--dependency=afterany:{after}",
                            script_path], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"sbatch refused the resubmission: {p.stderr.strip()}")
        return p.stdout.strip().split(";")[0]

    def state(self, job_id: str) -> JobState:
        from .slurm_submitit import SqueueFallbackWatcher

        info = SqueueFallbackWatcher().query([job_id]).get(job_id, {})
        state = (info.get("State") or "UNKNOWN").split()[0]
        return JobState(job_id, state, state not in ACTIVE, info.get("Reason", ""),
                        info.get("NodeList", ""))

    def cancel(self, job_id: str) -> None:
        subprocess.run(["scancel", job_id], check=True, capture_output=True, text=True)


def _submitit_folder(script_path: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(script_path)), ".hpctrain", "submitit")


# --------------------------------------------------------------------------- squeue
def squeue_states(job_ids: List[str]) -> Dict[str, Dict[str, str]]:
    """``{job_id: {"State", "NodeList", "Reason"}}`` for the jobs squeue still lists."""
    try:
        out = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i|%T|%N|%r"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_squeue(out.stdout)


def parse_squeue(text: str) -> Dict[str, Dict[str, str]]:
    """Parse ``squeue -h -o "%i|%T|%N|%r"``.

    >>> parse_squeue("12|RUNNING|n[1-2]|None\\n13|PENDING||Resources\\n")["13"]
    {'State': 'PENDING', 'NodeList': '', 'Reason': 'Resources'}
    """
    out: Dict[str, Dict[str, str]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and parts[0]:
            out[parts[0]] = {"State": parts[1], "NodeList": parts[2], "Reason": parts[3]}
    return out


def scontrol_state(job_id: str) -> Dict[str, str]:
    """State of a job squeue no longer lists, from ``scontrol show job`` (kept for
    MinJobAge after the end); ``ENDED`` once Slurm forgot the job."""
    try:
        out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {"State": "UNKNOWN"}
    if out.returncode != 0:
        return {"State": ENDED if "Invalid job id" in out.stderr else "UNKNOWN"}
    return parse_scontrol(out.stdout)


def parse_scontrol(text: str) -> Dict[str, str]:
    """``scontrol -o show job`` → State, Reason, NodeList, ExitCode.

    >>> parse_scontrol("JobId=5 JobName=x JobState=COMPLETED Reason=None NodeList=n1 ExitCode=0:0")
    {'State': 'COMPLETED', 'Reason': 'None', 'NodeList': 'n1', 'ExitCode': '0:0'}
    """
    fields = dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", text))
    return {"State": fields.get("JobState", "UNKNOWN"), "Reason": fields.get("Reason", ""),
            "NodeList": fields.get("NodeList", ""), "ExitCode": fields.get("ExitCode", "")}
