"""One process per node that imports once and forks the node's ranks:
``python -m hpctrain.worker.nodezygote RUN_DIR`` (a task of ``srun --ntasks-per-node=1``).

The default srun launch starts every rank as its own interpreter, and every one of them
imports torch, ``torch._dynamo`` (which DDP pulls in), hpctrain and the user's module —
on a node with K ranks that is K times the same imports competing for the node's cores
and its filesystem (on Lustre, K × nodes processes reading the same thousands of files).
With ``HPCTRAIN_FORK_RANKS=1`` the srun launcher starts one of these per node instead
(:func:`hpctrain.launchers.srun.zygote_argv`); it does those imports once
(:func:`hpctrain.worker.spare.preload`) and then forks the node's K ranks. Each child
gets the task variables a K-per-node step would have given it, by the names the scheduler
declares (:class:`~hpctrain.schedulers.base.TaskVariables`; under Slurm ``SLURM_PROCID``
= node × K + i, ``SLURM_LOCALID`` = i, ``SLURM_STEP_NUM_TASKS`` = nodes × K…), and runs
the ordinary worker (:func:`hpctrain.worker.main`).

Why fork is safe here: nothing before the fork starts a Python thread, initialises CUDA,
MPI or a process group, or opens a socket; the imports leave at most an idle native
thread that holds no lock a child needs (the same state in which torch's DataLoader forks
its workers). Everything with state — the process group, CUDA, the data — starts in the
child. Backends that need MPI, or ranks with GPUs bound per task by srun, never take this
path (the launcher falls back to one interpreter per rank).

The zygote stays as the node's task: it forwards the warning signal (USR1) and SIGTERM to
its children, waits for them, and when one fails it leaves that rank's error record (a
rank killed by a signal writes none itself), stops its siblings, and exits with the
failed rank's status so that ``srun --kill-on-bad-exit`` ends the step on every node.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import socket
import sys
import time

from hpctrain.cluster_env import detect_scheduler, first_set, task_variables
from hpctrain.common.fsutil import atomic_write_json
from hpctrain.common.registry import scheduler_class
from hpctrain.errors import ConfigError
from hpctrain.common.trust import no_write_for_others
from hpctrain.rundir.layout import RunDir
from hpctrain.worker.spare import preload
from hpctrain.worker.entry import main as worker_main
from hpctrain.common.log import progress_line

ENV_SWITCH = "HPCTRAIN_FORK_RANKS"
ENV_PER_NODE = "HPCTRAIN_RANKS_PER_NODE"


def fork_requested(env=None) -> bool:
    value = (env if env is not None else os.environ).get(ENV_SWITCH, "").strip().lower()
    return value in ("1", "true", "yes", "on")


def child_env(env, *, node: int, nodes: int, per_node: int, local: int) -> dict:
    """The view of rank ``local`` on node ``node`` of a ``nodes`` × ``per_node`` step: the
    task variables the scheduler that holds ``env`` declares
    (:attr:`~hpctrain.schedulers.base.Scheduler.task_variables`), as its launcher would set
    them for such a step.

    >>> e = child_env({"SLURM_JOB_ID": "7", "SLURM_NODEID": "1", "SLURM_PROCID": "1"},
    ...               node=1, nodes=2, per_node=2, local=1)
    >>> e["SLURM_PROCID"], e["SLURM_LOCALID"], e["SLURM_STEP_NUM_TASKS"], e["SLURM_STEP_TASKS_PER_NODE"]
    ('3', '1', '4', '2(x2)')
    """
    scheduler = scheduler_class(detect_scheduler(env))
    out = dict(env)
    out.update(scheduler.forked_task_env(node=node, nodes=nodes, per_node=per_node,
                                         local=local), HPCTRAIN_FORKED_RANK="1")
    cpus = env.get("HPCTRAIN_CPUS_PER_RANK")
    if cpus and scheduler.task_variables.cpus_per_task:
        out[scheduler.task_variables.cpus_per_task] = cpus
    return out


def _record_death(run_dir: str, rank: int, status: int) -> None:
    """A child killed by a signal left no error record: write the one the supervisor
    reads (unless the rank wrote its own)."""

    attempt = int(os.environ.get("HPCTRAIN_ATTEMPT", "1"))
    adir = RunDir(run_dir).attempt_dir(attempt)
    path = os.path.join(adir, f"error.rank-{rank}.json")
    if os.path.exists(path):
        return
    if os.WIFSIGNALED(status):
        how = f"killed by signal {os.WTERMSIG(status)}"
    else:
        how = f"exit code {os.WEXITSTATUS(status)}"

    msg = f"rank {rank} {how}"
    try:
        os.makedirs(adir, exist_ok=True)
        atomic_write_json(path, {
            "rank": rank, "host": socket.gethostname(), "pid": 0, "time": time.time(),
            "type": "RankDied", "message": msg,
            "traceback": (f"rank {rank} ended with {how} and left no traceback (killed, out "
                          f"of memory, or a crash in native code); see its log.\n{msg}")},
            sync=False)
    except OSError:
        pass


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    run_dir = argv[0]
    no_write_for_others()
    per_node, nodes, node = step_shape(os.environ)

    preload(run_dir)
    children = _fork_ranks(run_dir, per_node=per_node, nodes=nodes, node=node)
    _forward_signals(children)
    code = _wait_for_ranks(run_dir, children)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def step_shape(env) -> tuple[int, int, int]:
    """(ranks per node, nodes, this node's index) of the step, from the task variables of
    the scheduler that started this process (one task per node).

    >>> step_shape({"HPCTRAIN_RANKS_PER_NODE": "4", "SLURM_JOB_ID": "7", "SLURM_NODEID": "2",
    ...             "SLURM_STEP_NUM_NODES": "3", "SLURM_STEP_NUM_TASKS": "3"})
    (4, 3, 2)
    """
    per_node = int(env[ENV_PER_NODE])
    names = task_variables(env)
    if names is None:
        raise ConfigError(f"{ENV_SWITCH}: the node zygote runs as a task of a scheduler that "
                          "starts tasks itself (Slurm's srun); this process is in a job of "
                          f"{detect_scheduler(env)!r}",
                          hint=f"unset {ENV_SWITCH}")
    nodes = int(first_set(env, *names.num_nodes, *names.size)[1] or "1")
    node = int(env.get(names.node_rank, "0"))
    return per_node, nodes, node


def _fork_ranks(run_dir: str, *, per_node: int, nodes: int, node: int) -> dict:
    """Fork this node's ranks: pid → rank of each child."""
    children = {}
    for local in range(per_node):
        env = child_env(os.environ, node=node, nodes=nodes, per_node=per_node, local=local)
        pid = os.fork()
        if pid == 0:  # the rank
            _run_rank(run_dir, env)
        children[pid] = node * per_node + local
    return children


def _run_rank(run_dir: str, env: dict) -> None:
    """In a forked child: become the rank with ``env`` and run the worker; never returns."""
    try:
        os.environ.clear()
        os.environ.update(env)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_DFL)
        if os.environ.get("HPCTRAIN_ZYGOTE_VERBOSE"):
            # where a rank stuck after its stop hangs: its stacks, into its log

            faulthandler.register(signal.SIGUSR2, all_threads=True)

        worker_main([run_dir])
    finally:
        os._exit(1)


