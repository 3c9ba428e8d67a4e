"""PBS's own task manager (TM) as the launcher: one ``pbsdsh -n NODE`` per rank.

A PBS site without Cray PALS, whose MPI was built without PBS's TM support (Debian's
Open MPI has none), cannot start ranks on the other nodes of a job with ``mpirun``: it
uses ssh, which compute nodes often refuse (docs/notes/pbs-multinode-facts.md). PBS
itself can: OpenPBS's ``pbsdsh`` asks the job's mother superior to spawn a task on a
node of the job (``tm_spawn``, carried out by that node's MoM), waits for its end, and
on SIGTERM kills it (``tm_kill``). This launcher runs, per rank::

    pbsdsh -n I -- /bin/sh -c '. "$0" && exec "$@"' ENV_FILE python -m hpctrain.worker RUN_DIR

* ``I``: the TM node of the rank's host, the index of the host's first line in
  ``$PBS_NODEFILE`` (the numbering ``pbs_tmrsh`` uses). Ranks fill the hosts in order
  of first appearance, ``workers_per_node`` each (default: as many as the file has
  lines for the host).
* A task gets the job's environment from MoM, not pbsdsh's: the batch step's
  environment (the ranks' group secret too; never on a command line) and the rank's
  torchrun variables (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
  ``GROUP_RANK``, ``NODE_RANK``, ``MASTER_ADDR`` = the first host, ``MASTER_PORT``) are
  in ``ENV_FILE``, ``logs/<job>/.tm-env.rank-R`` (mode 0600), which the task reads
  and deletes. Names MoM sets for each node (``PBS_*``, ``HOSTNAME``, ``TMPDIR``) stay
  MoM's.
* pbsdsh exits 0 whatever the task did and prints ``pbsdsh: task 0x… exit status N``
  when N is not 0: that N is the rank's exit code. A task it could not spawn (``spawn
  failed on node …``) is "the launcher pbsdsh could not start the ranks: …".
* ``pbsdsh`` is looked up on PATH, then in ``$PBS_EXEC/bin`` (``PBS_EXEC`` from the
  environment or the host's ``pbs.conf``: ``$PBS_CONF_FILE``, else /etc/pbs.conf).

Each rank writes its own log (``logs/<job>/rank-R.out``); pbsdsh's output goes to
``logs/<job>/launcher.out``.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError
from .base import ExitRecord, Launcher, LineSink, open_log
from .local import LocalWorkerGroup, free_port
from .step import ENV_RANK_LOG_DIR, HEADER, start_failure

__all__ = ["PbsdshLauncher", "pbsdsh_argv", "tm_nodes", "rank_nodes", "task_exit"]

#: What the task's shell runs: read the environment file, then become the rank.
TASK_SHELL = '. "$0" && exec "$@"'

#: Set by MoM for each node of the job, or per process: never carried over.
_MOM_OWN = ("HOSTNAME", "TMPDIR", "PWD", "OLDPWD", "SHLVL", "_", "HPCTRAIN_PARENT_PID")
_TORCHRUN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TASK_STATUS = re.compile(r"pbsdsh: task 0x[0-9A-Fa-f]+ exit status (-?\d+)")

_HINT = ("pbsdsh ships with OpenPBS (in $PBS_EXEC/bin); put that directory on PATH in "
         "[setup] commands, or choose another scheduler.launcher")


def tm_nodes(nodefile_text: str) -> List[Tuple[str, int]]:
    """``(host, TM node index)`` of each host of a ``PBS_NODEFILE``, in order of first
    appearance; the index is the line of the host's first appearance.

    >>> tm_nodes("pbsn1\\npbsn1\\npbsn2\\npbsn2\\n")
    [('pbsn1', 0), ('pbsn2', 2)]
    """
    out, seen = [], set()
    for i, line in enumerate(nodefile_text.splitlines()):
        host = line.split()[0] if line.split() else ""
        if host and host not in seen:
            seen.add(host)
            out.append((host, i))
    return out


def rank_nodes(nodes: Sequence[Tuple[str, int]], num_workers: int,
               workers_per_node: int) -> List[Tuple[int, int]]:
    """``(node number, TM node index)`` of each rank: ``workers_per_node`` per host, the
    hosts in order. ConfigError when the job has too few hosts.

    >>> rank_nodes([("a", 0), ("b", 2)], 4, 2)
    [(0, 0), (0, 0), (1, 2), (1, 2)]
    """
    needed = -(-num_workers // workers_per_node)
    if needed > len(nodes):
        raise ConfigError(f"pbsdsh: {num_workers} ranks at {workers_per_node} per node need "
                          f"{needed} nodes; PBS_NODEFILE lists {len(nodes)} "
                          f"({', '.join(h for h, _ in nodes) or 'none'})",
                          hint="ask for as many nodes as scaling.num_workers / "
                               "scaling.workers_per_node")
    return [(r // workers_per_node, nodes[r // workers_per_node][1])
            for r in range(num_workers)]


def pbsdsh_argv(executable: str, *, node_index, env_file: str,
                command: Sequence[str], extra_args: Sequence[str] = ()) -> List[str]:
    """One rank's pbsdsh command.

    >>> pbsdsh_argv("pbsdsh", node_index=2, env_file="/r/logs/1/.tm-env.rank-1",
    ...             command=["python", "-m", "hpctrain.worker", "/r"])
    ... # doctest: +NORMALIZE_WHITESPACE
    ['pbsdsh', '-n', '2', '--', '/bin/sh', '-c', '. "$0" && exec "$@"',
     '/r/logs/1/.tm-env.rank-1', 'python', '-m', 'hpctrain.worker', '/r']
    """
    return [executable, *extra_args, "-n", str(node_index), "--", "/bin/sh", "-c",
            TASK_SHELL, env_file, *command]


def env_file_text(env: Mapping[str, str], cwd: str) -> str:
    """Shell text that exports ``env`` (less what MoM sets for each node) and enters
    ``cwd``; deletes itself first.

    >>> print(env_file_text({"A": "x y", "PBS_JOBID": "1.s", "B%": "no"}, "/w"))
    rm -f "$0"
    export A='x y'
    cd /w
    """
    lines = ['rm -f "$0"']
    for name in sorted(env):
        if (_NAME.match(name) and not name.startswith("PBS_")
                and name not in _MOM_OWN):
            lines.append(f"export {name}={shlex.quote(env[name])}")
    lines.append(f"cd {shlex.quote(cwd)}")
    return "\n".join(lines)


def task_exit(returncode: int, output: str) -> Tuple[int, str]:
    """``(the rank's exit code, the launcher's message)`` from one pbsdsh's exit code and
    output; the message is set when the task was never started.

    >>> task_exit(0, "")
    (0, '')
    >>> task_exit(0, "pbsdsh: task 0x00000000 exit status 3\\n")
    (3, '')
    >>> code, msg = task_exit(0, "pbsdsh: spawn failed on node 1 err System error\\n")
    >>> code, msg.splitlines()[0]
    (255, 'the launcher pbsdsh could not start the ranks: pbsdsh: spawn failed on node 1 err System error')
    """
    status = _TASK_STATUS.findall(output)
    if status:
        return int(status[-1]), ""
    message = start_failure("pbsdsh", output, ranks_started=returncode == 0)
    if message:
        return (returncode or 255), message
    return returncode, ""


def find_pbsdsh(env: Mapping[str, str]) -> str:
    """pbsdsh on PATH, else in ``$PBS_EXEC/bin``; ConfigError when neither."""
    found = shutil.which("pbsdsh", path=env.get("PATH"))
    if found:
        return found
    pbs_exec = env.get("PBS_EXEC") or _conf_value(
        env.get("PBS_CONF_FILE") or "/etc/pbs.conf", "PBS_EXEC")
    candidate = os.path.join(pbs_exec, "bin", "pbsdsh") if pbs_exec else ""
    if candidate and os.access(candidate, os.X_OK):
        return candidate
    raise ConfigError("scheduler.launcher = \"pbsdsh\": pbsdsh was not found on PATH "
                      f"nor in $PBS_EXEC/bin ({pbs_exec or 'PBS_EXEC unknown'}); expected "
                      "OpenPBS's pbsdsh inside a PBS job", hint=_HINT)


def _conf_value(path: str, key: str) -> Optional[str]:
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.strip().partition("=")
                if name == key:
                    return value
    except OSError:
        pass
    return None


class PbsdshWorkerGroup(LocalWorkerGroup):
    """One pbsdsh process per rank; a rank's exit code is the one pbsdsh reports."""

    def __init__(self, procs, log_files, env_files: List[str]):
        self.env_files = env_files
        self._tails: Dict[int, List[str]] = {}
        super().__init__(procs, log_files, self._keep)

    def _keep(self, rank: int, line: str) -> None:
        self._tails.setdefault(rank, []).append(line)
        del self._tails[rank][:-50]

    def _exit_record(self, rank: int, code: int) -> ExitRecord:
        rc, message = task_exit(code, "\n".join(self._tails.get(rank, [])))
        # a task never started: the launcher's failure (rank -1), not the rank's
        return ExitRecord(-1 if message else rank, rc, time.time(), message)

    def terminate(self, grace: float = 10.0) -> None:
        super().terminate(grace)  # SIGTERM: pbsdsh kills its task (tm_kill)
        for path in self.env_files:  # a task that never started left its file
            try:
                os.unlink(path)
            except OSError:
                pass


