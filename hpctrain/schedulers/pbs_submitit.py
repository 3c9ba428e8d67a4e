"""PBS (OpenPBS / PBS Pro) as a submitit plugin: ``submitit.AutoExecutor(folder, cluster="pbs")``.

Registered under the ``submitit`` entry-point group (``executor`` / ``job_environment``
in ``pyproject.toml``). It extends submitit 1.5.4's own classes; what is PBS-specific
follows the behaviour observed on a live OpenPBS 23.06 server
(``shared/notes/pbs-facts.md``):

* a job starts in ``$HOME``: every script goes ``cd "$PBS_O_WORKDIR"`` first;
* ``qsub`` prints the job id (``1.pbshost``, arrays ``2[].pbshost``) on stdout;
* ``qstat -f -F json -x <ids>`` reports jobs; an unknown id exits 153, a finished
  job queried without ``-x`` exits 35; a server without history (``job_history_enable``
  false, the default) answers ``-x`` with no job at all (exit 0, "not configured to
  maintain job history"), and forgets a job once it finished (153);
* a walltime kill exits -29, a job killed by signal N exits 256+N; ``qdel`` sends
  SIGTERM then SIGKILL after the queue's ``kill_delay`` (about 10 s);
* PBS gives **no** warning before the walltime, and ``qrerun`` needs operator
  privilege.

Requeue (submitit's checkpoint/requeue for ``Checkpointable`` functions): since
``qrerun`` is privileged, :meth:`PbsJobEnvironment._requeue` resubmits the job's own
submission script with ``qsub -W depend=afterany:$PBS_JOBID`` from
``$PBS_O_WORKDIR``, copies the checkpointed pickle to the successor's id and leaves a
``<id>_requeued_as.txt`` marker that :class:`PbsJob` follows, so ``job.result()``
on the original handle returns the successor's result. Because PBS does not warn
before the walltime, a job keeps its own timer (:class:`PbsSignalHandler`): shortly
before the limit it signals itself with submitit's preemption signal (USR2 by default)
and checkpoints + requeues then; a SIGTERM near the limit does the same (within
``kill_delay``), while an earlier SIGTERM (``qdel``, preemption) only checkpoints, if
the function can, and exits.

Not done: ``map_array``/batches are submitted as separate jobs (no ``-J`` arrays); with
several tasks, every rank writes to task 0's log files.
"""
from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
import typing as tp
from pathlib import Path

from submitit.core import core, job_environment, logger, utils

from ..cluster_env import hosts_from_nodefile
from ..units import format_pbs_memory, format_pbs_walltime, parse_walltime

__all__ = [
    "PbsExecutor", "PbsInfoWatcher", "PbsJob", "PbsJobEnvironment", "PbsSignalHandler",
    "parse_qsub_output", "pbs_state",
]

# ----------------------------------------------------------------------------- job ids

# "<digits>[.server]", array "<digits>[].server", subjob "<digits>[<index>].server".
_JOB_ID_RE = re.compile(r"\d+(?:\[\d*\])?(?:\.[A-Za-z0-9][A-Za-z0-9._-]*)?")


def parse_qsub_output(text: tp.Union[bytes, str]) -> str:
    """The job id that ``qsub`` printed, e.g. ``"1.pbshost"`` or ``"2[].pbshost"``.

    Surrounding whitespace is stripped; if a site wrapper printed lines before it, the
    last non-empty line is taken. Raises :class:`submitit.core.utils.FailedSubmissionError`
    when that line does not look like ``<digits>[.server]`` / ``<digits>[].server``.
    """
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    candidate = lines[-1] if lines else ""
    if not _JOB_ID_RE.fullmatch(candidate):
        raise utils.FailedSubmissionError(
            f"could not read a PBS job id from qsub's output {text!r}; expected "
            "'<digits>[.server]' (e.g. '1.pbshost') or an array id '<digits>[].server'")
    return candidate


# ----------------------------------------------------------------------------- states

#: submitit's states that are not done (``core.InfoWatcher.is_done``).
_NOT_DONE = frozenset({"READY", "PENDING", "RUNNING", "UNKNOWN", "REQUEUED", "COMPLETING", "PREEMPTED"})
#: Finished, outcome unknown (no exit status, or the job left the server's history).
FINISHED = "FINISHED"