def _forward_signals(children: dict) -> None:
    """Forward the zygote's signals to the children; on SIGTERM, stop them and exit."""

    def forward(signum, _frame) -> None:
        for pid in list(children):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        if signum == signal.SIGTERM:
            _stop_all(children, time.monotonic() + 5)
            os._exit(128 + signum)

    warning = getattr(signal, "SIG" + os.environ.get("HPCTRAIN_WARNING_SIGNAL", "USR1"),
                      signal.SIGUSR1)
    for sig in {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, warning}:
        signal.signal(sig, forward)


def _wait_for_ranks(run_dir: str, children: dict) -> int:
    """Reap the children until none is left; the exit code: that of the first failed rank."""
    code = 0
    stop_seen: dict = {}  # pid -> when its stop record was first seen (see below)
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == 0:
            _end_stuck_after_stop(run_dir, children, stop_seen)
            time.sleep(0.05)
            continue
        rank = children.pop(pid, None)
        if rank is None:
            continue
        if status != 0 or os.environ.get("HPCTRAIN_ZYGOTE_VERBOSE"):
            how = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                   else f"exit code {os.WEXITSTATUS(status)}")
            progress_line(f"[hpctrain] node zygote: rank {rank} (pid {pid}) ended with {how} "
                          f"at {time.time():.3f}")
        if status != 0 and code == 0:
            code = _first_failure(run_dir, children, rank, status)
    return code