class PbsdshLauncher(Launcher):
    """Starts each rank as a PBS task with ``pbsdsh`` (see module docs)."""

    name = "pbsdsh"

    @classmethod
    def for_spec(cls, spec, *, name: str, launcher_args: Sequence[str],
                 mpi: bool) -> "PbsdshLauncher":
        if mpi:
            raise ConfigError("scheduler.launcher = \"pbsdsh\" starts plain processes, "
                              "not one MPI job; this backend needs mpiexec",
                              hint="use launcher = \"mpiexec\" for MPI backends")
        return cls(workers_per_node=spec.scaling.per_node, extra_args=launcher_args)

    def __init__(self, *, workers_per_node: Optional[int] = None,
                 extra_args: Sequence[str] = ()):
        self.workers_per_node = workers_per_node
        self.extra_args = tuple(extra_args)

    def launch(self, *, command: Sequence[str], env: Dict[str, str], num_workers: int,
               log_dir: str, on_line: Optional[LineSink] = None) -> PbsdshWorkerGroup:
        # on_line is not fed: the ranks write their own logs (logs/<job>/rank-R.out).
        nodefile = env.get("PBS_NODEFILE")
        if not nodefile:
            raise ConfigError("scheduler.launcher = \"pbsdsh\": PBS_NODEFILE is not set; "
                              "expected to run inside a PBS job", hint=_HINT)
        try:
            with open(nodefile) as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"scheduler.launcher = \"pbsdsh\": cannot read PBS_NODEFILE "
                              f"{nodefile} ({e.strerror}); expected the job's host list",
                              hint=_HINT) from None
        nodes = tm_nodes(text)
        per_node = self.workers_per_node or max(
            1, sum(1 for line in text.splitlines() if line.strip()) // max(1, len(nodes)))
        placement = rank_nodes(nodes, num_workers, per_node)
        executable = find_pbsdsh(env)
        os.makedirs(log_dir, exist_ok=True)
        port = env.get("MASTER_PORT") or str(free_port("0.0.0.0"))
        procs, logs, env_files = [], [], []
        for rank, (node, index) in enumerate(placement):
            on_node = sum(1 for n, _ in placement if n == node)
            task_env = dict(env)
            task_env.update(RANK=str(rank), LOCAL_RANK=str(rank - node * per_node),
                            WORLD_SIZE=str(num_workers), LOCAL_WORLD_SIZE=str(on_node),
                            GROUP_RANK=str(node), NODE_RANK=str(node),
                            MASTER_ADDR=nodes[0][0], MASTER_PORT=port,
                            PYTHONUNBUFFERED="1", **{ENV_RANK_LOG_DIR: log_dir})
            path = os.path.join(log_dir, f".tm-env.rank-{rank}")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(env_file_text(task_env, os.getcwd()) + "\n")
            env_files.append(path)
            argv = pbsdsh_argv(executable, node_index=index, env_file=path,
                               command=command, extra_args=self.extra_args)
            log = open_log(log_dir, "launcher.out")
            log.write((HEADER + shlex.join(argv) + "\n").encode())
            log.flush()
            logs.append(log)
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True))
        return PbsdshWorkerGroup(procs, logs, env_files)
