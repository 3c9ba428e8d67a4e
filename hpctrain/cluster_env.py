"""The worker's view of the cluster: environment variables in, :class:`WorkerInfo` out.

A pure module: no torch, no subprocesses, no network. Its only I/O is reading the
host file a scheduler names (``PBS_NODEFILE``), and that goes through the injectable
``read_file``.
It needs only the standard library and ``hostlist`` (python-hostlist).

Two layers
----------
1. **Launcher layer**: gives the ranks (world/local/node rank, world/local size). It
   is detected by :func:`detect_launcher`, the most specific launcher first, because
   a process started by a launcher *inside* an allocation also inherits the
   variables of every layer beneath it:

   ============  ==========================================================  ==========
   launcher      detected by                                                 node rank
   ============  ==========================================================  ==========
   ``torchrun``  ``RANK`` + ``LOCAL_RANK`` + ``WORLD_SIZE``                  ``GROUP_RANK``
   ``openmpi``   ``OMPI_COMM_WORLD_RANK``                                    derived
   ``pals``      ``PALS_RANKID`` (Cray PALS ``mpiexec``, or Slurm's           ``PALS_NODEID``
                 ``--mpi=cray_shasta``)
   ``pmi``       ``PMI_RANK`` with ``MPI_LOCALRANKID``/``PMI_LOCAL_RANK``     derived
                 (MPICH Hydra, Intel MPI), or ``PMI_RANK`` outside an srun
                 step
   ``slurm``     ``SLURM_PROCID`` *and* a step variable (``SLURM_STEP_ID``/   ``SLURM_NODEID``
                 ``SLURM_STEP_NUM_TASKS``): a task started by ``srun``
   ``local``     nothing of the above: rank 0 of 1                           0
   ============  ==========================================================  ==========

   ``SLURM_PROCID`` alone is *not* an srun task: slurmstepd also exports
   ``SLURM_PROCID=0`` to the batch script itself, and every rank that ``mpirun``
   starts inside an allocation inherits ``SLURM_*`` from whichever step started its
   daemon. ``srun --mpi=pmi2`` sets ``PMI_RANK``/``PMI_SIZE`` but no local rank, so
   such tasks fall through to ``slurm``, which has the complete picture.

2. **Allocation layer**: gives the hosts, the job id and the restart count. Each
   scheduler class (:mod:`hpctrain.schedulers`) says whether ``env`` is one of its jobs
   (``detect``: Slurm ``SLURM_JOB_ID``, PBS ``PBS_JOBID``, LSF ``LSB_JOBID``, asked in
   registration order, else ``local``) and reads its allocation (``allocation_from_env``):

   * Slurm hosts: ``SLURM_STEP_NODELIST`` when the ranks are the tasks of that very
     step (launcher ``slurm``, or ``pals`` through srun), else the job-wide
     ``SLURM_JOB_NODELIST``/``SLURM_NODELIST``: ranks started by ``mpirun`` or over
     ssh carry the variables of *different* steps on different nodes, and only the
     job-wide ones are the same on every rank. The step id goes into the derived
     port under the same rule.
   * PBS hosts: the ``PBS_NODEFILE`` lines (one per MPI slot), unique, in order of
     first appearance. LSF: ``LSB_DJOB_HOSTFILE`` likewise, else ``LSB_MCPU_HOSTS``.
   * local: ``hosts = (hostname,)``, job id ``"local"``.

   A scheduler that starts the ranks itself (Slurm's ``srun``) also gives the launcher
   layer's ranks (``is_task``/``task_ranks``): the ``slurm`` row above.

Overrides set by hpctrain's own launcher win where present: ``HPCTRAIN_JOB_ID``,
``HPCTRAIN_RESTART_COUNT``, ``HPCTRAIN_HOSTS`` (comma-separated, hostlist syntax
allowed), ``MASTER_ADDR``, ``MASTER_PORT``.

``master_addr`` is ``MASTER_ADDR`` if set, else the host where world rank 0 runs (with
``HPCTRAIN_MASTER_ADDR_SUFFIX`` appended, for sites whose interconnect has its own
hostnames, e.g. JUWELS' ``<host>i``):
``hosts[0]`` of the *unsorted* host list (Slurm block and cyclic distributions both
put task 0 on the step's first node; ``mpirun``/``mpiexec`` fill a PBS nodefile in
file order), or ``127.0.0.1`` for a run with no allocation. Slurm's ``arbitrary``
distribution can put rank 0 anywhere: set ``MASTER_ADDR`` there.

Bad values raise :class:`~hpctrain.errors.ConfigError` naming the variable.
"""
from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, List, NamedTuple, Optional