def _first_failure(run_dir: str, children: dict, rank: int, status: int) -> int:
    """A first rank failed: record it, stop the others, and return the zygote's exit code."""
    _record_death(run_dir, rank, status)
    # the ranks that already ended on their own too: the one killed by a signal
    # (no record of its own) may be reaped after a peer that saw the lost connection
    _reap_ended(run_dir, children)
    code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else \
        (os.WEXITSTATUS(status) or 1)
    for other in list(children):
        try:
            os.kill(other, signal.SIGTERM)
        except ProcessLookupError:
            pass
    _stop_all(children, time.monotonic() + 5)
    return code


#: A rank that left ``stopped.rank-R.json`` (it stopped cleanly after the warning) and is
#: still alive this many seconds later is stuck in teardown: it is ended with SIGKILL.
STOPPED_GRACE_S = 0.5


def _end_stuck_after_stop(run_dir: str, children: dict, seen: dict) -> None:
    """Seen on the test cluster: a forked rank that had written its stop record never
    returned from the process group's teardown; the step then lingered until the
    supervisor's deadline. Once a rank's stop is on record nothing it still does matters
    to the run, so a rank still alive ``STOPPED_GRACE_S`` after the zygote first saw that
    record is ended (SIGKILL, and its exit counted as clean). ``seen`` (pid → time) keeps
    when each record was first seen, on this process's monotonic clock: the record's
    mtime is the file server's clock, which on a shared filesystem may be seconds off."""
    attempt = int(os.environ.get("HPCTRAIN_ATTEMPT", "1"))
    adir = os.path.join(run_dir, ".hpctrain", f"attempt-{attempt:03d}")
    now = time.monotonic()
    for pid, rank in list(children.items()):
        if pid not in seen:
            if os.path.exists(os.path.join(adir, f"stopped.rank-{rank}.json")):
                seen[pid] = now
            continue
        if now - seen[pid] > STOPPED_GRACE_S:
            progress_line(f"[hpctrain] node zygote: rank {rank} (pid {pid}) stopped cleanly "
                          f"{now - seen[pid]:.1f} s ago but is still alive; ending it")
            try:
                if os.environ.get("HPCTRAIN_ZYGOTE_VERBOSE"):
                    os.kill(pid, signal.SIGUSR2)  # faulthandler: its stacks into its log
                    time.sleep(0.3)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            children.pop(pid, None)
            seen.pop(pid, None)


def _reap_ended(run_dir: str, children: dict) -> None:
    """Reap every child that has ended (before any is signalled by us), leaving the error
    record of each that failed."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
        rank = children.pop(pid, None)
        if rank is not None and status != 0:
            _record_death(run_dir, rank, status)


def _stop_all(children: dict, deadline: float) -> None:
    """Wait for the children until ``deadline``, then SIGKILL what is left."""
    while children and time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid:
            children.pop(pid, None)
        else:
            time.sleep(0.05)
    for pid in list(children):
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        children.pop(pid, None)


if __name__ == "__main__":
    main()
