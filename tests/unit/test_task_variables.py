"""Each scheduler declares the names under which its own launcher tells a task its place
(``Scheduler.task_variables``) and the variables its jobs see (``env_patterns``), and every
reader takes them from there (issue 41): a rank's place (``cluster_env``), the node zygote
that forks a node's ranks, a rank's error record, the Horovod backend and a container runtime
that passes the environment by name. A new scheduler is then one class, and nothing outside
the schedulers and their own launchers names a scheduler's variables."""
import ast
import pathlib

import pytest

from hpctrain.backends.horovod import mpi_launched_here
from hpctrain.cluster_env import launcher_set_up_mpi, rank_hint, worker_info_from_env
from hpctrain.common.registry import SCHEDULERS, register_scheduler
from hpctrain.containers import passed_env
from hpctrain.errors import ConfigError
from hpctrain.schedulers.base import Scheduler, TaskVariables
from hpctrain.worker.nodezygote import child_env, step_shape

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "hpctrain"
SCHEDULER_PREFIXES = ("SLURM_", "SLURMD_", "PBS_", "LSB_", "LSF_")


class ToyQScheduler(Scheduler):
    """A batch system whose launcher ``toyrun`` starts the tasks, with names of its own."""

    name = "toyq"
    title = "ToyQ"
    template = "slurm.sh.j2"
    job_id_var = "TOYQ_JOB"
    task_source = "toyrun"
    task_variables = TaskVariables(
        rank="TOYQ_RANK", local_rank="TOYQ_LOCAL", node_rank="TOYQ_NODE", size=("TOYQ_SIZE",),
        tasks_per_node=("TOYQ_PER_NODE",), num_nodes=("TOYQ_NODES",), step=("TOYQ_STEP",),
        cpus_per_task="TOYQ_CPUS", mpi_type="TOYQ_MPI")
    env_patterns = ("TOYQ_*",)

    @classmethod
    def detect(cls, env):
        return "TOYQ_JOB" in env

    @classmethod
    def tasks_per_node_counts(cls, text):
        return [int(n) for n in text.split(",")]

    @classmethod
    def tasks_per_node_text(cls, per_node, nodes):
        return ",".join([str(per_node)] * nodes)


@pytest.fixture
def toyq():
    with SCHEDULERS.scoped():
        register_scheduler("toyq", f"{__name__}:ToyQScheduler")
        yield


# the one task toyrun started on node 1 of a 2-node step, one task per node
NODE_TASK = {"TOYQ_JOB": "9", "TOYQ_STEP": "0", "TOYQ_RANK": "1", "TOYQ_LOCAL": "0",
             "TOYQ_NODE": "1", "TOYQ_SIZE": "2", "TOYQ_PER_NODE": "1,1", "TOYQ_NODES": "2",
             "HPCTRAIN_HOSTS": "a,b", "HPCTRAIN_CPUS_PER_RANK": "4",
             "HPCTRAIN_RANKS_PER_NODE": "3"}


def test_the_zygote_forks_ranks_that_see_the_place_the_schedulers_launcher_would_give(toyq):
    assert step_shape(NODE_TASK) == (3, 2, 1)
    child = child_env(NODE_TASK, node=1, nodes=2, per_node=3, local=2)
    info = worker_info_from_env(child, hostname="b")
    assert (info.scheduler, info.launcher, info.job_id) == ("toyq", "toyq", "9")
    assert (info.world_rank, info.local_rank, info.node_rank, info.world_size,
            info.local_world_size, info.hosts) == (5, 2, 1, 6, 3, ("a", "b"))
    assert (child["TOYQ_PER_NODE"], child["TOYQ_CPUS"], child["HPCTRAIN_FORKED_RANK"]) == \
        ("3,3", "4", "1")
    assert not [k for k in child if k.startswith(SCHEDULER_PREFIXES)]


def test_the_error_record_horovod_and_containers_read_the_declared_names(toyq):
    child = child_env(NODE_TASK, node=1, nodes=2, per_node=3, local=2)
    assert rank_hint(child) == 5  # a rank that failed before it knew its place
    assert not launcher_set_up_mpi(child) and not mpi_launched_here("toyq", child)
    assert launcher_set_up_mpi(dict(child, TOYQ_MPI="pmix"))
    assert mpi_launched_here("toyq", dict(child, TOYQ_MPI="pmi2"))
    assert "TOYQ_*" in passed_env() and "SLURM_*" in passed_env()


def test_a_bad_task_variable_is_named_with_the_schedulers_own_words(toyq):
    with pytest.raises(ConfigError, match=r"TOYQ_NODE=2 is past the 2 nodes of "
                                          r"TOYQ_PER_NODE='1,1'(.|\n)*with toyrun"):
        worker_info_from_env(dict(NODE_TASK, TOYQ_NODE="2"), hostname="b")
    with pytest.raises(ConfigError, match=r"TOYQ_PER_NODE is not set; expected the tasks on "
                                          r"each node, e\.g\. '2,2,2'"):
        worker_info_from_env({k: v for k, v in NODE_TASK.items() if k != "TOYQ_PER_NODE"},
                             hostname="b")


def test_the_zygote_refuses_a_scheduler_that_starts_no_tasks_itself():
    with pytest.raises(ConfigError, match="starts tasks itself.*'pbs'"):
        step_shape({"PBS_JOBID": "7.s", "HPCTRAIN_RANKS_PER_NODE": "2"})


def test_only_the_schedulers_and_their_launchers_name_a_schedulers_variables():
    """Outside ``schedulers/``, ``launchers/`` (srun's, pbsdsh's own) and ``cluster_env`` no
    string in hpctrain's code names a scheduler's variable (docstrings aside)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if rel.startswith(("hpctrain/schedulers/", "hpctrain/launchers/")) or \
                rel == "hpctrain/cluster_env.py":
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr)}
        found += [f"{rel}:{n.lineno}: {n.value}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str)
                  and id(n) not in docs and n.value.startswith(SCHEDULER_PREFIXES)]
    assert found == []
