"""``srun`` launcher: one job step that starts every rank of an attempt under Slurm.

Each rank then derives its place from the step's environment (``SLURM_PROCID``,
``SLURM_LOCALID``, ``SLURM_NODEID``, ``SLURM_STEP_NODELIST``; see
:mod:`hpctrain.cluster_env`). ``--kill-on-bad-exit=1`` ends the whole step as soon as one
rank exits non-zero, so a crashed rank never leaves its peers hanging in a collective.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from ..worker.nodezygote import fork_requested
from .base import Launcher, LineSink
from .step import StepWorkerGroup


def srun_argv(*, nodes: int, workers_per_node: int, command: Sequence[str],
              cpus_per_worker: Optional[int] = None, gpus_per_worker: int = 0,
              extra_args: Sequence[str] = (), executable: str = "srun") -> List[str]:
    """The srun command line of one attempt.

    >>> srun_argv(nodes=2, workers_per_node=2, command=["python", "-m", "w"])
    ['srun', '--kill-on-bad-exit=1', '--nodes=2', '--ntasks=4', '--ntasks-per-node=2', 'python', '-m', 'w']
    >>> srun_argv(nodes=1, workers_per_node=4, cpus_per_worker=8, gpus_per_worker=1,
    ...           extra_args=["--cpu-bind=cores"], command=["w"])[2:]
    ['--nodes=1', '--ntasks=4', '--ntasks-per-node=4', '--cpus-per-task=8', '--gpus-per-task=1', '--cpu-bind=cores', 'w']

    ``--cpus-per-task`` is passed explicitly: since Slurm 22.05 srun no longer inherits
    it from the batch allocation. An option of hpctrain's that ``extra_args`` (the site's
    or the job's ``launcher_args``) also give is left to them, so that it appears once:

    >>> srun_argv(nodes=1, workers_per_node=8, cpus_per_worker=4, gpus_per_worker=1,
    ...           extra_args=["--cpus-per-task", "7", "--gpu-bind=closest"], command=["w"])[2:]
    ['--nodes=1', '--ntasks=8', '--ntasks-per-node=8', '--gpus-per-task=1', '--cpus-per-task', '7', '--gpu-bind=closest', 'w']
    """
    given = {str(a).split("=", 1)[0] for a in extra_args if str(a).startswith("--")}
    argv = [executable, "--kill-on-bad-exit=1", f"--nodes={nodes}",
            f"--ntasks={nodes * workers_per_node}", f"--ntasks-per-node={workers_per_node}"]
    if cpus_per_worker and "--cpus-per-task" not in given:
        argv.append(f"--cpus-per-task={cpus_per_worker}")
    if gpus_per_worker and "--gpus-per-task" not in given:
        argv.append(f"--gpus-per-task={gpus_per_worker}")
    return argv + list(extra_args) + list(command)


class SrunLauncher(Launcher):
    name = "srun"

    @classmethod
    def for_spec(cls, spec, *, name: str, launcher_args: Sequence[str],
                 mpi: bool) -> "SrunLauncher":
        """A job step of the spec's ranks; ``--mpi=pmix`` for a backend that needs MPI
        unless the launcher arguments name an ``--mpi`` plugin themselves."""
        sched, scaling = spec.scheduler, spec.scaling
        extra = tuple(launcher_args)
        if mpi and not any(a == "--mpi" or a.startswith("--mpi=") for a in extra):
            extra = ("--mpi=pmix",) + extra
        return cls(nodes=scaling.nodes, workers_per_node=scaling.per_node,
                   cpus_per_worker=scaling.cpus_each,
                   gpus_per_worker=scaling.gpus_each if sched.gpu_binding == "none" else 0,
                   extra_args=extra)

    def __init__(self, *, nodes: int, workers_per_node: int,
                 cpus_per_worker: Optional[int] = None, gpus_per_worker: int = 0,
                 extra_args: Sequence[str] = (), executable: str = "srun"):
        self.nodes = nodes
        self.workers_per_node = workers_per_node
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = gpus_per_worker
        self.extra_args = list(extra_args)
        self.executable = executable

    def launch(self, *, command: Sequence[str], env: Dict[str, str], num_workers: int,
               log_dir: str, on_line: Optional[LineSink] = None) -> StepWorkerGroup:
        if num_workers != self.nodes * self.workers_per_node:
            raise ValueError(f"srun: {num_workers} workers do not fill {self.nodes} nodes × "
                             f"{self.workers_per_node} per node")
        forked = zygote_argv(self, command, env)
        if forked is not None:
            argv, env = forked
            return _ZygoteStepGroup(argv, env, log_dir)
        argv = srun_argv(nodes=self.nodes, workers_per_node=self.workers_per_node,
                         cpus_per_worker=self.cpus_per_worker,
                         gpus_per_worker=self.gpus_per_worker, extra_args=self.extra_args,
                         command=command, executable=self.executable)
        return StepWorkerGroup(argv, env, log_dir)


class _ZygoteStepGroup(StepWorkerGroup):
    """A step of node zygotes: srun's "task N" is a node there, not a rank, so only the
    step's own exit is kept (the zygote leaves the failed rank's error record)."""

    def _poll(self, timeout: float) -> None:
        super()._poll(timeout)
        if self._exit is not None:
            self._records = [r for r in self._records if r.rank < 0]


def zygote_argv(launcher: SrunLauncher, command: Sequence[str], env: Dict[str, str]):
    """With ``HPCTRAIN_FORK_RANKS=1``: ``(argv, env)`` of a step with one task per node,
    :mod:`hpctrain.worker.nodezygote`, that imports once and forks the node's ranks
    (fast restarts, see docs/guide/fast-restarts.md). None — the ordinary one task per
    rank — when it is off, or when the step needs per-task binding srun must do itself
    (GPUs per task, an ``--mpi`` plugin), or the command is not the hpctrain worker.

    >>> l = SrunLauncher(nodes=2, workers_per_node=4, cpus_per_worker=2)
    >>> argv, env = zygote_argv(l, ["py", "-m", "hpctrain.worker", "/r"],
    ...                         {"HPCTRAIN_FORK_RANKS": "1"})
    >>> argv[1:6], argv[-3:], env["HPCTRAIN_RANKS_PER_NODE"]
    (['--kill-on-bad-exit=1', '--nodes=2', '--ntasks=2', '--ntasks-per-node=1', '--cpus-per-task=8'], ['-m', 'hpctrain.worker.nodezygote', '/r'], '4')
    >>> zygote_argv(l, ["py", "-m", "hpctrain.worker", "/r"], {}) is None
    True
    """

    if not fork_requested(env) or launcher.gpus_per_worker:
        return None
    if any(a == "--mpi" or a.startswith("--mpi=") for a in launcher.extra_args):
        return None
    if len(command) != 4 or list(command[1:3]) != ["-m", "hpctrain.worker"]:
        return None
    env = dict(env)
    env["HPCTRAIN_RANKS_PER_NODE"] = str(launcher.workers_per_node)
    if launcher.cpus_per_worker:
        env["HPCTRAIN_CPUS_PER_RANK"] = str(launcher.cpus_per_worker)
    cpus = launcher.cpus_per_worker * launcher.workers_per_node \
        if launcher.cpus_per_worker else None
    argv = srun_argv(nodes=launcher.nodes, workers_per_node=1, cpus_per_worker=cpus,
                     extra_args=launcher.extra_args,
                     command=[command[0], "-m", "hpctrain.worker.nodezygote", command[3]],
                     executable=launcher.executable)
    return argv, env