import hostlist

from .common.registry import detect_scheduler as detect, scheduler_class, scheduler_names
from .errors import ConfigError

__all__ = [
    "WorkerInfo", "worker_info_from_env", "detect_launcher", "detect_scheduler",
    "expand_hostlist", "parse_tasks_per_node", "hosts_from_nodefile", "derive_port",
]

_LOCALHOST = "127.0.0.1"

# Which process starts the ranks of each launcher, for error hints.
_SOURCE = {
    "torchrun": "torchrun (or hpctrain's local launcher)",
    "openmpi": "Open MPI's mpirun",
    "pals": "Cray PALS mpiexec (or srun --mpi=cray_shasta)",
    "pmi": "the PMI process manager (MPICH Hydra / Intel MPI mpiexec)",
    "local": "nothing",
}


def _source(launcher: str) -> str:
    """Which process sets the variables of ``launcher`` (a scheduler's own task launcher,
    such as srun, is named by its scheduler class)."""
    if launcher in _SOURCE:
        return _SOURCE[launcher]

    return scheduler_class(launcher).task_source or launcher


@dataclass(frozen=True)
class WorkerInfo:
    """Where this worker process sits in the run. Built by :func:`worker_info_from_env`."""

    world_rank: int
    local_rank: int
    node_rank: int
    world_size: int
    local_world_size: int
    hosts: tuple[str, ...]      # node host names in node-rank order (index = node_rank)
    master_addr: str            # host where world rank 0 runs
    master_port: int
    job_id: str
    restart_count: int
    launcher: str               # torchrun, openmpi, pals, pmi, a scheduler's own (srun), local
    scheduler: str              # a registered scheduler name (hpctrain.schedulers), or local


class _Ranks(NamedTuple):
    world_rank: int
    local_rank: int
    node_rank: Optional[int]    # None: this launcher does not say
    world_size: int
    local_world_size: int


class _Hosts(NamedTuple):
    job_id: str
    hosts: tuple[str, ...]      # (hostname,) when no host list is known
    hosts_var: Optional[str]    # the variable the hosts came from, for errors
    hosts_known: bool           # False: no scheduler or override named any host
    step: str                   # goes into the derived rendezvous port
    restart_count: int


# --------------------------------------------------------------------- helpers

def env_value(env: Mapping[str, str], name: str) -> Optional[str]:
    """The value of ``name``, or None when unset or blank."""
    value = env.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def first_set(env: Mapping[str, str], *names: str) -> tuple[Optional[str], Optional[str]]:
    """(name, value) of the first of ``names`` that is set, else (None, None)."""
    for name in names:
        value = env_value(env, name)
        if value is not None:
            return name, value
    return None, None


def env_int(name: str, value: str, *, what: str, source: str, minimum: int = 0) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not an integer; expected {what}",
                          hint=f"{name} is set by {source}; check that the job script "
                               f"does not overwrite it") from None
    if number < minimum:
        raise ConfigError(f"{name}={value!r} is below {minimum}; expected {what}",
                          hint=f"{name} is set by {source}; check that the job script "
                               f"does not overwrite it")
    return number


def required_int(env: Mapping[str, str], *names: str, what: str, launcher: str,
                 minimum: int = 0) -> tuple[str, int]:
    """(name, value) of the first of ``names`` that is set; ConfigError when none is."""
    name, value = first_set(env, *names)
    source = _source(launcher)
    if name is None or value is None:
        listed = " or ".join(names)
        raise ConfigError(f"{listed} is not set; expected {what}",
                          hint=f"the {launcher} launcher was detected, and {source} "
                               f"normally sets {listed}; was the variable removed?")
    return name, env_int(name, value, what=what, source=source, minimum=minimum)


