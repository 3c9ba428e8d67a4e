"""A worker group that is one launcher process (``srun``, ``mpiexec``, ``mpirun``).

Inside an allocation one launcher command starts every rank on every node; this side
sees only that one process. Its exit is the exit of the whole step, recorded as rank -1
(the supervisor then finds the failed rank from the ranks' own error records). Each rank
writes its own output to ``logs/<job>/rank-R.out`` (the worker redirects itself when
``HPCTRAIN_RANK_LOG_DIR`` is set); the launcher's own output goes to ``launcher.out``,
appended to by every attempt of the job: the ranks a launcher reports as failed are read
from this attempt's part only.

A launcher that exits non-zero without naming a failed rank, and either printed one of
the messages of a launcher that could not start its ranks (``ssh: connect to host …``,
Open MPI's "ORTE was unable to reliably start one or more daemons", Hydra's, srun's,
PBS's TM ``tm_spawn``/``spawn failed``) or exited before any rank wrote its log, is
reported as "the launcher NAME could not start the ranks: <its lines>"
(:func:`start_failure`), not as a rank that died.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from typing import Dict, List, Optional, Sequence

from .base import ExitRecord, WorkerGroup, open_log

#: Set by step launchers: the worker sends its stdout/stderr to ``<dir>/rank-<R>.out``.
ENV_RANK_LOG_DIR = "HPCTRAIN_RANK_LOG_DIR"


class StepWorkerGroup(WorkerGroup):
    """One launcher process standing for all ranks."""

    def __init__(self, argv: Sequence[str], env: Dict[str, str], log_dir: str):
        os.makedirs(log_dir, exist_ok=True)
        self.argv = list(argv)
        self._log = open_log(log_dir, "launcher.out")
        # where this attempt's output starts: earlier attempts of the job are above it
        self._log_start = self._log.tell()
        self._log.write((HEADER + shlex.join(self.argv) + "\n").encode())
        self._log.flush()
        self._log_dir = log_dir
        self._under_pbs = bool(env.get("PBS_NODEFILE"))
        self._rank_logs = rank_log_sizes(log_dir)  # a rank that starts writes its log
        env = dict(env)
        env[ENV_RANK_LOG_DIR] = log_dir
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(self.argv, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self._exit: Optional[ExitRecord] = None
        self._killed = False  # terminate() had to SIGKILL the launcher
        self._records: List[ExitRecord] = []

    def _poll(self, timeout: float) -> None:
        if self._exit is not None:
            return
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return
        now = time.time()
        self._log.close()
        records = [ExitRecord(-1, code, now)]
        if code != 0:
            try:
                with open(self._log.name, "rb") as f:
                    f.seek(self._log_start)
                    text = f.read().decode(errors="replace")
            except OSError:
                text = ""
            # ranks the launcher saw fail, in the order it reported them
            ranks = rank_exits_from_output(text)
            records += [ExitRecord(rank, rc, now + 1e-6 * i)
                        for i, (rank, rc) in enumerate(ranks)]
            started = rank_log_sizes(self._log_dir) != self._rank_logs
            message = "" if ranks else start_failure(
                os.path.basename(self.argv[0]), text, ranks_started=started)
            if message:
                records[0] = ExitRecord(-1, code, now, message + (PBS_HINT if self._under_pbs
                                                                  else ""))
        self._records = records
        self._exit = records[0]

    def wait_any_failure(self, timeout: float) -> Optional[List[ExitRecord]]:
        self._poll(timeout)
        return None if self._exit is None else list(self._records)

    def exits(self) -> List[ExitRecord]:
        self._poll(0)
        return [] if self._exit is None else list(self._records)

    def ended(self) -> bool:
        """The launcher (srun, mpirun, pbsdsh) exited by itself, having waited for its
        ranks; not when it had to be SIGKILLed (its remote ranks may end later)."""
        self._poll(0)
        return self._exit is not None and not self._killed

    def terminate(self, grace: float = 10.0) -> None:
        """SIGTERM the launcher (srun and mpirun pass it on to every rank), SIGKILL the
        launcher's process group after ``grace`` seconds."""
        if self._exit is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            self._poll(grace)
        if self._exit is None:
            self._killed = True
            _signal_group(self.proc.pid, signal.SIGKILL)
            self._poll(30.0)


#: Added to a launcher's start failure inside a PBS job.
PBS_HINT = ("\nHINT: on PBS nodes that refuse ssh, with an MPI built without PBS's TM "
            "support, set scheduler.launcher = \"pbsdsh\": PBS's own task manager starts "
            "the ranks (not for backends that need one MPI job)")

#: The first line of each attempt's part of ``launcher.out``: the command it ran.
HEADER = "[hpctrain] "


