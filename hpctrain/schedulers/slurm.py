"""Slurm: ``#SBATCH`` directives, submission through submitit, state without sacct.

Submission and job handles are submitit's, extended in :mod:`.slurm_submitit` (imported
only to submit or watch, so rendering stays light). This module holds the directives
and the pure parsers of ``squeue`` and ``scontrol`` output.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

from ..common.log import get_logger
from ..config import SchedulerConfig, kind_field, toml
from ..errors import ConfigError
from ..units import DAY, check_mib, check_seconds, clock, parse_memory
from .base import (Allocation, ArrayJob, BatchRequest, JobPhase, JobState, Scheduler,
                   TaskVariables, array_ranges, check_directive, job_name, merge_directives,
                   warning_seconds)
from .controller import run_controller
from ..cluster_env import env_int, env_value, expand_hostlist, first_set, parse_tasks_per_node


def format_slurm_walltime(seconds: int) -> str:
    """Render seconds for Slurm's ``--time``.

    ``"D-HH:MM:SS"`` from one day up, else ``"HH:MM:SS"`` (hours zero-padded to 2):
    ``90`` -> ``"00:01:30"``, ``86399`` -> ``"23:59:59"``, ``86400`` -> ``"1-00:00:00"``,
    ``93784`` -> ``"1-02:03:04"``, ``360000`` -> ``"4-04:00:00"``.
    Raises :class:`UnitError` for non-integers and values below 1.
    """
    seconds = check_seconds(seconds)
    days, rest = divmod(seconds, DAY)
    if days:
        return f"{days}-{clock(rest)}"
    return clock(rest)


def format_slurm_memory(mib: int) -> str:
    """Render MiB for Slurm's ``--mem``: whole ``G`` when divisible by 1024, else ``M``.

    ``4096`` -> ``"4G"``, ``1536`` -> ``"1536M"``, ``512`` -> ``"512M"``.
    Raises :class:`UnitError` for non-integers and values below 1.
    """
    mib = check_mib(mib)
    if mib % 1024 == 0:
        return f"{mib // 1024}G"
    return f"{mib}M"


#: Our word for a job Slurm no longer knows (finished longer ago than MinJobAge).
ENDED = "ENDED"
#: Slurm's job states (squeue(1), "JOB STATE CODES") → JobPhase. PREEMPTED is an end
#: state in Slurm's list; STOPPED and SUSPENDED keep their allocation. A word Slurm adds
#: later is taken as an end (Slurm.unlisted_phase).
SLURM_PHASES = {
    **dict.fromkeys(("PENDING", "CONFIGURING", "RESV_DEL_HOLD"), JobPhase.PENDING),
    **dict.fromkeys(("RUNNING", "COMPLETING", "RESIZING", "SUSPENDED", "STOPPED",
                     "STAGE_OUT", "SIGNALING"), JobPhase.RUNNING),
    **dict.fromkeys(("REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"), JobPhase.REQUEUED),
    "UNKNOWN": JobPhase.UNKNOWN, "COMPLETED": JobPhase.COMPLETED,
    **dict.fromkeys(("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "SPECIAL_EXIT"),
                    JobPhase.FAILED),
    **dict.fromkeys(("CANCELLED", "REVOKED"), JobPhase.CANCELLED),
    **dict.fromkeys(("TIMEOUT", "DEADLINE"), JobPhase.TIMEOUT),
    "PREEMPTED": JobPhase.PREEMPTED, ENDED: JobPhase.ENDED,
}


@dataclass
class SlurmConfig(SchedulerConfig):
    """The ``[scheduler]`` section of a Slurm job: the shared keys and Slurm's own options,
    each rendered as the ``#SBATCH`` option of the same name. ``TorchTrainer(...,
    scheduler=SlurmConfig(partition="gpu", time="02:00:00"))``."""

    KIND: ClassVar[str] = "slurm"
    queue_option: ClassVar[Optional[str]] = "partition"

    kind: str = kind_field(KIND)
    partition: Optional[str] = field(default=None, metadata=toml(
        "str", "The partition (#SBATCH --partition).", aka=("queue",)))
    qos: Optional[str] = field(default=None, metadata=toml(
        "str", "The quality of service (#SBATCH --qos)."))
    constraint: Optional[str] = field(default=None, metadata=toml(
        "str", 'Node features, e.g. "a100&hbm80g" (#SBATCH --constraint).'))
    reservation: Optional[str] = field(default=None, metadata=toml(
        "str", "An advance reservation the job runs in (#SBATCH --reservation)."))

    def selectors(self) -> Dict[str, Optional[str]]:
        return {"partition": self.partition, "qos": self.qos, "constraint": self.constraint}


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
        ("partition", sched.partition),
        ("account", sched.account),
        ("qos", sched.qos),
        ("constraint", sched.constraint),
        ("reservation", sched.reservation),
        ("dependency", f"afterany:{sched.after}" if sched.after else None),
        # the warning before the time limit (and, where the site sets
        # preempt_send_user_signal, before a preemption) goes to the batch step
        ("signal", f"B:{fail.warning_signal}@{warning_seconds(spec)}"),
        ("requeue", True if fail.requeue else None),
    ]


class SlurmScheduler(Scheduler):
    name = "slurm"
    title = "Slurm"
    config_class = SlurmConfig
    template = "slurm.sh.j2"
    job_id_var = "SLURM_JOB_ID"
    submit_command = "sbatch"
    cancel_command = "scancel"
    default_launcher = "srun"
    can_requeue = True
    phases = SLURM_PHASES
    unlisted_phase = JobPhase.ENDED  # not a state that holds or waits for an allocation
    #: Slurm's default MaxArraySize (indices 0 … 1000).
    max_array_size = 1001
    array_directive_keys = ("array", "a", "-a")
    task_source = "srun"
    # srun(1) OUTPUT ENVIRONMENT VARIABLES: SLURM_PROCID "the MPI rank (or relative process
    # ID)", SLURM_LOCALID "node local task ID", SLURM_NODEID "the relative node ID of the
    # current node", SLURM_STEP_NUM_TASKS "number of processes in the step",
    # SLURM_STEP_TASKS_PER_NODE "number of processes per node within the step".
    # https://slurm.schedmd.com/srun.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES
    task_variables = TaskVariables(
        rank="SLURM_PROCID", local_rank="SLURM_LOCALID", node_rank="SLURM_NODEID",
        size=("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"),
        tasks_per_node=("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
        num_nodes=("SLURM_STEP_NUM_NODES", "SLURM_NNODES"),
        step=("SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NUM_TASKS"),
        cpus_per_task="SLURM_CPUS_PER_TASK", mpi_type="SLURM_MPI_TYPE")
    env_patterns = ("SLURM_*", "SLURMD_NODENAME")
    #: Launchers whose ranks are exactly the tasks of the current Slurm step (srun's own,
    #: and Cray PALS through ``srun --mpi=cray_shasta``), so that the step's node list and
    #: step id are the same on every rank.
    step_scoped = ("slurm", "pals")

    # -- inside the job ------------------------------------------------------------------
    @classmethod
    def detect(cls, env: Mapping[str, str]) -> bool:
        return first_set(env, "SLURM_JOB_ID", "SLURM_JOBID")[0] is not None

    @classmethod
    def job_id_from_env(cls, env: Mapping[str, str]) -> Optional[str]:
        """``SLURM_JOB_ID``; for one task of an array ``<array>_<task>``, never its bare
        ``SLURM_JOB_ID``, which for a task of the array equals the array's own id
        (``scontrol requeue <that>`` requeues them all).

        >>> SlurmScheduler.job_id_from_env({"SLURM_JOB_ID": "9", "SLURM_ARRAY_JOB_ID": "7",
        ...                                 "SLURM_ARRAY_TASK_ID": "2"})
        '7_2'
        """
        if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
            return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
        return env.get("SLURM_JOB_ID") or None

    @classmethod
    def allocation_from_env(cls, env: Mapping[str, str], *, launcher: str,
                            read_file: Callable[[str], str]) -> Allocation:
        """Hosts: ``SLURM_STEP_NODELIST`` when the ranks are the tasks of that very step,
        else the job-wide ``SLURM_JOB_NODELIST``/``SLURM_NODELIST`` (ranks started by
        ``mpirun`` or over ssh carry the variables of *different* steps on different
        nodes); the step id goes into the derived port under the same rule."""
        step_scoped = launcher in cls.step_scoped
        job_id = first_set(env, "SLURM_JOB_ID", "SLURM_JOBID")[1] or ""
        names = (("SLURM_STEP_NODELIST",) if step_scoped else ()) + (
            "SLURM_JOB_NODELIST", "SLURM_NODELIST")
        hosts_var, nodelist = first_set(env, *names)
        hosts = tuple(expand_hostlist(nodelist)) if nodelist is not None else ()
        step = (first_set(env, "SLURM_STEP_ID", "SLURM_STEPID")[1] or "") if step_scoped else ""
        restart_count = 0
        # env.c sets SLURM_RESTART_COUNT only once the job was requeued (count > 0).
        if env_value(env, "SLURM_RESTART_COUNT") is not None:
            restart_count = env_int("SLURM_RESTART_COUNT", env["SLURM_RESTART_COUNT"].strip(),
                                    what="a count >= 0", source="Slurm")
        return Allocation(job_id, hosts, hosts_var if hosts else None, step, restart_count)

    @classmethod
    def tasks_per_node_counts(cls, text: str) -> List[int]:
        return parse_tasks_per_node(text)

    @classmethod
    def tasks_per_node_text(cls, per_node: int, nodes: int) -> str:
        """srun's ``SLURM_STEP_TASKS_PER_NODE`` format.

        >>> SlurmScheduler.tasks_per_node_text(2, 1), SlurmScheduler.tasks_per_node_text(4, 3)
        ('2', '4(x3)')
        """
        return str(per_node) if nodes == 1 else f"{per_node}(x{nodes})"

    # -- job arrays ----------------------------------------------------------------------
    def array_job(self, tasks: Sequence[int], offset: int,
                  max_concurrent: Optional[int]) -> ArrayJob:
        """``--array=<ranges>[%max]``; the index is ``SLURM_ARRAY_TASK_ID``."""
        return ArrayJob(
            {"array": array_ranges(tasks) + (f"%{max_concurrent}" if max_concurrent else "")},
            f"$(( {offset} + SLURM_ARRAY_TASK_ID ))",
            "$HPCTRAIN_TRIAL_DIR/logs/slurm-${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}.out",
            [])

    def array_active(self, job_id: str) -> bool:
        try:
            p = run_controller(["squeue", "-h", "-r", "-j", job_id, "-o", "%i"],
                               text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return True  # cannot tell: do not assume it ended
        if p.returncode != 0:
            return "invalid job id" not in p.stderr.lower()
        return bool(p.stdout.strip())

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
        happened all the same, and two chains must never run). A busy controller is asked
        again (:func:`~.controller.run_controller`); a call that timed out may have gone
        through after all (slurmctld reads it once it runs again): then the next one finds
        the job pending, or is ended with this job by the requeue, and that is a success."""
        p = run_controller(["scontrol", "requeue", job_id], raise_when_busy=True, text=True)
        if p.returncode == 0:
            return None
        if p.retries and (p.returncode < 0 or "pending" in p.stderr.lower() or
                          scontrol_state(job_id)["State"] in REQUEUED_STATES):
            get_logger("slurm").warning(
                f"scontrol requeue {job_id}: {p.stderr.strip() or f'signal {-p.returncode}'}"
                " (an earlier try that timed out requeued the job)")
            return None
        if "disabled" not in p.stderr.lower():
            # (a timeout may have requeued it all the same: never start a second chain)
            raise RuntimeError(f"scontrol requeue {job_id} failed: {p.stderr.strip()}")

        get_logger("slurm").warning(f"scontrol requeue {job_id} was refused "
                                    f"({p.stderr.strip()}); submitting the job again instead")
        return self.resubmit(script_path, after=job_id)

    def requeue_excluding(self, job_id: str, script_path: str,
                          exclude: Sequence[str]) -> Optional[str]:
        """A pending job's node list can be changed, a running one's cannot (``scontrol
        update ExcNodeList`` refuses it, and the requeued job is this very one, ending
        only when this process does): with nodes to exclude the run continues in a new
        submission of its script, ``sbatch --exclude=… --dependency=afterany:<job>``."""
        if exclude and os.path.exists(script_path):
            return self.resubmit(script_path, after=job_id, exclude=exclude)
        return super().requeue_excluding(job_id, script_path, exclude)

    def partition_nodes(self) -> Optional[int]:
        partition = os.environ.get("SLURM_JOB_PARTITION", "")
        if not partition:
            return None
        p = run_controller(["scontrol", "-o", "show", "partition", partition], text=True)
        m = re.search(r"\bTotalNodes=(\d+)", p.stdout or "")
        return int(m.group(1)) if p.returncode == 0 and m else None

    def resubmit(self, script_path: str, *, after: str, exclude: Sequence[str] = ()) -> str:
        p = run_controller(["sbatch", "--parsable", f"--dependency=afterany:{after}",
                            *([f"--exclude={','.join(exclude)}"] if exclude else []),
                            script_path], raise_when_busy=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"sbatch refused the resubmission: {p.stderr.strip()}")
        return p.stdout.strip().split(";")[0]

    def state(self, job_id: str) -> JobState:
        from .slurm_submitit import SqueueFallbackWatcher

        info = SqueueFallbackWatcher().query([job_id]).get(job_id, {})
        state = (info.get("State") or "UNKNOWN").split()[0]
        return self.job_state(job_id, state, info.get("Reason", ""), info.get("NodeList", ""))

    def cancel(self, job_id: str) -> None:
        run_controller(["scancel", job_id], text=True).check_returncode()


#: ``scontrol show job`` states of a job that was requeued (or is being requeued).
REQUEUED_STATES = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "COMPLETING")


def _submitit_folder(script_path: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(script_path)), ".hpctrain", "submitit")


# --------------------------------------------------------------------------- squeue
def squeue_states(job_ids: List[str]) -> Dict[str, Dict[str, str]]:
    """``{job_id: {"State", "NodeList", "Reason"}}`` for the jobs squeue still lists."""
    try:
        out = run_controller(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i|%T|%N|%r"],
                             text=True, timeout=30)
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
        out = run_controller(["scontrol", "-o", "show", "job", job_id], text=True,
                             timeout=30)
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