def check_below(rank_name: str, rank: int, size_name: str, size: int, launcher: str) -> None:
    if rank >= size:
        raise ConfigError(f"{rank_name}={rank} is not below {size_name}={size}; "
                          f"expected a rank in [0, {size_name})",
                          hint=f"these variables come from {_source(launcher)}; a value "
                               f"left over from another launch can mix them up")


def _host_index(hosts: tuple[str, ...], hostname: str) -> Optional[int]:
    """Index of ``hostname`` in ``hosts``: exact name first, then short name (FQDN-safe)."""
    if hostname in hosts:
        return hosts.index(hostname)
    short = hostname.split(".", 1)[0]
    for i, host in enumerate(hosts):
        if host.split(".", 1)[0] == short:
            return i
    return None


# ------------------------------------------------------------ public helpers

def expand_hostlist(expr: str) -> list[str]:
    """Expand a Slurm hostlist expression, keeping the given order (never sorted).

    >>> expand_hostlist("n[9-10]")
    ['n9', 'n10']
    >>> expand_hostlist("rack[1-2]-node[01-02]")
    ['rack1-node01', 'rack1-node02', 'rack2-node01', 'rack2-node02']
    >>> expand_hostlist("n[08-11]")
    ['n08', 'n09', 'n10', 'n11']
    >>> expand_hostlist("a1,b[2-3],c")
    ['a1', 'b2', 'b3', 'c']
    >>> expand_hostlist("n[10,9]")
    ['n10', 'n9']
    >>> expand_hostlist("")
    []
    """
    try:
        return hostlist.expand_hostlist(expr.strip(), sort=False)
    except hostlist.BadHostlist as exc:
        raise ConfigError(f"bad hostlist expression {expr!r}: {exc}",
                          hint="expected e.g. 'n[01-04],gpu7'") from None


def parse_tasks_per_node(expr: str) -> list[int]:
    """Expand Slurm's compressed tasks-per-node string, one count per node.

    Format of ``SLURM_TASKS_PER_NODE``/``SLURM_STEP_TASKS_PER_NODE`` (srun(1)):
    ``N(xR)`` means N tasks on each of R consecutive nodes.

    >>> parse_tasks_per_node("2(x3),1")
    [2, 2, 2, 1]
    >>> parse_tasks_per_node("4")
    [4]
    >>> parse_tasks_per_node("1(x2),3(x1)")
    [1, 1, 3]
    """
    try:
        counts = hostlist.parse_slurm_tasks_per_node(expr.strip())
    except hostlist.BadHostlist as exc:
        raise ConfigError(f"bad tasks-per-node string {expr!r}: {exc}",
                          hint="expected Slurm's format, e.g. '2(x3),1'") from None
    return counts


def hosts_from_nodefile(text: str) -> list[str]:
    """Unique hosts of a PBS nodefile, in order of first appearance (never sorted).

    PBS writes one line per MPI slot (``mpiprocs``), so a host repeats; blank lines
    and ``#`` comments are skipped, and only the first word of a line counts.

    >>> hosts_from_nodefile("n2\\nn2\\nn1\\nn1\\n")
    ['n2', 'n1']
    >>> hosts_from_nodefile("x1.hsn.example.org\\n\\nx0.hsn.example.org\\n")
    ['x1.hsn.example.org', 'x0.hsn.example.org']
    """
    hosts: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        host = line.split()[0]
        if host not in seen:
            seen.add(host)
            hosts.append(host)
    return hosts


def derive_port(job_id: str, *, step: str = "", base: int = 20000, span: int = 12000) -> int:
    """A port in ``[base, base + span)`` that every rank of one job step computes alike.

    It is a hash (BLAKE2b) of job id and step, not ``job_id % span``: consecutive or
    ``span``-apart job ids (``1234`` and ``21234``) would otherwise share a port on
    a shared node. Two different (job, step) pairs still pick the same port with
    probability ``1/span`` (1 in 12000 by default); with k jobs on one node the odds
    of any clash are about ``k*(k-1)/2/span``. Set ``MASTER_PORT`` to rule it out.

    >>> derive_port("1234") == derive_port("1234")
    True
    >>> len({derive_port("1234"), derive_port("21234"), derive_port("1234", step="0")})
    3

    The default range, 20000–31999, stays below Linux's ephemeral ports (32768–60999),
    so an outgoing connection never holds the port the job wants.

    >>> 20000 <= derive_port("1234", step="0") < 32000
    True
    """
    if base < 1 or span < 1 or base + span - 1 > 65535:
        raise ConfigError(f"port range base={base}, span={span} does not fit in 1..65535",
                          hint="choose base >= 1, span >= 1 and base + span <= 65536")
    digest = hashlib.blake2b(f"{job_id}\0{step}".encode(), digest_size=8).digest()
    return base + int.from_bytes(digest, "big") % span