def rank_log_sizes(log_dir: str) -> Dict[str, int]:
    """``{name: size}`` of the ranks' logs (``rank-R.out``) in ``log_dir``."""
    sizes = {}
    try:
        names = os.listdir(log_dir)
    except OSError:
        return sizes
    for name in names:
        if name.startswith("rank-") and name.endswith(".out"):
            try:
                sizes[name] = os.path.getsize(os.path.join(log_dir, name))
            except OSError:
                pass
    return sizes


#: Lines of a launcher that could not start its ranks (it never got to run them).
_START_FAILURE = re.compile("|".join((
    r"ssh: connect to host .*", r"ssh: Could not resolve hostname .*",
    r"Host key verification failed\.", r"Permission denied \(publickey.*",
    r"(ORTE|PRTE) was unable to reliably start one or more daemons\.",
    r"An (ORTE|PRTE) daemon has unexpectedly failed after launch.*",
    r"\S*pbs_tmrsh: .*", r"\S*pbsdsh: (spawn failed|tm_init|tm_nodeinfo|Event poll).*",
    r"error \d+ on spawn", r"\[mpiexec@\S+\] .*(HYDU_create_process|HYD_spawn|launch_procs"
    r"|unable to run proxy|HYDU_sock_connect).*",
    r"srun: error: Unable to (create step|allocate resources).*",
)))


def start_failure(name: str, text: str, *, ranks_started: bool) -> str:
    r"""The message for a launcher (``name``, e.g. ``mpirun``) that exited non-zero with
    ``text`` as its output and named no failed rank, when it could not start the ranks:
    its output has a start-failure line, or no rank started. "" otherwise. The first line
    sums up (its start-failure lines, else its last lines); the launcher's last lines
    follow.

    >>> out = ("ssh: connect to host pbsn2 port 22: Connection refused\n" + "-" * 20 +
    ...        "\nORTE was unable to reliably start one or more daemons.\nThis usually is "
    ...        "caused by:\n")
    >>> start_failure("mpirun", out, ranks_started=True).splitlines()[0]
    'the launcher mpirun could not start the ranks: ssh: connect to host pbsn2 port 22: Connection refused; ORTE was unable to reliably start one or more daemons.'
    >>> start_failure("mpirun", "Killed\n", ranks_started=True)
    ''
    >>> start_failure("srun", "[hpctrain] srun python\nboom\n", ranks_started=False)
    'the launcher srun could not start the ranks: boom\nboom'
    """
    lines = [line.strip() for line in text.splitlines()
             if line.strip(" -\t") and not line.startswith(HEADER)]
    matched = []
    for line in lines:
        m = _START_FAILURE.search(line)
        if m and m.group(0) not in matched:
            matched.append(m.group(0))
    if not matched and ranks_started:
        return ""
    summary = "; ".join(matched[:3] or lines[-3:]) or "(no output)"
    return f"the launcher {name} could not start the ranks: {summary}\n" + "\n".join(lines[-15:])


_SIGNALS = {"Killed": 9, "Terminated": 15, "Segmentation fault": 11, "Aborted": 6,
            "Bus error": 7}
_OMPI_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")
_OMPI_EXIT = re.compile(r"Process name: \[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(\d+)")
_SRUN = re.compile(r"srun: error: \S+: tasks? ([\d,\-]+): (.+)")


def rank_exits_from_output(text: str) -> List[tuple]:
    r"""``(rank, returncode)`` of the ranks a launcher reports as failed; negative
    returncode: killed by that signal.

    >>> rank_exits_from_output("mpirun noticed that process rank 0 with PID 7 on node vm "
    ...                        "exited on signal 9 (Killed).")
    [(0, -9)]
    >>> rank_exits_from_output("srun: error: n2: tasks 2-3: Exited with exit code 1\n"
    ...                        "srun: error: n1: task 0: Killed")
    [(2, 1), (3, 1), (0, -9)]
    """
    out: List[tuple] = []
    for m in _OMPI_SIGNAL.finditer(text):
        out.append((int(m.group(1)), -int(m.group(2))))
    for m in _OMPI_EXIT.finditer(text):
        out.append((int(m.group(1)), int(m.group(2))))
    for m in _SRUN.finditer(text):
        how = m.group(2).strip()
        code = re.match(r"Exited with exit code (\d+)", how)
        rc = int(code.group(1)) if code else -_SIGNALS.get(how.split(" (")[0], 9)
        for part in m.group(1).split(","):
            lo, _, hi = part.partition("-")
            for rank in range(int(lo), int(hi or lo) + 1):
                out.append((rank, rc))
    seen, unique = set(), []
    for rank, rc in out:
        if rank not in seen:
            seen.add(rank)
            unique.append((rank, rc))
    return unique


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
