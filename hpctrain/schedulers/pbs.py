"""PBS (OpenPBS, PBS Pro): ``#PBS`` directives; ``qsub`` of the script, its job id and the
job's state from ``qstat`` in :mod:`hpctrain.schedulers.pbs_submitit`.

Directive keys: one starting with ``-`` is an option as written (``"-r" = "y"`` →
``#PBS -r y``); a ``-W`` attribute (``depend``, ``block``, ``umask``, …) gives
``#PBS -W depend=…``; a key ``select:<res>`` adds ``:<res>=<value>`` to the select chunk
(Polaris' ``system=polaris``); any other key is a resource, ``#PBS -l key=value``.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, List, Mapping, Optional, Sequence, Tuple

from ..config import SchedulerConfig, kind_field, toml
from ..errors import ConfigError
from ..units import check_mib, check_seconds, clock, parse_memory, parse_walltime
from .base import (Allocation, ArrayJob, BatchRequest, JobPhase, JobState, Scheduler,
                   check_directive,
                   job_name, merge_directives)
from .controller import run_controller
from ..cluster_env import env_value, hosts_from_nodefile


def format_pbs_walltime(seconds: int) -> str:
    """Render seconds for PBS ``-l walltime=``: ``"HH:MM:SS"``, hours not wrapped.

    ``90`` -> ``"00:01:30"``, ``93784`` -> ``"26:03:04"``, ``360000`` -> ``"100:00:00"``.
    Raises :class:`UnitError` for non-integers and values below 1.
    """
    return clock(check_seconds(seconds))


def format_pbs_memory(mib: int) -> str:
    """Render MiB for PBS ``mem=``: ``"gb"`` when divisible by 1024, else ``"mb"``.

    ``4096`` -> ``"4gb"``, ``1536`` -> ``"1536mb"``, ``512`` -> ``"512mb"``.
    Raises :class:`UnitError` for non-integers and values below 1.
    """
    mib = check_mib(mib)
    if mib % 1024 == 0:
        return f"{mib // 1024}gb"
    return f"{mib}mb"


#: ``qsub -W`` attributes (OpenPBS qsub man page).
W_ATTRIBUTES = {"depend", "block", "umask", "group_list", "stagein", "stageout", "sandbox",
                "pwd", "run_count", "release_nodes_on_stageout", "tolerate_node_failures",
                "max_run_subjobs"}


def select_chunk(request: BatchRequest) -> str:
    """``N:ncpus=C:mpiprocs=W[:ngpus=G][:mem=M]`` plus the spec's ``select:<res>`` keys.

    2 nodes × 4 workers, 8 CPUs and 1 GPU each → ``2:ncpus=32:mpiprocs=4:ngpus=4``."""
    spec = request.spec
    s = spec.scaling
    chunk = f"{s.nodes}:ncpus={(s.cpus_each or 1) * s.per_node}:mpiprocs={s.per_node}"
    gpus = s.gpus_each * s.per_node
    if gpus:
        chunk += f":ngpus={gpus}"
    if s.accelerator_type:

        raise ConfigError(
            f"scaling.accelerator_type: {s.accelerator_type!r} cannot be requested from PBS "
            "as such: PBS has no standard GPU-type resource, each site defines its own",
            file=spec.where("scaling.accelerator_type"),
            hint="leave accelerator_type out and name the site's resource in the select "
                 "chunk, e.g. [scheduler.directives] \"select:gpu_type\" = \"a100\" "
                 "(NCAR's name; see your site's PBS documentation)")
    if s.mem_per_worker:
        chunk += f":mem={format_pbs_memory(parse_memory(s.mem_per_worker) * s.per_node)}"
    for key, value in spec.scheduler.directives.items():
        if key.startswith("select:") and value != "":
            chunk += f":{key.split(':', 1)[1]}={check_directive(key, value, spec)}"
    return chunk


@dataclass
class PbsConfig(SchedulerConfig):
    """The ``[scheduler]`` section of a PBS job: the shared keys and PBS's own options
    (``queue`` → ``#PBS -q``)."""

    KIND: ClassVar[str] = "pbs"
    queue_option: ClassVar[Optional[str]] = "queue"

    kind: str = kind_field(KIND)
    queue: Optional[str] = field(default=None, metadata=toml(
        "str", "The queue (#PBS -q).", aka=("partition",)))


def pbs_directives(request: BatchRequest) -> List[Tuple[str, Any]]:
    """hpctrain's ``#PBS`` options for a request, before the spec's own directives."""
    spec = request.spec
    sched = spec.scheduler
    return [
        ("-N", job_name(request)),
        ("select", select_chunk(request)),
        ("place", "scatter" if spec.scaling.nodes > 1 else None),
        ("walltime", format_pbs_walltime(sched.walltime_s) if sched.time else None),
        ("-q", sched.queue),
        ("-A", sched.account),
        ("-r", "y"),
        ("-j", "oe"),
        # PBS's own output file (<id>.OU; a few lines before the script redirects
        # itself): into the run's logs, not the submission directory
        ("-o", f"{request.run_path}/logs/"),
        ("depend", f"afterany:{sched.after}" if sched.after else None),
    ]


def is_subjob(job_id: str) -> bool:
    """True for one subjob of an array (``12[3].server``), not the array (``12[].server``)
    or a job.

    >>> is_subjob("12[3].pbshost"), is_subjob("12[].pbshost"), is_subjob("12.pbshost")
    (True, False, False)
    """
    return re.match(r"^\d+\[\d+\]", job_id) is not None


class PbsScheduler(Scheduler):
    name = "pbs"
    title = "PBS"
    config_class = PbsConfig
    template = "pbs.sh.j2"
    job_id_var = "PBS_JOBID"
    submit_command = "qsub"
    cancel_command = "qdel"
    default_launcher = "mpiexec"
    hostfile_var = "PBS_NODEFILE"
    env_patterns = ("PBS_*",)
    #: PBS sends no signal before the walltime ends: the supervisor's timer warns.
    sends_warning = False
    can_requeue = True
    #: the words of pbs_submitit.pbs_state (qstat's job_state letter and Exit_status)
    phases = {"PENDING": JobPhase.PENDING, "RUNNING": JobPhase.RUNNING,
              "COMPLETING": JobPhase.RUNNING, "REQUEUED": JobPhase.REQUEUED,
              "UNKNOWN": JobPhase.UNKNOWN, "COMPLETED": JobPhase.COMPLETED,
              "FAILED": JobPhase.FAILED, "OUT_OF_MEMORY": JobPhase.FAILED,
              "CANCELLED": JobPhase.CANCELLED, "TIMEOUT": JobPhase.TIMEOUT,
              "ENDED": JobPhase.ENDED}
    unlisted_phase = JobPhase.ENDED
    #: PBS's default max_array_size (indices 0 … 9999).
    max_array_size = 10000
    array_directive_keys = ("-J", "J", "max_run_subjobs")

    # -- inside the job ------------------------------------------------------------------
    @classmethod
    def detect(cls, env: Mapping[str, str]) -> bool:
        return bool((env.get("PBS_JOBID") or "").strip())

    @classmethod
    def allocation_from_env(cls, env: Mapping[str, str], *, launcher: str,
                            read_file: Callable[[str], str]) -> Allocation:
        """Hosts: the ``PBS_NODEFILE`` lines (one per MPI slot), unique, in order of first
        appearance; not read when ``HPCTRAIN_HOSTS`` names them."""
        job_id = env_value(env, "PBS_JOBID") or ""
        path = env_value(env, "PBS_NODEFILE")
        if path is None or env_value(env, "HPCTRAIN_HOSTS") is not None:
            return Allocation(job_id)
        try:
            text = read_file(path)
        except OSError as exc:
            raise ConfigError(f"PBS_NODEFILE={path!r} could not be read ({exc}); "
                              f"expected the job's host file",
                              hint="PBS writes it on the job's first node; is this "
                                   "process running inside the job?") from None
        return Allocation(job_id, tuple(hosts_from_nodefile(text)), "PBS_NODEFILE")

    def job_walltime(self, job_id: str) -> Optional[int]:
        """``Resource_List.walltime`` of a PBS job in seconds (``qstat -f -F json``; a
        queue's ``resources_default.walltime`` limits a job just the same), None when
        qstat cannot tell."""
        from .pbs_submitit import qstat_jobs

        try:
            p = run_controller(["qstat", "-f", "-F", "json", job_id], text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        for job in (qstat_jobs(p.stdout) or {}).values():
            walltime = (job.get("Resource_List") or {}).get("walltime")
            if walltime:
                try:
                    return int(parse_walltime(str(walltime)))
                except Exception:  # noqa: BLE001 - an unreadable walltime: no timer
                    return None
        return None

    # -- job arrays ----------------------------------------------------------------------
    def array_job(self, tasks: Sequence[int], offset: int,
                  max_concurrent: Optional[int]) -> ArrayJob:
        """``-J lo-hi`` (PBS arrays need two indices or more: one task is a plain job) and
        ``max_run_subjobs``; ``-J`` takes no list, so the subjobs between the listed
        tasks end at once."""
        lo, hi = min(tasks), max(tasks)
        directives: dict = {}
        if lo < hi:
            directives["-J"] = f"{lo}-{hi}"
            if max_concurrent and max_concurrent < hi - lo + 1:
                directives["max_run_subjobs"] = max_concurrent
            index = f"$(( {offset} + PBS_ARRAY_INDEX ))"
        else:
            index = str(offset + lo)
        prelude: List[str] = []
        if len(tasks) < hi - lo + 1:
            listed = " ".join(str(offset + t) for t in sorted(tasks))
            prelude = [
                "# -J takes no list: the subjobs between this array's trials end here at once",
                f'case " {listed} " in *" $HPCTRAIN_TRIAL_INDEX "*) ;; *)',
                '  echo "hpctrain: trial $HPCTRAIN_TRIAL_INDEX is not run by this array"; '
                'exit 0 ;;',
                "esac",
            ]
        return ArrayJob(directives, index, "$HPCTRAIN_TRIAL_DIR/logs/pbs-${PBS_JOBID}.out",
                        prelude)

    def is_array(self, tasks: Sequence[int]) -> bool:
        return min(tasks) < max(tasks)

    def array_task_id(self, array_id: str, task: int) -> str:
        """``<seq>[<task>].<server>``.

        >>> PbsScheduler().array_task_id("2[].pbshost", 1)
        '2[1].pbshost'
        """
        return array_id.replace("[]", f"[{task}]", 1)

    def directives(self, request: BatchRequest) -> List[str]:
        spec = request.spec
        lines = []
        for key, value in merge_directives(pbs_directives(request), spec):
            if key.startswith("select:"):
                continue  # folded into the select chunk
            text = check_directive(key, value, spec)
            if key.startswith("-"):
                lines.append(key if value is True else f"{key} {text}")
            elif key in W_ATTRIBUTES:
                lines.append(f"-W {key}={text}")
            else:
                lines.append(f"-l {key}" if value is True else f"-l {key}={text}")
        return lines

    def cd_line(self) -> str:
        # A PBS job starts in $HOME, not where it was submitted (shared/notes/pbs-facts.md).
        return 'cd "$PBS_O_WORKDIR"'

    def submit(self, script_path: str) -> str:
        from submitit.core.utils import FailedSubmissionError

        from .pbs_submitit import PbsExecutor

        folder = os.path.join(os.path.dirname(os.path.abspath(script_path)), ".hpctrain",
                              "submitit")
        try:
            # from the caller's directory, as qsub by hand: it becomes PBS_O_WORKDIR
            job_id = PbsExecutor(folder=folder).submit_script(script_path, cwd=os.getcwd()).job_id
        except (FailedSubmissionError, RuntimeError) as e:
            raise ConfigError(f"qsub refused the job: {str(e).strip()}", file=script_path,
                              hint="the directives come from the spec and its site; "
                                   "`hpctrain render` shows them") from None
        depend = _script_depend(script_path)
        if depend and self.state(job_id).done:
            raise ConfigError(
                f"the PBS server dropped job {job_id} at once: its dependency {depend} names "
                "a job it does not know or that has already finished (qsub accepted it)",
                file=script_path, hint="scheduler.after must name a job that is still queued "
                                       "or running; leave it out to start now")
        return job_id

    def state(self, job_id: str) -> JobState:
        from .pbs_submitit import PbsInfoWatcher

        watcher = PbsInfoWatcher()
        # We submitted this job, so qstat's "Unknown Job Id" (153: a server without job
        # history forgets finished jobs) means it ended: mark it as seen before asking.
        watcher._info_dict[job_id] = {"State": "PENDING"}
        info = watcher.get_info(job_id, mode="force")
        state = info.get("State") or "UNKNOWN"
        if state == "FINISHED":
            state = "ENDED"  # gone from qstat; the run directory tells how it ended
        return self.job_state(job_id, state, info.get("comment", ""), info.get("exec_host", ""))

    def cancel(self, job_id: str) -> None:
        run_controller(["qdel", job_id], text=True).check_returncode()

    def requeue(self, job_id: str, script_path: str) -> str:
        """``qsub -W depend=afterany:<this job> job.sh``; from one subjob of an array (a
        sweep's trial) ``qsub job.sh`` without a dependency: PBS takes none on a single
        subjob (only on a whole array, ``<seq>[]``, which would wait for every other
        trial). The job that continues the run waits for the run directory's lock, which
        this one has let go of."""
        return self.resubmit(script_path, after=None if is_subjob(job_id) else job_id)

    def resubmit(self, script_path: str, *, after: Optional[str]) -> str:
        """``qsub -W depend=afterany:<after> job.sh`` (``qrerun`` is for operators): the new
        job waits until that one ended (``after`` None: no dependency). The command-line
        ``-W depend`` takes precedence over a ``#PBS -W depend`` in the script.

        The jobs of ``after`` that have ended already (or that the server no longer
        knows) are left out: OpenPBS accepts a dependency on them and then drops the new
        job silently. If one ended between that look and the ``qsub`` (the new job is
        gone at once), the job is submitted again without it."""
        active = [j for j in (after.split(":") if after else []) if not self.state(j).done]
        job_id = self._qsub(script_path, active)
        if active and self.state(job_id).done:
            job_id = self._qsub(script_path, [j for j in active if not self.state(j).done])
        return job_id

    @staticmethod
    def _qsub(script_path: str, after: List[str]) -> str:
        from .pbs_submitit import parse_qsub_output

        depend = ["-W", f"depend=afterany:{':'.join(after)}"] if after else []
        p = run_controller(["qsub", *depend, script_path], raise_when_busy=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"qsub refused the resubmission: {p.stderr.strip()}")
        return parse_qsub_output(p.stdout)


def _script_depend(script_path: str) -> Optional[str]:
    """The ``#PBS -W depend=…`` of a script, if any."""
    try:
        with open(script_path, errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"^#PBS\s+-W\s+depend=(\S+)", text, re.MULTILINE)
    return m.group(1) if m else None
