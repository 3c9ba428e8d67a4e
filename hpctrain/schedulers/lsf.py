"""IBM Spectrum LSF: ``#BSUB`` directives, ``bsub < job.sh``, ``bjobs``, ``bkill``.

**Not yet run against a real LSF**: the directives follow IBM's bsub reference (LSF
10.1) and the tests check the rendered script and the parsing of ``bsub``/``bjobs``
output against a fake ``bsub`` on PATH (tests/cluster/test_lsf.py).

The request: ``-n <workers>`` slots with ``-R "span[ptile=<workers per node>]"`` (a
worker per slot, the same count on each host), ``-gpu "num=<GPUs per host>"``,
``-M <memory per worker>`` (a per-process limit, as LSF sets it unless the site set
``LSB_JOB_MEMLIMIT=y``), ``-W [hour:]minute``, ``-q`` queue, ``-P`` project (``account``),
``-J`` name and the warning before the run limit (``-wa <signal> -wt <minutes>``).
Directive keys are options as written (``"-alloc_flags" = "smt4"`` → ``#BSUB -alloc_flags
smt4``; a key without ``-`` gets one). On a CSM system (Summit, Lassen) ask for whole
nodes with ``"-nnodes" = 2`` and remove ``-n``/``-R`` with ``""``.

Inside the job: ``LSB_JOBID`` (and ``LSB_JOBINDEX`` for an array task), hosts from
``LSB_DJOB_HOSTFILE`` (one line per slot) or else ``LSB_MCPU_HOSTS`` (``host slots``
pairs); the ranks come from the MPI launcher (``mpiexec``, the default). LSF lists every
host of the allocation: where it includes a launch node that runs no rank (CSM), set
``HPCTRAIN_HOSTS`` in ``[env]``.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, List, Mapping, Optional, Sequence, Tuple

from ..config import SchedulerConfig, kind_field, toml
from ..errors import ConfigError
from ..units import parse_memory
from .base import (Allocation, ArrayJob, BatchRequest, JobPhase, JobState, Scheduler,
                   array_ranges,
                   check_directive, job_name, merge_directives, warning_seconds)
from .controller import run_controller
from ..cluster_env import env_value, hosts_from_nodefile

#: bjobs STAT → the Slurm words JobState uses (LSF's own are terse)
STATES = {"PEND": "PENDING", "WAIT": "PENDING", "RUN": "RUNNING", "PROV": "PENDING",
          "PSUSP": "SUSPENDED", "USUSP": "SUSPENDED", "SSUSP": "SUSPENDED",
          "UNKWN": "UNKNOWN", "DONE": "COMPLETED", "EXIT": "FAILED", "ZOMBI": "FAILED",
          "ENDED": "ENDED"}
#: those words → JobPhase (a suspended job keeps its allocation)
LSF_PHASES = {"PENDING": JobPhase.PENDING, "RUNNING": JobPhase.RUNNING,
              "SUSPENDED": JobPhase.RUNNING, "UNKNOWN": JobPhase.UNKNOWN,
              "COMPLETED": JobPhase.COMPLETED, "FAILED": JobPhase.FAILED,
              "ENDED": JobPhase.ENDED}


def format_lsf_walltime(seconds: int) -> str:
    """``-W``/``-wt``: ``[hour:]minute``, minutes rounded up (LSF counts minutes).

    >>> format_lsf_walltime(5400), format_lsf_walltime(36 * 3600), format_lsf_walltime(61)
    ('1:30', '36:00', '2')
    """
    minutes = max(1, math.ceil(seconds / 60))
    return str(minutes) if minutes < 60 else f"{minutes // 60}:{minutes % 60:02d}"


def format_lsf_memory(mib: int) -> str:
    """``-M`` with an explicit unit (LSF's default unit, KB, is a site setting).

    >>> format_lsf_memory(4096), format_lsf_memory(1500)
    ('4GB', '1500MB')
    """
    return f"{mib // 1024}GB" if mib % 1024 == 0 else f"{mib}MB"


@dataclass
class LsfConfig(SchedulerConfig):
    """The ``[scheduler]`` section of an LSF job: the shared keys and LSF's own options
    (``queue`` → ``#BSUB -q``; ``account`` is LSF's project, ``-P``)."""

    KIND: ClassVar[str] = "lsf"
    queue_option: ClassVar[Optional[str]] = "queue"

    kind: str = kind_field(KIND)
    queue: Optional[str] = field(default=None, metadata=toml(
        "str", "The queue (#BSUB -q).", aka=("partition",)))


def lsf_directives(request: BatchRequest) -> List[Tuple[str, Any]]:
    """hpctrain's ``#BSUB`` options for a request, before the spec's own directives."""
    spec = request.spec
    check_lsf_path(request.run_path, spec)
    s, sched, fail = spec.scaling, spec.scheduler, spec.run.failure_config
    gpu = None
    if s.gpus_each:
        gpu = f"num={s.gpus_each * s.per_node}" + (
            f":gmodel={s.accelerator_type}" if s.accelerator_type else "")
    return [
        ("-J", job_name(request)),
        ("-n", s.num_workers),
        ("-R", f"span[ptile={s.per_node}]"),
        ("-gpu", gpu),
        ("-M", format_lsf_memory(parse_memory(s.mem_per_worker)) if s.mem_per_worker else None),
        ("-W", format_lsf_walltime(sched.walltime_s) if sched.time else None),
        ("-q", sched.queue),
        ("-P", sched.account),
        ("-w", " && ".join(f"ended({j})" for j in sched.after.split(":"))
         if sched.after else None),
        # the warning before the run limit goes to the batch script
        ("-wa", re.sub(r"^SIG", "", fail.warning_signal.upper())),
        ("-wt", format_lsf_walltime(warning_seconds(spec))),
        # LSF's own output (a few lines before the script redirects itself)
        ("-o", f"{request.run_path}/lsf-%J.out"),
    ]


def check_lsf_path(path: str, spec) -> None:
    """The run directory goes into ``-o`` (and is the job's name, ``-J``), where LSF
    replaces ``%J`` by the job id and ``%I`` by the array index; IBM's bsub reference
    gives no escape for a literal ``%``, so a run directory holding one is refused (the
    output would go to another file, or ``-J`` would read ``%<n>`` as an array's limit)."""
    if "%" in path:
        raise ConfigError(
            f"run.storage_path: the run directory {path!r} holds '%', which LSF reads in the "
            "output path (bsub -o) as the start of %J (the job id) or %I (the array index): "
            "the job's output would go to another file", file=spec.where("run.storage_path"),
            hint="use a storage path and run name without '%' (LSF has no escape for it)")


#: Values LSF reads as one quoted string (resource requirement, GPU, dependency).
_QUOTED = {"-R", "-gpu", "-w", "-alloc_flags"}


class LsfScheduler(Scheduler):
    name = "lsf"
    title = "LSF"
    config_class = LsfConfig
    template = "lsf.sh.j2"
    job_id_var = "LSB_JOBID"
    submit_command = "bsub"
    cancel_command = "bkill"
    default_launcher = "mpiexec"
    hostfile_var = "LSB_DJOB_HOSTFILE"
    env_patterns = ("LSB_*", "LSF_*")
    can_requeue = True
    phases = LSF_PHASES
    #: LSF's default MAX_JOB_ARRAY_SIZE (indices 1 … 1000; hpctrain's task t is t + 1).
    max_array_size = 1000
    array_directive_keys = ("-J",)

    def directives(self, request: BatchRequest) -> List[str]:
        spec = request.spec
        lines = []
        for key, value in merge_directives(lsf_directives(request), spec):
            if key == "-w":  # a dependency expression: conditions joined by " && "
                text = " && ".join(check_directive(key, part.strip(), spec)
                                   for part in str(value).split("&&"))
            else:
                text = check_directive(key, value, spec)
            flag = key if key.startswith("-") else f"-{key}"
            if value is True:
                lines.append(flag)
            else:
                lines.append(f'{flag} "{text}"' if flag in _QUOTED else f"{flag} {text}")
        return lines

    # -- commands ------------------------------------------------------------------------
    def submit(self, script_path: str) -> str:
        return self._bsub(script_path, after=None)

    def resubmit(self, script_path: str, *, after: str) -> str:
        """``bsub -w "ended(<after>)" < job.sh`` (the command line wins over ``#BSUB``)."""
        return self._bsub(script_path, after=after)

    def _bsub(self, script_path: str, after: Optional[str]) -> str:
        argv = ["bsub"]
        if after:
            argv += ["-w", " && ".join(f"ended({j})" for j in after.split(":"))]
        # from the caller's directory, as bsub by hand: the job starts there; bsub reads
        # the #BSUB lines only from a script on its standard input
        with open(script_path, "rb") as script:
            text = script.read()
        p = run_controller(argv, input=text, cwd=os.getcwd(), raise_when_busy=True)
        out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
        job_id = parse_bsub_output(out)
        if p.returncode != 0 or job_id is None:
            raise ConfigError(f"bsub refused the job: {(err or out).strip()}",
                              file=script_path,
                              hint="the directives come from the spec and its site; "
                                   "`hpctrain render` shows them")
        return job_id

    def state(self, job_id: str) -> JobState:
        p = run_controller(["bjobs", "-noheader", "-o", "stat exec_host delimiter='|'",
                            job_id], text=True)
        return parse_bjobs(job_id, p.stdout, p.stderr)

    def cancel(self, job_id: str) -> None:
        run_controller(["bkill", job_id], text=True).check_returncode()

    # -- inside the job ------------------------------------------------------------------
    @classmethod
    def detect(cls, env: Mapping[str, str]) -> bool:
        return bool((env.get("LSB_JOBID") or "").strip())

    @classmethod
    def job_id_from_env(cls, env: Mapping[str, str]) -> Optional[str]:
        """``LSB_JOBID``, or ``<id>[<index>]`` for one task of an array.

        >>> LsfScheduler.job_id_from_env({"LSB_JOBID": "12", "LSB_JOBINDEX": "3"})
        '12[3]'
        >>> LsfScheduler.job_id_from_env({"LSB_JOBID": "12", "LSB_JOBINDEX": "0"})
        '12'
        """
        job = (env.get("LSB_JOBID") or "").strip()
        index = (env.get("LSB_JOBINDEX") or "").strip()
        return (f"{job}[{index}]" if index not in ("", "0") else job) or None

    @classmethod
    def allocation_from_env(cls, env: Mapping[str, str], *, launcher: str,
                            read_file: Callable[[str], str]) -> Allocation:
        """Hosts from ``LSB_DJOB_HOSTFILE`` (one line per slot, unique in order), else from
        ``LSB_MCPU_HOSTS`` (``"h1 4 h2 4"``); not read when ``HPCTRAIN_HOSTS`` names them.

        >>> LsfScheduler.allocation_from_env({"LSB_JOBID": "5", "LSB_MCPU_HOSTS": "a 2 b 2"},
        ...                                  launcher="openmpi", read_file=open).hosts
        ('a', 'b')
        """
        job_id = cls.job_id_from_env(env) or ""
        if env_value(env, "HPCTRAIN_HOSTS") is not None:
            return Allocation(job_id)
        path = env_value(env, "LSB_DJOB_HOSTFILE")
        if path is not None:
            try:
                return Allocation(job_id, tuple(hosts_from_nodefile(read_file(path))),
                                  "LSB_DJOB_HOSTFILE")
            except OSError:
                pass  # LSB_MCPU_HOSTS says the same
        pairs = (env_value(env, "LSB_MCPU_HOSTS") or "").split()
        hosts = tuple(dict.fromkeys(pairs[0::2]))
        return Allocation(job_id, hosts, "LSB_MCPU_HOSTS" if hosts else None)

    # -- job arrays ----------------------------------------------------------------------
    def array_job(self, tasks: Sequence[int], offset: int,
                  max_concurrent: Optional[int]) -> ArrayJob:
        """``-J "hpctrain[<indices>]%<max>"``: LSF array indices start at 1, so task t is
        index t + 1."""
        ranges = array_ranges([t + 1 for t in tasks])
        return ArrayJob(
            {"-J": f"hpctrain[{ranges}]" + (f"%{max_concurrent}" if max_concurrent else "")},
            f"$(( {offset} + LSB_JOBINDEX - 1 ))",
            "$HPCTRAIN_TRIAL_DIR/logs/lsf-${LSB_JOBID}_${LSB_JOBINDEX}.out", [])

    def array_task_id(self, array_id: str, task: int) -> str:
        return f"{array_id}[{task + 1}]"


def parse_bsub_output(text: str) -> Optional[str]:
    """The job id in bsub's answer.

    >>> parse_bsub_output("Job <4242> is submitted to queue <normal>.\\n")
    '4242'
    >>> parse_bsub_output("Request aborted by esub. Job not submitted.") is None
    True
    """
    m = re.search(r"Job <(\d+)> is submitted", text)
    return m.group(1) if m else None


def parse_bjobs(job_id: str, out: str, err: str = "") -> JobState:
    """``bjobs -noheader -o "stat exec_host delimiter='|'"``; a job bjobs no longer
    knows ("Job <id> is not found") has ENDED.

    >>> js = parse_bjobs("7", "RUN|4*h1:4*h2\\n")
    >>> js.state, js.phase is JobPhase.RUNNING, js.done, js.nodes
    ('RUNNING', True, False, '4*h1:4*h2')
    >>> parse_bjobs("7", "", "Job <7> is not found\\n").state
    'ENDED'
    """
    line = next((l for l in out.splitlines() if l.strip()), "")
    if not line:
        return LsfScheduler.job_state(job_id, "ENDED" if "not found" in err else "UNKNOWN")
    stat, _, hosts = line.strip().partition("|")
    return LsfScheduler.job_state(job_id, STATES.get(stat.strip(), "UNKNOWN"), "",
                                  "" if hosts.strip() == "-" else hosts.strip())