_PBS_PENDING = frozenset("QHWTSU")  # queued, held, waiting, transit, suspended, user-busy
_JOB_SUBSTATE_TERMINATED = 91  # finished because it was deleted (qdel)
_SIGNAL_BASE = 256  # a job killed by signal N exits 256+N
# Negative PBS exit codes (JOB_EXEC_*): -29 walltime, -28 cput, -27 mem, -26 vmem.
_TIMEOUT_CODES = frozenset({-29, -28})
_MEMORY_CODES = frozenset({-27, -26})


def _as_int(value: object) -> tp.Optional[int]:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def pbs_state(job: tp.Mapping[str, tp.Any]) -> str:
    """Map one job of ``qstat -f -F json`` to submitit's state vocabulary.

    ============================  ==========================================
    PBS                           submitit
    ============================  ==========================================
    Q H W T S U                   PENDING (queued, held, waiting, transit,
                                  suspended: not done)
    R, B (array begun)            RUNNING
    E (exiting)                   COMPLETING
    M (moved to another server)   UNKNOWN (it goes on elsewhere)
    F / X, -29 (walltime), -28    TIMEOUT
    F / X, substate 91 (deleted)  CANCELLED (``qdel``; any exit status, 0 too)
    F / X, Exit_status 0          COMPLETED
    F / X, 256+15 (SIGTERM)       CANCELLED (what ``qdel`` sends first)
    F / X, -27, -26 (mem, vmem)   OUT_OF_MEMORY
    F / X, other non-zero         FAILED (other signals included)
    F / X, no Exit_status         FINISHED (done, outcome unknown)
    ============================  ==========================================
    """
    letter = str(job.get("job_state", "")).strip().upper()
    if letter in _PBS_PENDING:
        return "PENDING"
    if letter in ("R", "B"):
        return "RUNNING"
    if letter == "E":
        return "COMPLETING"
    if letter not in ("F", "X"):
        return "UNKNOWN"
    status = _as_int(job.get("Exit_status"))
    deleted = _as_int(job.get("substate")) == _JOB_SUBSTATE_TERMINATED
    if status in _TIMEOUT_CODES:
        return "TIMEOUT"
    if deleted or status == _SIGNAL_BASE + signal.SIGTERM:
        # qdel: a job that stopped cleanly on the SIGTERM has Exit_status 0 (live server)
        return "CANCELLED"
    if status == 0:
        return "COMPLETED"
    if status is None:
        return FINISHED
    if status in _MEMORY_CODES:
        return "OUT_OF_MEMORY"
    return "FAILED"


def _flatten(job: tp.Mapping[str, tp.Any]) -> tp.Dict[str, str]:
    """Attributes as strings; nested objects (``Resource_List``...) as ``"Resource_List.walltime"``."""
    out: tp.Dict[str, str] = {}
    for key, value in job.items():
        if isinstance(value, dict):
            for sub, subvalue in value.items():
                out[f"{key}.{sub}"] = str(subvalue)
        else:
            out[key] = str(value)
    return out