# ----------------------------------------------------------------- detection

def detect_launcher(env: Mapping[str, str]) -> str:
    """Which launcher started this process; the most specific one wins.

    Order: torchrun > openmpi > pals > pmi > slurm > local (see the module docstring).

    >>> detect_launcher({})
    'local'
    >>> detect_launcher({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2",
    ...                  "SLURM_PROCID": "0", "SLURM_STEP_ID": "0"})
    'torchrun'
    >>> detect_launcher({"OMPI_COMM_WORLD_RANK": "3", "SLURM_PROCID": "0"})
    'openmpi'
    >>> detect_launcher({"PALS_RANKID": "1", "PMI_RANK": "1", "PMI_LOCAL_RANK": "1"})
    'pals'
    >>> detect_launcher({"PMI_RANK": "1", "MPI_LOCALRANKID": "1"})
    'pmi'
    >>> detect_launcher({"PMI_RANK": "1", "SLURM_PROCID": "1", "SLURM_STEP_ID": "0"})
    'slurm'
    >>> detect_launcher({"SLURM_PROCID": "0", "SLURM_JOB_ID": "7"})  # the batch script
    'local'
    """
    if all(env_value(env, v) is not None for v in ("RANK", "LOCAL_RANK", "WORLD_SIZE")):
        return "torchrun"
    if env_value(env, "OMPI_COMM_WORLD_RANK") is not None:
        return "openmpi"
    if env_value(env, "PALS_RANKID") is not None:
        return "pals"
    task_of = _scheduler_task(env)  # started by the scheduler's own launcher (srun)
    if env_value(env, "PMI_RANK") is not None:
        has_local = first_set(env, "MPI_LOCALRANKID", "PMI_LOCAL_RANK")[0] is not None
        if has_local or task_of is None:
            return "pmi"
    if task_of is not None:
        return task_of
    return "local"


def _scheduler_task(env: Mapping[str, str]) -> Optional[str]:
    """The scheduler whose own launcher started this process as a rank, if any."""

    for name in scheduler_names():
        if scheduler_class(name).is_task(env):
            return name
    return None


def detect_scheduler(env: Mapping[str, str]) -> str:
    """Which batch system holds the allocation: slurm > pbs > local.

    >>> detect_scheduler({"SLURM_JOB_ID": "1234"})
    'slurm'
    >>> detect_scheduler({"PBS_JOBID": "77.pbs01"})
    'pbs'
    >>> detect_scheduler({})
    'local'
    """

    return detect(env)


def task_variables(env: Mapping[str, str]) -> Any:
    """The :class:`~hpctrain.schedulers.base.TaskVariables` of the scheduler that holds this
    process, or None where it starts no ranks itself (PBS, LSF, local).

    >>> task_variables({"SLURM_JOB_ID": "7"}).rank, task_variables({"PBS_JOBID": "7.s"})
    ('SLURM_PROCID', None)
    """
    return scheduler_class(detect(env)).task_variables


def launcher_set_up_mpi(env: Mapping[str, str]) -> bool:
    """True when the scheduler's own launcher started this rank as part of one MPI job
    (``srun --mpi=pmix|pmi2``: Slurm's ``SLURM_MPI_TYPE``), or PMIx did (``PMIX_RANK``).

    >>> launcher_set_up_mpi({"SLURM_JOB_ID": "7", "SLURM_MPI_TYPE": "pmix"})
    True
    >>> launcher_set_up_mpi({"SLURM_JOB_ID": "7", "SLURM_MPI_TYPE": "none"}), launcher_set_up_mpi({})
    (False, False)
    """
    if "PMIX_RANK" in env:
        return True
    names = task_variables(env)
    return bool(names and names.mpi_type
                and env.get(names.mpi_type, "none") not in ("", "none"))


