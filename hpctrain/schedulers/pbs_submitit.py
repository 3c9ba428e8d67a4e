"""PBS (OpenPBS / PBS Pro) for :mod:`hpctrain.schedulers.pbs`: ``qsub`` of a rendered
script, the job id ``qsub`` printed, and job states from ``qstat -f -F json`` (watched
with submitit's :class:`~submitit.core.core.InfoWatcher`, as the Slurm scheduler's are).

What it follows was observed on a live OpenPBS 23.06 server (``shared/notes/pbs-facts.md``):

* ``qsub`` prints the job id (``1.pbshost``, arrays ``2[].pbshost``) on stdout;
* ``qstat -f -F json -x <ids>`` reports jobs; an unknown id exits 153, a finished
  job queried without ``-x`` exits 35; a server without history (``job_history_enable``
  false, the default) answers ``-x`` with no job at all (exit 0, "not configured to
  maintain job history"), and forgets a job once it finished (153);
* a walltime kill exits -29, a job killed by signal N exits 256+N; a job deleted with
  ``qdel`` ends in substate 91.

Removed (issue 14): this module used to be a complete submitit plugin
(``submitit.AutoExecutor(folder, cluster="pbs")``, registered as a ``submitit`` entry point)
with pickled-function submission, ``PbsJobEnvironment``, ``PbsSignalHandler`` (walltime
timer), self-resubmission with ``qsub -W depend=afterany`` and job handles that followed
it. hpctrain never used that path: it submits the scripts it renders, and its batch step
keeps its own PBS timer and requeue (:mod:`hpctrain.cli.batch`,
:mod:`hpctrain.allocation.recovery`). No documentation offered the plugin to
users, so it went, with its tests and the entry point; :class:`PbsExecutor` is no
longer a submitit executor.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import typing as tp
from pathlib import Path

from submitit.core import core, logger, utils

from .controller import run_controller

__all__ = ["FINISHED", "PbsExecutor", "PbsInfoWatcher", "PbsJob", "parse_qsub_output",
           "pbs_state", "qstat_jobs"]

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
        return run_controller(command, timeout=120)

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


# ----------------------------------------------------------------------------- submission

class PbsJob(core.Job[tp.Any]):
    """A handle on a submitted PBS job: :class:`PbsInfoWatcher` watches it (``state``,
    ``done()``, ``wait()``, ``get_info()``), ``cancel()`` runs ``qdel``. The job runs a
    script, not a submitit payload: ``result()`` has nothing to read."""

    _cancel_command = "qdel"
    watcher = PbsInfoWatcher(delay_s=60)


class PbsExecutor:
    """Submits a rendered batch script with ``qsub``; ``folder`` is where the job
    handles' (unused) submitit paths point."""

    def __init__(self, folder: tp.Union[str, Path]) -> None:
        self.folder = Path(folder).expanduser().absolute()
        if shutil.which("qsub") is None or shutil.which("qstat") is None or os.environ.get("SGE_ROOT"):
            raise RuntimeError('Could not find PBS\'s "qsub" and "qstat" on PATH '
                               "(or they belong to Grid Engine); are you on a PBS cluster?")

    def submit_script(self, script_path: tp.Union[str, Path],
                      extra_args: tp.Sequence[str] = (),
                      cwd: tp.Optional[str] = None) -> PbsJob:
        """``qsub [extra_args] <script>`` run from ``cwd`` (default: the script's directory;
        it becomes the job's ``PBS_O_WORKDIR``); the file is submitted
        unchanged (its own ``#PBS`` lines apply).
        """
        path = Path(script_path).expanduser().absolute()
        if not path.is_file():
            raise FileNotFoundError(f"PBS script {path} does not exist")
        args = [_no_newline("extra_args", a) for a in extra_args]
        proc = run_controller(["qsub", *args, str(path)], cwd=cwd or str(path.parent),
                              raise_when_busy=True, timeout=300, retry_on_timeout=False)
        if proc.returncode != 0:
            raise utils.FailedSubmissionError(
                f"qsub {path} exited {proc.returncode}: {proc.stderr.decode(errors='replace').strip()}")
        return PbsJob(folder=self.folder, job_id=parse_qsub_output(proc.stdout))


def _no_newline(name: str, value: str) -> str:
    if "\n" in str(value):
        raise ValueError(f"{name} value {value!r} contains a newline")
    return str(value)