def qstat_jobs(text: tp.Union[bytes, str]) -> tp.Optional[tp.Dict[str, tp.Any]]:
    """The ``Jobs`` object of ``qstat -F json`` output ({} for a header without it); None if not JSON."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    try:
        data = json.loads(text, strict=False)  # strict=False: raw control characters in values
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    jobs = data.get("Jobs", {})
    return jobs if isinstance(jobs, dict) else {}


class PbsInfoWatcher(core.InfoWatcher):
    """Polls ``qstat -f -F json -x <ids…>`` for every watched job at once.

    Falls back to plain ``qstat -f -F json`` (for good) if ``-x`` is refused, or gives no
    job because the server keeps no history (OpenPBS's default). A job that
    qstat no longer knows (exit 153) after having been seen, or that it calls finished
    (exit 35, history kept but not asked for), is done: it keeps its last terminal state,
    else becomes ``FINISHED``.
    """

    def __init__(self, delay_s: int = 60) -> None:
        super().__init__(delay_s=delay_s)
        self._use_history = True

    def _make_command(self) -> tp.Optional[tp.List[str]]:
        to_check = sorted(self._registered - self._finished)
        if not to_check:
            return None
        return ["qstat", "-f", "-F", "json"] + (["-x"] if self._use_history else []) + to_check

    def get_state(self, job_id: str, mode: str = "standard") -> str:
        """submitit-style state of ``job_id`` (see :func:`pbs_state`), ``UNKNOWN`` before any news."""
        info = self.get_info(job_id, mode=mode)
        return info.get("State") or "UNKNOWN"

    def read_info(self, string: tp.Union[bytes, str]) -> tp.Dict[str, tp.Dict[str, str]]:
        """``{job_id: {"State": ..., "job_state": "R", "Exit_status": "0", ...}}`` from qstat's JSON."""
        jobs = qstat_jobs(string)
        if not jobs:
            return {}
        out: tp.Dict[str, tp.Dict[str, str]] = {}
        for job_id, job in jobs.items():
            if isinstance(job, dict):
                info = _flatten(job)
                info["State"] = pbs_state(job)
                out[job_id] = info
        return out

    def _run(self, command: tp.List[str]) -> "subprocess.CompletedProcess[bytes]":
        return subprocess.run(command, capture_output=True, check=False, timeout=120)

    def update(self) -> None:
        """One qstat call for all watched jobs (same contract as ``core.InfoWatcher.update``)."""
        command = self._make_command()
        if command is None:
            return
        ids = sorted(self._registered - self._finished)
        self._num_calls += 1
        log = logger.get_logger()
        try:
            log.debug(f"Call #{self.num_calls} - Command {' '.join(command)}")
            proc = self._run(command)
            if self._use_history and _history_refused(proc):
                log.info(f"qstat -x gives no job ({proc.stderr.decode(errors='replace').strip()}); "
                         "finished jobs will show as FINISHED once they leave qstat")
                self._use_history = False
                proc = self._run([c for c in command if c != "-x"])
        except (OSError, subprocess.SubprocessError) as e:
            log.warning(f"Call #{self.num_calls} - Bypassing qstat error {e}, status may be inaccurate.")
        else:
            self._output = proc.stdout
            info = self._match_ids(self.read_info(proc.stdout), ids)
            stderr = proc.stderr.decode(errors="replace")
            for job_id in ids:
                if job_id in info:
                    continue
                reason = _missing_reason(job_id, proc.returncode, stderr, single=len(ids) == 1)
                if reason == "finished" or (reason == "unknown" and job_id in self._info_dict):
                    info[job_id] = self._finished_info(job_id)
            self._info_dict.update(info)
            if proc.returncode not in (0, 35, 153):
                log.warning(f"Call #{self.num_calls} - qstat exited {proc.returncode}: {stderr.strip()}")
        self._last_status_check = time.time()
        for job_id in self._registered - self._finished:
            if self.is_done(job_id, mode="cache"):
                self._finished.add(job_id)

    @staticmethod
    def _match_ids(info: tp.Dict[str, tp.Dict[str, str]], ids: tp.Sequence[str]) -> tp.Dict[str, tp.Dict[str, str]]:
        """Also file qstat's answer under the id we asked for when the server spelled it differently
        (``1.pbshost`` vs ``1.pbshost.example.org``): same sequence number and array part."""
        wanted = {job_id.split(".", 1)[0]: job_id for job_id in ids}
        for key in list(info):
            asked = wanted.get(key.split(".", 1)[0])
            if asked is not None and asked not in info:
                info[asked] = info[key]
        return info

    def _finished_info(self, job_id: str) -> tp.Dict[str, str]:
        last = dict(self._info_dict.get(job_id, {}))
        if last.get("State", "UNKNOWN").upper() in _NOT_DONE:
            last["State"] = FINISHED
        return last


#: What OpenPBS's qstat says to ``-x`` when the server keeps no job history
#: (``job_history_enable=false``, its default): the JSON header without any job, exit 0,
#: for queued and running jobs too (shared/notes/pbs-live-findings.md).
_NO_HISTORY = "not configured to maintain job history"


def _history_refused(proc: "subprocess.CompletedProcess[bytes]") -> bool:
    """Whether ``qstat -x`` could not report: a qstat without that option, or a server
    without job history."""
    if _NO_HISTORY in proc.stderr.decode(errors="replace"):
        return True
    return proc.returncode not in (0, 35, 153) and qstat_jobs(proc.stdout) is None


def _missing_reason(job_id: str, returncode: int, stderr: str, *, single: bool) -> tp.Optional[str]:
    """Why qstat said nothing about ``job_id``: ``"finished"`` (35), ``"unknown"`` (153) or None."""
    for line in stderr.splitlines():
        if job_id in line:
            lowered = line.lower()
            if "finished" in lowered:
                return "finished"
            if "unknown job id" in lowered:
                return "unknown"
    if single:
        return {35: "finished", 153: "unknown"}.get(returncode)
    return None


# ----------------------------------------------------------------------------- jobs

def _requeue_marker(folder: tp.Union[str, Path], job_id: str) -> Path:
    """File naming the successor that ``job_id`` resubmitted itself as."""
    return utils.JobPaths(folder, job_id=job_id).folder / f"{job_id}_requeued_as.txt"


class PbsJob(core.Job[core.R]):
    """A submitit job on PBS: ``qdel`` cancels it, :class:`PbsInfoWatcher` watches it.

    When the job requeued itself (see :meth:`PbsJobEnvironment._requeue`) the handle
    follows it to its successor: ``job_id``, paths, ``state`` and ``result()`` then
    refer to the latest generation.
    """

    _cancel_command = "qdel"
    watcher = PbsInfoWatcher(delay_s=60)

    def __init__(self, folder: tp.Union[Path, str], job_id: str, tasks: tp.Sequence[int] = (0,)) -> None:
        self._submitit_folder = Path(folder)
        super().__init__(folder=folder, job_id=job_id, tasks=tasks)

    def _follow_requeue(self) -> None:
        """Switch to the successor job if this one resubmitted itself (repeatedly, if need be)."""
        seen = {self._job_id}
        while True:
            marker = _requeue_marker(self._submitit_folder, self._job_id)
            try:
                successor = marker.read_text().strip()
            except OSError:
                break
            if not successor or successor in seen:
                break
            seen.add(successor)
            logger.get_logger().info(f"PBS job {self._job_id} was requeued as {successor}")
            self._job_id = successor
            self._paths = utils.JobPaths(self._submitit_folder, job_id=successor, task_id=self.task_id)
            self._register_in_watcher()
        for sub_job in self._sub_jobs:
            tp.cast(PbsJob[tp.Any], sub_job)._follow_requeue()

    def done(self, force_check: bool = False) -> bool:
        """Whether the job (its latest generation) is finished."""
        self._follow_requeue()
        return super().done(force_check=force_check)

    @property
    def state(self) -> str:
        """State of the latest generation (does not force an update)."""
        self._follow_requeue()
        return self.watcher.get_state(self.job_id, mode="standard")


# ----------------------------------------------------------------------------- environment

class PbsSignalHandler(job_environment.SignalHandler):
    """submitit's handler with PBS's timing: no warning before the walltime, SIGTERM at it.

    Times are measured from ``SUBMITIT_PBS_START`` (exported by the script's first line)
    when present, so that setup lines count against the walltime as they do for PBS.
    """

    #: Seconds before the walltime at which the job signals itself to checkpoint/requeue
    #: (at most a tenth of the walltime). Leave time for the checkpoint and ``qsub``.
    lead_s: float = 120.0

    def __init__(self, env: job_environment.JobEnvironment, job_paths: utils.JobPaths,
                 delayed: utils.DelayedSubmission) -> None:
        super().__init__(env, job_paths, delayed)
        start = _as_int(os.environ.get("SUBMITIT_PBS_START"))
        if start is not None and 0 < time.time() - start < 10 * 86400:
            self._start_time = float(start)

    @property
    def walltime_s(self) -> float:
        """The walltime the job asked for, in seconds (0 when unknown)."""
        return float(self._delayed._timeout_min) * 60

    @property
    def effective_lead_s(self) -> float:
        """How long before the walltime the self-signal fires."""
        return min(self.lead_s, 0.1 * self.walltime_s)

    def has_timed_out(self) -> bool:
        """True from the self-signal's moment on (a little before the walltime)."""
        elapsed = time.time() - self._start_time
        limit = self.walltime_s
        timed_out = limit > 0 and elapsed >= limit - self.effective_lead_s - 5
        self._logger.info(f"Job has{'' if timed_out else ' not'} timed out: ran {elapsed / 60:.1f} "
                          f"of {limit / 60:.1f} minutes.")
        return timed_out

    def on_sigterm(self, signum: int, frame: tp.Optional[types.FrameType] = None) -> None:
        """Walltime kill (near the limit): checkpoint and requeue; else (qdel, preemption):
        checkpoint if the function can, and exit."""
        if self.has_timed_out():
            self.checkpoint_and_try_requeue(signum, frame)
        else:
            self.checkpoint_and_exit(signum, frame)

    def arm_timer(self, usr_sig: int) -> tp.Optional[threading.Timer]:
        """Send ``usr_sig`` to this process ``effective_lead_s`` before the walltime."""
        if self.walltime_s <= 0:
            return None
        delay = self._start_time + self.walltime_s - self.effective_lead_s - time.time()
        timer = threading.Timer(max(delay, 1.0), os.kill, args=(os.getpid(), usr_sig))
        timer.daemon = True
        timer.start()
        return timer


class PbsJobEnvironment(job_environment.JobEnvironment):
    """The view from inside a PBS job (name ``"pbs"``).

    Ranks come from the MPI launcher that started the task (Open MPI, MPICH/Intel MPI
    PMI, Cray PALS), 0 of 1 when there is none; hosts are the unique lines of
    ``PBS_NODEFILE`` in order of first appearance.
    """

    _env: tp.ClassVar[tp.Dict[str, str]] = {
        "job_id": "PBS_JOBID",
        "array_job_id": "PBS_ARRAY_ID",
        "array_task_id": "PBS_ARRAY_INDEX",
        "nodes": "PBS_NODEFILE",
        "num_tasks": "OMPI_COMM_WORLD_SIZE",
        "global_rank": "OMPI_COMM_WORLD_RANK",
        "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK",
        "node": "PALS_NODEID",
    }
    #: Every variable that may carry a value, first match wins.
    _fallbacks: tp.ClassVar[tp.Dict[str, tp.Tuple[str, ...]]] = {
        "num_tasks": ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"),
        "global_rank": ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PALS_RANKID"),
        "local_rank": ("OMPI_COMM_WORLD_LOCAL_RANK", "PALS_LOCAL_RANKID", "MPI_LOCALRANKID",
                       "PMI_LOCAL_RANK"),
    }

    def activated(self) -> bool:
        """Inside a PBS job: ``PBS_JOBID`` and ``PBS_ENVIRONMENT`` are set."""
        return bool(os.environ.get("PBS_JOBID")) and bool(os.environ.get("PBS_ENVIRONMENT"))

    def _first_int(self, name: str, default: int) -> int:
        for var in self._fallbacks[name]:
            value = os.environ.get(var)
            if value is not None and value.strip():
                return int(value)
        return default

    @property
    def job_id(self) -> str:
        """``PBS_JOBID`` as is: a subjob's is already ``2[0].server``, the id qsub/qstat use."""
        return self.raw_job_id

    @property
    def num_tasks(self) -> int:
        return self._first_int("num_tasks", 1)

    @property
    def global_rank(self) -> int:
        return self._first_int("global_rank", 0)

    @property
    def local_rank(self) -> int:
        return self._first_int("local_rank", 0)

    @property
    def hostnames(self) -> tp.List[str]:
        """Unique hosts of ``PBS_NODEFILE`` in file order; ``[hostname]`` without one."""
        path = os.environ.get(self._env["nodes"], "")
        try:
            hosts = hosts_from_nodefile(Path(path).read_text()) if path else []
        except OSError:
            hosts = []
        return hosts or [self.hostname]

    @property
    def num_nodes(self) -> int:
        return len(self.hostnames)

    @property
    def node(self) -> int:
        """``PALS_NODEID``, else this host's place in the node file (short names compared), else 0."""
        pals = os.environ.get("PALS_NODEID")
        if pals is not None and pals.strip():
            return int(pals)
        short = self.hostname.split(".", 1)[0]
        for index, host in enumerate(self.hostnames):
            if host == self.hostname or host.split(".", 1)[0] == short:
                return index
        return 0

    def _handle_signals(self, paths: utils.JobPaths, submission: utils.DelayedSubmission) -> None:
        """SIGTERM: see :meth:`PbsSignalHandler.on_sigterm`; USR2 (self-sent before the
        walltime, or ``qsig``): checkpoint and requeue; SIGCONT: ignored."""
        handler = PbsSignalHandler(self, paths, submission)
        signal.signal(signal.SIGTERM, handler.on_sigterm)
        signal.signal(signal.SIGCONT, handler.bypass)
        signal.signal(self._usr_sig(), handler.checkpoint_and_try_requeue)
        if self.global_rank == 0:
            handler.arm_timer(self._usr_sig())

    def _requeue(self, countdown: int) -> None:
        """Resubmit this job's script to run after it (``qrerun`` needs operator privilege).

        ``qsub -W depend=afterany:$PBS_JOBID <id>_submission.sh`` from ``$PBS_O_WORKDIR``
        (else the successor's ``PBS_O_WORKDIR`` would be ``$HOME``); the successor stays
        held until this job ends, so the checkpointed pickle and script copied under its
        id are in place before it starts. The marker written last lets :class:`PbsJob`
        handles follow.
        """
        jid = self.job_id
        folder = os.environ["SUBMITIT_FOLDER"]
        marker = _requeue_marker(folder, jid)
        if marker.exists():
            logger.get_logger().info(f"Job {jid} already requeued as {marker.read_text().strip()}")
            return
        paths = utils.JobPaths(folder, job_id=jid)
        script = paths.submission_file
        if not script.exists():
            raise RuntimeError(f"cannot requeue PBS job {jid}: its submission script {script} is missing")
        workdir = os.environ.get("PBS_O_WORKDIR") or None
        proc = subprocess.run(["qsub", "-W", f"depend=afterany:{jid}", str(script.resolve())],
                              cwd=workdir, capture_output=True, timeout=60, check=False)
        if proc.returncode != 0:
            raise utils.FailedSubmissionError(
                f"requeue of PBS job {jid} failed: qsub exited {proc.returncode}: "
                f"{proc.stderr.decode(errors='replace').strip()}")
        successor = parse_qsub_output(proc.stdout)
        new_paths = utils.JobPaths(folder, job_id=successor)
        new_paths.folder.mkdir(parents=True, exist_ok=True)
        shutil.copy2(paths.submitted_pickle, new_paths.submitted_pickle)
        shutil.copy2(script, new_paths.submission_file)
        with utils.temporary_save_path(marker) as tmp:
            Path(tmp).write_text(successor + "\n")
        logger.get_logger().info(f"Requeued job {jid} as {successor} ({countdown} remaining timeouts)")


# ----------------------------------------------------------------------------- the script

_DIRECTIVE_VALUE_RE = re.compile(r"[^\s'\"\\]+")


def _directive(name: str, value: object) -> str:
    """A value for a ``#PBS`` line: qsub's directive parser is not a shell, so values
    with whitespace, quotes or backslashes are refused rather than quoted."""
    text = str(value)
    if not _DIRECTIVE_VALUE_RE.fullmatch(text):
        raise ValueError(f"PBS parameter {name}={value!r} cannot go on a #PBS line: "
                         "expected a non-empty value without whitespace, newlines, quotes or backslashes")
    return text


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"PBS parameter {name} must be a positive integer, got {value!r}")
    return value