def rank_hint(env: Mapping[str, str]) -> int:
    """This process's rank as far as the environment says without checking anything, for
    the error record of a rank that failed before it knew its place: the most specific
    launcher's rank variable (torchrun, Open MPI, PALS, PMI, the scheduler's task), else 0.

    >>> rank_hint({"SLURM_JOB_ID": "7", "SLURM_PROCID": "3"}), rank_hint({"RANK": "2"})
    (3, 2)
    >>> rank_hint({"PMI_RANK": "x"}), rank_hint({})
    (0, 0)
    """
    names = task_variables(env)
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PALS_RANKID", "PMI_RANK",
                 *((names.rank,) if names else ())):
        value = env_value(env, name)
        if value is not None:
            return int(value) if value.strip().isdigit() else 0
    return 0


# ------------------------------------------------------------ launcher layer

def _ranks_torchrun(env: Mapping[str, str]) -> _Ranks:
    # torch/distributed/run.py, "Environment Variables": LOCAL_RANK, RANK, GROUP_RANK
    # ("when running a single worker group per node, this is the rank of the node"),
    # LOCAL_WORLD_SIZE, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
    # https://docs.pytorch.org/docs/stable/elastic/run.html#environment-variables
    la = "torchrun"
    _, size = required_int(env, "WORLD_SIZE", what="the number of workers (>= 1)",
                       launcher=la, minimum=1)
    _, rank = required_int(env, "RANK", what="the global rank", launcher=la)
    _, local_size = required_int(env, "LOCAL_WORLD_SIZE", what="workers on this node (>= 1)",
                             launcher=la, minimum=1)
    _, local = required_int(env, "LOCAL_RANK", what="the rank on this node", launcher=la)
    check_below("RANK", rank, "WORLD_SIZE", size, la)
    check_below("LOCAL_RANK", local, "LOCAL_WORLD_SIZE", local_size, la)
    node: Optional[int] = None
    if env_value(env, "GROUP_RANK") is not None:
        _, node = required_int(env, "GROUP_RANK", what="the node (worker group) rank",
                           launcher=la)
    return _Ranks(rank, local, node, size, local_size)


def _ranks_openmpi(env: Mapping[str, str]) -> _Ranks:
    # https://docs.open-mpi.org/en/v5.0.x/tuning-apps/environment-var.html
    # OMPI_COMM_WORLD_NODE_RANK is "the relative rank of this process on this node
    # looking across *all* jobs": a per-node process index, NOT the node index.
    # The node index is derived later (this host in the host list, else by-slot).
    la = "openmpi"
    _, size = required_int(env, "OMPI_COMM_WORLD_SIZE", what="the number of processes (>= 1)",
                       launcher=la, minimum=1)
    _, rank = required_int(env, "OMPI_COMM_WORLD_RANK", what="the MPI rank", launcher=la)
    _, local_size = required_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE",
                             what="ranks of this job on this node (>= 1)",
                             launcher=la, minimum=1)
    _, local = required_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", what="the rank on this node",
                        launcher=la)
    check_below("OMPI_COMM_WORLD_RANK", rank, "OMPI_COMM_WORLD_SIZE", size, la)
    check_below("OMPI_COMM_WORLD_LOCAL_RANK", local, "OMPI_COMM_WORLD_LOCAL_SIZE",
                 local_size, la)
    return _Ranks(rank, local, None, size, local_size)


def _ranks_pals(env: Mapping[str, str]) -> _Ranks:
    # Slurm's mpi/cray_shasta plugin (SchedMD/slurm src/plugins/mpi/cray_shasta/
    # mpi_cray_shasta.c) sets PALS_RANKID=global task id, PALS_LOCAL_RANKID=local
    # task id, PALS_NODEID=node index, PMI_SIZE=ntasks, PMI_LOCAL_SIZE=tasks on this
    # node; PBS PALS mpiexec (ALCF Polaris) sets the same names plus PALS_LOCAL_SIZE.
    la = "pals"
    _, size = required_int(env, "PMI_SIZE", what="the number of ranks (>= 1)",
                       launcher=la, minimum=1)
    _, rank = required_int(env, "PALS_RANKID", what="the global rank", launcher=la)
    ls_name, local_size = required_int(env, "PALS_LOCAL_SIZE", "PMI_LOCAL_SIZE",
                                   what="ranks on this node (>= 1)", launcher=la, minimum=1)
    _, local = required_int(env, "PALS_LOCAL_RANKID", what="the rank on this node", launcher=la)
    _, node = required_int(env, "PALS_NODEID", what="the node index", launcher=la)
    check_below("PALS_RANKID", rank, "PMI_SIZE", size, la)
    check_below("PALS_LOCAL_RANKID", local, ls_name, local_size, la)
    return _Ranks(rank, local, node, size, local_size)