def _shell_path_with_jobid(pattern: str) -> str:
    """Quote a submitit path pattern for bash, ``%j`` becoming ``${PBS_JOBID}``."""
    if "\n" in pattern:
        raise ValueError(f"path {pattern!r} contains a newline")
    return '"${PBS_JOBID}"'.join(shlex.quote(part) for part in pattern.split("%j"))


# pylint: disable=too-many-arguments,too-many-locals
def _make_qsub_string(
    command: str,
    folder: tp.Union[str, Path],
    job_name: str = "submitit",
    queue: tp.Optional[str] = None,
    account: tp.Optional[str] = None,
    timeout_min: float = 5,
    nodes: int = 1,
    tasks_per_node: int = 1,
    cpus_per_task: int = 1,
    gpus_per_node: tp.Optional[int] = None,
    mem_gb: tp.Optional[float] = None,
    place: tp.Optional[str] = None,
    additional_parameters: tp.Optional[tp.Mapping[str, tp.Any]] = None,
    setup: tp.Optional[tp.Sequence[str]] = None,
    stderr_to_stdout: bool = False,
    mpiexec: str = "mpiexec",
    mpiexec_args: tp.Optional[tp.Sequence[str]] = None,
) -> str:
    """The PBS batch script that runs ``command`` (submitit's ``_submit``) for a pickled job.

    ``select=nodes:ncpus=tasks_per_node*cpus_per_task:mpiprocs=tasks_per_node[:ngpus=..][:mem=..]``;
    ``place`` defaults to ``scatter`` when ``nodes > 1`` (``free``/``pack`` may put every chunk on
    one host). ``additional_parameters`` become extra ``-l key=value`` lines. PBS's own ``-o/-e``
    files go to the folder; the script redirects itself to submitit's ``%j_0_log.out/err``.
    With more than one task, ``command`` runs under ``mpiexec -n N --hostfile "$PBS_NODEFILE"``
    (``mpiexec_args`` appended; Open MPI needs ``-x`` for ``PBS_JOBID``, ``PBS_ENVIRONMENT``,
    ``SUBMITIT_EXECUTOR`` and ``SUBMITIT_PBS_START`` to reach other nodes).
    """
    nodes = _positive_int("nodes", nodes)
    tasks_per_node = _positive_int("tasks_per_node", tasks_per_node)
    cpus_per_task = _positive_int("cpus_per_task", cpus_per_task)
    walltime_s = int(round(float(timeout_min) * 60))
    if walltime_s < 1:
        raise ValueError(f"PBS parameter timeout_min must be positive, got {timeout_min!r}")
    chunk = f"{nodes}:ncpus={tasks_per_node * cpus_per_task}:mpiprocs={tasks_per_node}"
    if gpus_per_node:
        chunk += f":ngpus={_positive_int('gpus_per_node', gpus_per_node)}"
    if mem_gb:
        chunk += f":mem={format_pbs_memory(int(math.ceil(float(mem_gb) * 1024)))}"
    if place is None and nodes > 1:
        place = "scatter"

    paths = utils.JobPaths(folder=folder)
    spool = utils.JobPaths.get_first_id_independent_folder(folder)
    lines = ["#!/bin/bash", f"#PBS -N {_directive('job_name', job_name)}"]
    if queue is not None:
        lines.append(f"#PBS -q {_directive('queue', queue)}")
    if account is not None:
        lines.append(f"#PBS -A {_directive('account', account)}")
    lines.append(f"#PBS -l select={chunk}")
    if place is not None:
        lines.append(f"#PBS -l place={_directive('place', place)}")
    lines.append(f"#PBS -l walltime={format_pbs_walltime(walltime_s)}")
    for key, value in (additional_parameters or {}).items():
        lines.append(f"#PBS -l {_directive('additional_parameters key', key)}="
                     f"{_directive(f'additional_parameters[{key!r}]', value)}")
    # A directory (trailing slash): PBS puts its own <name>.o<seq> there.
    lines.append(f"#PBS -o {_directive('folder', str(spool) + '/')}")
    if stderr_to_stdout:
        lines.append("#PBS -j oe")
    else:
        lines.append(f"#PBS -e {_directive('folder', str(spool) + '/')}")
    lines.append("#PBS -r y")

    stdout = _shell_path_with_jobid(str(paths.stdout).replace("%t", "0"))
    stderr = "&1" if stderr_to_stdout else ">" + _shell_path_with_jobid(str(paths.stderr).replace("%t", "0"))
    lines += [
        "",
        'export SUBMITIT_PBS_START="${SUBMITIT_PBS_START:-$(date +%s)}"',
        "export SUBMITIT_EXECUTOR=pbs",
        '# PBS starts the job in $HOME',
        'cd "$PBS_O_WORKDIR" || exit 1',
        f"exec >>{stdout} 2>{stderr}",
    ]
    for entry in setup or ():
        if "\n" in entry:
            raise ValueError(f"setup line {entry!r} contains a newline; give one command per entry")
        lines.append(entry)
    num_tasks = nodes * tasks_per_node
    if num_tasks > 1:
        launcher = [mpiexec, "-n", str(num_tasks)]
        extra = [shlex.quote(_no_newline("mpiexec_args", a)) for a in (mpiexec_args or ())]
        command = " ".join([*(shlex.quote(_no_newline("mpiexec", a)) for a in launcher),
                            '--hostfile "$PBS_NODEFILE"', *extra, command])
    lines += ["", "# command", command, ""]
    return "\n".join(lines)