def _ranks_pmi(env: Mapping[str, str]) -> _Ranks:
    # MPICH Hydra's proxy (pmodels/mpich src/pm/hydra/proxy/pmip_cb.c) sets
    # MPI_LOCALRANKID and MPI_LOCALNRANKS per process next to PMI_RANK/PMI_SIZE;
    # Intel MPI lists the same four as per-process variables:
    # https://www.intel.com/content/www/us/en/docs/mpi-library/developer-reference-linux/2021-16/environment-variables-not-propagated-by-hydra.html
    la = "pmi"
    _, size = required_int(env, "PMI_SIZE", what="the number of ranks (>= 1)",
                       launcher=la, minimum=1)
    _, rank = required_int(env, "PMI_RANK", what="the global rank", launcher=la)
    ls_name, local_size = required_int(env, "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE",
                                   what="ranks on this node (>= 1)", launcher=la, minimum=1)
    lr_name, local = required_int(env, "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                              what="the rank on this node", launcher=la)
    check_below("PMI_RANK", rank, "PMI_SIZE", size, la)
    check_below(lr_name, local, ls_name, local_size, la)
    return _Ranks(rank, local, None, size, local_size)


_LAUNCHERS: dict[str, Callable[[Mapping[str, str]], _Ranks]] = {
    "torchrun": _ranks_torchrun,
    "openmpi": _ranks_openmpi,
    "pals": _ranks_pals,
    "pmi": _ranks_pmi,
}


# ---------------------------------------------------------------- the entry

def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _launcher_ranks(env: Mapping[str, str], launcher: str) -> _Ranks:
    """The ranks of this process as the detected ``launcher`` gives them."""
    if launcher == "local":
        return _Ranks(0, 0, 0, 1, 1)
    if launcher in _LAUNCHERS:
        return _LAUNCHERS[launcher](env)
    # a scheduler's own launcher (srun): its class reads the ranks
    return _Ranks(*scheduler_class(launcher).task_ranks(env))


def _allocation(env: Mapping[str, str], *, scheduler: str, launcher: str, hostname: str,
                reader: Callable[[str], str]) -> _Hosts:
    """Hosts, job id, step and restart count: the scheduler's, then hpctrain's overrides."""
    # ---- allocation layer: hosts, job id, restart count, step (the scheduler's class)
    alloc = scheduler_class(scheduler).allocation_from_env(env, launcher=launcher,
                                                           read_file=reader)
    job_id, hosts, hosts_var = alloc.job_id, tuple(alloc.hosts), alloc.hosts_var
    step, restart_count = alloc.step, alloc.restart_count

    # ---- overrides from hpctrain's launcher
    if env_value(env, "HPCTRAIN_JOB_ID") is not None:
        job_id = env["HPCTRAIN_JOB_ID"].strip()
    if env_value(env, "HPCTRAIN_RESTART_COUNT") is not None:
        restart_count = env_int("HPCTRAIN_RESTART_COUNT", env["HPCTRAIN_RESTART_COUNT"].strip(),
                                what="a count >= 0", source="hpctrain's launcher")
    if env_value(env, "HPCTRAIN_HOSTS") is not None:
        hosts_var, hosts = "HPCTRAIN_HOSTS", tuple(expand_hostlist(env["HPCTRAIN_HOSTS"]))
    hosts_known = bool(hosts)
    if not hosts_known:
        hosts_var, hosts = None, (hostname,)
    return _Hosts(job_id, hosts, hosts_var, hosts_known, step, restart_count)


def _node_rank(ranks: _Ranks, alloc: _Hosts, *, hostname: str, launcher: str) -> int:
    """This rank's node: from the launcher, else this host's place, else by-slot mapping."""
    hosts, hosts_known = alloc.hosts, alloc.hosts_known
    node_rank = ranks.node_rank
    if node_rank is None:
        found = _host_index(hosts, hostname) if hosts_known else None
        # Fallback assumes ranks are placed by slot (block) with the same count on
        # every node: node = rank // ranks-per-node. Cyclic/by-node mappings need the
        # host lookup above to succeed.
        node_rank = found if found is not None else ranks.world_rank // ranks.local_world_size
    if hosts_known and node_rank >= len(hosts):
        raise ConfigError(f"node rank {node_rank} ({launcher}) is past the {len(hosts)} "
                          f"hosts of {alloc.hosts_var}; expected a node index below {len(hosts)}",
                          hint="the ranks span more nodes than the host list names; set "
                               "HPCTRAIN_HOSTS or MASTER_ADDR to the hosts of this run")
    return node_rank


def _master_addr(env: Mapping[str, str], ranks: _Ranks, alloc: _Hosts) -> str:
    """The rendezvous host: MASTER_ADDR, else the first host, else localhost on one node."""
    master_addr = env_value(env, "MASTER_ADDR")
    if master_addr is None:
        if alloc.hosts_known:
            # a site whose fast network has hostnames of its own (JSC: "jwb0001" + "i" is
            # the InfiniBand name) sets HPCTRAIN_MASTER_ADDR_SUFFIX in its [env]
            master_addr = alloc.hosts[0] + (env_value(env, "HPCTRAIN_MASTER_ADDR_SUFFIX") or "")
        elif ranks.world_size > ranks.local_world_size:
            raise ConfigError(f"MASTER_ADDR is not set and the {ranks.world_size} ranks span "
                              f"several nodes with no host list; expected MASTER_ADDR",
                              hint="export MASTER_ADDR (the host of rank 0) or HPCTRAIN_HOSTS, "
                                   "or run inside a Slurm/PBS allocation")
        else:
            master_addr = _LOCALHOST
    return master_addr


def _master_port(env: Mapping[str, str], *, job_id: str, step: str) -> int:
    """The rendezvous port: MASTER_PORT, else one derived from the job id and step."""
    port_text = env_value(env, "MASTER_PORT")
    if port_text is not None:
        master_port = env_int("MASTER_PORT", port_text, what="a TCP port in 1..65535",
                              source="the launcher or job script", minimum=1)
        if master_port > 65535:
            raise ConfigError(f"MASTER_PORT={port_text!r} is above 65535; "
                              f"expected a TCP port in 1..65535",
                              hint="unset MASTER_PORT to let hpctrain derive one per job")
    else:
        master_port = derive_port(job_id, step=step)
    return master_port


def worker_info_from_env(env: Mapping[str, str] | None = None, *,
                         hostname: str | None = None,
                         read_file: Callable[[str], str] | None = None) -> WorkerInfo:
    """Build this worker's :class:`WorkerInfo` from environment variables.

    ``env`` defaults to ``os.environ``, ``hostname`` to ``socket.gethostname()``,
    ``read_file`` (used for ``PBS_NODEFILE`` only) to reading the file as text.

    >>> worker_info_from_env({}, hostname="laptop")  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
    WorkerInfo(world_rank=0, local_rank=0, node_rank=0, world_size=1,
               local_world_size=1, hosts=('laptop',), master_addr='127.0.0.1',
               master_port=..., job_id='local', restart_count=0,
               launcher='local', scheduler='local')
    >>> info = worker_info_from_env({
    ...     "SLURM_JOB_ID": "1234", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3",
    ...     "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_STEP_NUM_TASKS": "4",
    ...     "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_NODELIST": "n[9-10]"},
    ...     hostname="n10")
    >>> info.world_rank, info.node_rank, info.hosts, info.master_addr
    (3, 1, ('n9', 'n10'), 'n9')
    """
    if env is None:
        env = os.environ
    if hostname is None:
        hostname = socket.gethostname()
    reader = read_file if read_file is not None else _read_text

    launcher = detect_launcher(env)
    scheduler = detect_scheduler(env)
    ranks = _launcher_ranks(env, launcher)
    alloc = _allocation(env, scheduler=scheduler, launcher=launcher, hostname=hostname,
                        reader=reader)
    node_rank = _node_rank(ranks, alloc, hostname=hostname, launcher=launcher)
    master_addr = _master_addr(env, ranks, alloc)
    master_port = _master_port(env, job_id=alloc.job_id, step=alloc.step)

    return WorkerInfo(
        world_rank=ranks.world_rank, local_rank=ranks.local_rank, node_rank=node_rank,
        world_size=ranks.world_size, local_world_size=ranks.local_world_size,
        hosts=alloc.hosts, master_addr=master_addr, master_port=master_port,
        job_id=alloc.job_id, restart_count=alloc.restart_count, launcher=launcher,
        scheduler=scheduler,
    )


def gpu_binding(mode: str, *, local_rank: int, local_world_size: int,
                gpus_per_worker: int = 1) -> Optional[str]:
    """The devices one rank sees when the site binds GPUs per rank (the value of
    ``CUDA_VISIBLE_DEVICES`` or ``ROCR_VISIBLE_DEVICES``), or None for ``"none"``.

    ``local_rank``: rank r gets devices r·g … r·g+g-1 (LUMI's ``ROCR_VISIBLE_DEVICES=
    $SLURM_LOCALID``). ``local_rank_reverse``: counted from the last device (ALCF Polaris'
    ``set_affinity_gpu_polaris.sh``, which pairs rank 0 with GPU 3 for the CPU/NIC
    topology).

    >>> gpu_binding("local_rank", local_rank=1, local_world_size=4)
    '1'
    >>> gpu_binding("local_rank_reverse", local_rank=0, local_world_size=4)
    '3'
    >>> gpu_binding("local_rank", local_rank=1, local_world_size=2, gpus_per_worker=2)
    '2,3'
    """
    if mode == "none":
        return None
    total = local_world_size * gpus_per_worker
    devices = [local_rank * gpus_per_worker + i for i in range(gpus_per_worker)]
    if mode == "local_rank_reverse":
        devices = [total - 1 - d for d in devices]
    elif mode != "local_rank":
        raise ValueError(f"unknown GPU binding {mode!r}")
    return ",".join(str(d) for d in devices)


def visible_gpu_count(value: Optional[str], device_count: int) -> int:
    """How many GPUs a process sees: the entries of ``CUDA_VISIBLE_DEVICES`` (``value``)
    when it is set, else what the driver reports (``device_count``). ``""`` and Slurm's
    ``"NoDevFiles"`` mean none.

    >>> visible_gpu_count("2,3", 8), visible_gpu_count(None, 4), visible_gpu_count("", 4)
    (2, 4, 0)
    """
    if value is None:
        return device_count
    value = value.strip()
    if not value or value == "NoDevFiles":
        return 0
    return len([v for v in value.split(",") if v.strip()])


def local_gpu_indices(visible: int, *, local_rank: int, local_world_size: int,
                      gpus_per_worker: int) -> List[int]:
    """The device indices (``cuda:<i>``) of one rank's GPUs among the ``visible`` ones.

    * The rank sees only its own GPUs (``srun --gpus-per-task``, a site's per-rank
      binding): ``visible`` ≤ ``gpus_per_worker`` → all of them, ``0 … visible-1``.
    * The node's GPUs are shared by its ranks (local runs, ``mpiexec``): rank *r* takes
      ``r·g … r·g+g-1``.
    * Fewer GPUs than the ranks need: shared round robin (rank *r*'s first GPU is
      ``r·g mod visible``), as ``get_device`` always did.

    >>> local_gpu_indices(1, local_rank=3, local_world_size=4, gpus_per_worker=1)
    [0]
    >>> local_gpu_indices(8, local_rank=1, local_world_size=4, gpus_per_worker=2)
    [2, 3]
    """
    g = max(1, gpus_per_worker)
    if visible <= 0:
        return []
    if visible <= g:
        return list(range(visible))
    if visible >= local_world_size * g:
        return [local_rank * g + i for i in range(g)]
    return [(local_rank * g + i) % visible for i in range(g)]