def _no_newline(name: str, value: str) -> str:
    if "\n" in str(value):
        raise ValueError(f"{name} value {value!r} contains a newline")
    return str(value)


def _default_parameters() -> tp.Dict[str, tp.Any]:
    import inspect  # pylint: disable=import-outside-toplevel

    sig = inspect.signature(_make_qsub_string)
    return {name: p.default for name, p in sig.parameters.items() if name not in ("command", "folder")}


# ----------------------------------------------------------------------------- executor

class PbsExecutor(core.PicklingExecutor):
    """PBS executor for submitit (name ``"pbs"``): ``qsub`` of a rendered batch script.

    Parameters (``update_parameters``): ``job_name``, ``queue``, ``account``,
    ``timeout_min`` (or ``walltime="HH:MM:SS"``, converted), ``nodes``,
    ``tasks_per_node``, ``cpus_per_task``, ``gpus_per_node``, ``mem_gb`` (per node),
    ``place``, ``additional_parameters`` (extra ``-l key=value``), ``setup`` (shell
    lines run before the job), ``stderr_to_stdout``, ``mpiexec``, ``mpiexec_args``.

    ``python``: command that starts Python in the job (default: this interpreter),
    a shell snippet the caller is responsible for, as for ``SlurmExecutor``.
    """

    job_class = PbsJob

    def __init__(self, folder: tp.Union[str, Path], max_num_timeout: int = 3,
                 max_pickle_size_gb: float = 1.0, python: tp.Optional[str] = None) -> None:
        super().__init__(folder, max_num_timeout=max_num_timeout, max_pickle_size_gb=max_pickle_size_gb)
        self.python = shlex.quote(sys.executable) if python is None else python
        if not self.affinity() > 0:
            raise RuntimeError('Could not find PBS\'s "qsub" and "qstat" on PATH '
                               "(or they belong to Grid Engine); are you on a PBS cluster?")

    @classmethod
    def _equivalence_dict(cls) -> core.EquivalenceDict:
        return {
            "name": "job_name",
            "timeout_min": "timeout_min",
            "mem_gb": "mem_gb",
            "nodes": "nodes",
            "cpus_per_task": "cpus_per_task",
            "gpus_per_node": "gpus_per_node",
            "tasks_per_node": "tasks_per_node",
        }

    @classmethod
    def _valid_parameters(cls) -> tp.Set[str]:
        return set(_default_parameters()) | {"walltime"}

    def _internal_update_parameters(self, **kwargs: tp.Any) -> None:
        """Check and store parameters; ``walltime`` (a string, see
        :func:`hpctrain.units.parse_walltime`) is stored as ``timeout_min``."""
        invalid = sorted(set(kwargs) - self._valid_parameters())
        if invalid:
            listing = "\n  - ".join(f"{k} (default: {v!r})" for k, v in sorted(_default_parameters().items()))
            raise ValueError(f"Unavailable parameter(s): {invalid}\nValid parameters are:\n  - {listing}\n"
                             "  - walltime (e.g. '02:00:00', sets timeout_min)")
        if "walltime" in kwargs:
            kwargs["timeout_min"] = parse_walltime(kwargs.pop("walltime")) / 60
        _make_qsub_string(command="true", folder=self.folder, **{**self.parameters, **kwargs})
        super()._internal_update_parameters(**kwargs)

    @property
    def _submitit_command_str(self) -> str:
        return " ".join([self.python, "-u -m submitit.core._submit", shlex.quote(str(self.folder))])

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        return _make_qsub_string(command=command, folder=self.folder, **self.parameters)

    def _num_tasks(self) -> int:
        return int(self.parameters.get("nodes", 1)) * max(1, int(self.parameters.get("tasks_per_node", 1)))

    def _make_submission_command(self, submission_file_path: Path) -> tp.List[str]:
        return ["qsub", str(submission_file_path)]

    @staticmethod
    def _get_job_id_from_submission_command(string: tp.Union[bytes, str]) -> str:
        return parse_qsub_output(string)

    @classmethod
    def affinity(cls) -> int:
        """-1 without ``qsub``/``qstat`` on PATH (or with Grid Engine's, ``SGE_ROOT`` set);
        2 when PBS is evident (inside a PBS job, ``PBS_EXEC``/``PBS_CONF_FILE`` set or
        ``/etc/pbs.conf``); else 1 (usable with ``cluster="pbs"``, not auto-picked over local)."""
        if shutil.which("qsub") is None or shutil.which("qstat") is None or os.environ.get("SGE_ROOT"):
            return -1
        pbs_evident = (any(os.environ.get(v) for v in ("PBS_JOBID", "PBS_EXEC", "PBS_CONF_FILE"))
                       or Path("/etc/pbs.conf").exists())
        return 2 if pbs_evident else 1

    def submit_script(self, script_path: tp.Union[str, Path],
                      extra_args: tp.Sequence[str] = (),
                      cwd: tp.Optional[str] = None) -> PbsJob[tp.Any]:
        """``qsub [extra_args] <script>`` run from ``cwd`` (default: the script's directory;
        it becomes the job's ``PBS_O_WORKDIR``); the file is submitted
        unchanged (its own ``#PBS`` lines apply). The returned job can be watched
        (``state``, ``done``, ``wait``) and cancelled; ``result()`` only works for submitit payloads.
        """
        path = Path(script_path).expanduser().absolute()
        if not path.is_file():
            raise FileNotFoundError(f"PBS script {path} does not exist")
        args = [_no_newline("extra_args", a) for a in extra_args]
        proc = subprocess.run(["qsub", *args, str(path)], cwd=cwd or str(path.parent),
                              capture_output=True, check=False, timeout=300)
        if proc.returncode != 0:
            raise utils.FailedSubmissionError(
                f"qsub {path} exited {proc.returncode}: {proc.stderr.decode(errors='replace').strip()}")
        return PbsJob(folder=self.folder, job_id=parse_qsub_output(proc.stdout))
