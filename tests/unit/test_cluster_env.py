"""Table-driven tests for hpctrain.cluster_env: env vars in, WorkerInfo out."""
from __future__ import annotations

import ast
import doctest
import pathlib

import pytest

from hpctrain import cluster_env
from hpctrain.cluster_env import (
    WorkerInfo,
    derive_port,
    detect_launcher,
    detect_scheduler,
    expand_hostlist,
    hosts_from_nodefile,
    parse_tasks_per_node,
    worker_info_from_env,
)
from hpctrain.errors import ConfigError


# --------------------------------------------------------------- hostlists

@pytest.mark.parametrize("expr, expected", [
    pytest.param("n[9-10]", ["n9", "n10"], id="numeric-not-text-order"),
    pytest.param("rack[1-2]-node[01-04]",
                 ["rack1-node01", "rack1-node02", "rack1-node03", "rack1-node04",
                  "rack2-node01", "rack2-node02", "rack2-node03", "rack2-node04"],
                 id="two-ranges"),
    pytest.param("n[001-003]", ["n001", "n002", "n003"], id="leading-zeros"),
    pytest.param("n[08-11]", ["n08", "n09", "n10", "n11"], id="leading-zeros-carry"),
    pytest.param("a1,b[2-3],c", ["a1", "b2", "b3", "c"], id="mixed-list"),
    pytest.param("n[10,9],m1", ["n10", "n9", "m1"], id="given-order-kept"),
    pytest.param("gpu7", ["gpu7"], id="single-host"),
    pytest.param("", [], id="empty"),
])
def test_expand_hostlist(expr, expected):
    assert expand_hostlist(expr) == expected


@pytest.mark.parametrize("expr", [
    pytest.param("n[1-", id="unbalanced"),
    pytest.param("n[[1-2]]", id="nested"),
])
def test_expand_hostlist_rejects_bad_expression(expr):
    with pytest.raises(ConfigError, match="hostlist"):
        expand_hostlist(expr)


@pytest.mark.parametrize("expr, expected", [
    pytest.param("2(x3),1", [2, 2, 2, 1], id="repeat-then-single"),
    pytest.param("4", [4], id="single"),
    pytest.param("1(x2),3(x1)", [1, 1, 3], id="x1-repeat"),
    pytest.param("16(x128)", [16] * 128, id="large-repeat"),
])
def test_parse_tasks_per_node(expr, expected):
    assert parse_tasks_per_node(expr) == expected


@pytest.mark.parametrize("expr", [
    pytest.param("", id="empty"),
    pytest.param("2(x)", id="missing-count"),
    pytest.param("two", id="not-a-number"),
])
def test_parse_tasks_per_node_rejects_bad_string(expr):
    with pytest.raises(ConfigError, match="tasks-per-node"):
        parse_tasks_per_node(expr)


@pytest.mark.parametrize("text, expected", [
    pytest.param("n1\nn1\nn2\nn2\n", ["n1", "n2"], id="mpiprocs-2"),
    pytest.param("n2\nn2\nn1\nn1\n", ["n2", "n1"], id="first-appearance-not-sorted"),
    pytest.param("n10\nn9\n", ["n10", "n9"], id="never-sorted-as-text"),
    pytest.param("\nx1.hsn.example.org\n\n# c\nx0.hsn.example.org  \n",
                 ["x1.hsn.example.org", "x0.hsn.example.org"], id="blank-comment-fqdn"),
    pytest.param("", [], id="empty"),
])
def test_hosts_from_nodefile(text, expected):
    assert hosts_from_nodefile(text) == expected


# --------------------------------------------------------------------- ports

@pytest.mark.parametrize("a, b", [
    pytest.param(("1234", ""), ("21234", ""), id="ids-span-apart"),
    pytest.param(("1234", ""), ("1235", ""), id="consecutive-ids"),
    pytest.param(("1234", ""), ("1234", "0"), id="job-vs-step"),
    pytest.param(("1234", "0"), ("1234", "1"), id="two-steps"),
    pytest.param(("12", "34"), ("123", "4"), id="no-concatenation-clash"),
])
def test_derive_port_two_jobs_on_one_node_differ(a, b):
    assert derive_port(a[0], step=a[1]) != derive_port(b[0], step=b[1])


@pytest.mark.parametrize("job_id, step, expected", [
    pytest.param("1234", "", 27033, id="job"),
    pytest.param("21234", "", 23137, id="other-job"),
    pytest.param("1234", "0", 24542, id="step-0"),
    pytest.param("local", "", 28831, id="local"),
])
def test_derive_port_is_stable(job_id, step, expected):
    # Pinned: every rank, whatever its Python process, must compute the same port.
    assert derive_port(job_id, step=step) == expected


def test_derive_port_stays_in_range():
    ports = {derive_port(str(j), step=str(s), base=30000, span=100)
             for j in range(200) for s in range(3)}
    assert min(ports) >= 30000 and max(ports) < 30100
    assert len(ports) > 90  # spread over the range, not a few buckets


@pytest.mark.parametrize("base, span", [
    pytest.param(0, 10, id="base-zero"),
    pytest.param(20000, 0, id="span-zero"),
    pytest.param(60000, 6000, id="past-65535"),
])
def test_derive_port_rejects_bad_range(base, span):
    with pytest.raises(ConfigError, match="port range"):
        derive_port("1", base=base, span=span)


# ----------------------------------------------------------------- detection

@pytest.mark.parametrize("env, expected", [
    pytest.param({}, "local", id="nothing"),
    pytest.param({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                  "SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "PMI_RANK": "0"},
                 "torchrun", id="torchrun-inside-slurm"),
    pytest.param({"OMPI_COMM_WORLD_RANK": "3", "SLURM_PROCID": "0", "SLURM_STEP_ID": "0"},
                 "openmpi", id="mpirun-inside-slurm"),
    pytest.param({"PALS_RANKID": "1", "PMI_RANK": "1", "PMI_LOCAL_RANK": "1",
                  "SLURM_PROCID": "1", "SLURM_STEP_ID": "0"}, "pals", id="srun-cray-shasta"),
    pytest.param({"PMI_RANK": "1", "MPI_LOCALRANKID": "1", "SLURM_PROCID": "0",
                  "SLURM_STEP_ID": "0"}, "pmi", id="hydra-proxy-via-srun"),
    pytest.param({"PMI_RANK": "1", "PMI_SIZE": "2"}, "pmi", id="bare-pmi"),
    pytest.param({"PMI_RANK": "1", "PMI_SIZE": "2", "SLURM_PROCID": "1",
                  "SLURM_STEP_NUM_TASKS": "2"}, "slurm", id="srun-mpi-pmi2"),
    pytest.param({"SLURM_PROCID": "0", "SLURM_STEP_ID": "3"}, "slurm", id="srun-task"),
    pytest.param({"SLURM_PROCID": "0", "SLURM_JOB_ID": "9", "SLURM_NTASKS": "8"},
                 "local", id="batch-script-is-not-a-task"),
    pytest.param({"RANK": "", "LOCAL_RANK": "", "WORLD_SIZE": ""}, "local", id="blank-values"),
])
def test_detect_launcher(env, expected):
    assert detect_launcher(env) == expected


@pytest.mark.parametrize("env, expected", [
    pytest.param({}, "local", id="nothing"),
    pytest.param({"SLURM_JOB_ID": "1"}, "slurm", id="slurm"),
    pytest.param({"SLURM_JOBID": "1"}, "slurm", id="slurm-old-name"),
    pytest.param({"PBS_JOBID": "7.pbs"}, "pbs", id="pbs"),
    pytest.param({"SLURM_JOB_ID": "1", "PBS_JOBID": "7.pbs"}, "slurm", id="slurm-first"),
])
def test_detect_scheduler(env, expected):
    assert detect_scheduler(env) == expected


# ------------------------------------------------------------- full WorkerInfo

def _srun_2x2(rank: int) -> dict[str, str]:
    """The env srun gives task ``rank`` of ``srun -N2 --ntasks-per-node=2`` in job 1234."""
    return {
        "SLURM_JOB_ID": "1234", "SLURM_JOBID": "1234", "SLURM_STEP_ID": "0",
        "SLURM_JOB_NODELIST": "n[9-10]", "SLURM_NODELIST": "n[9-10]",
        "SLURM_STEP_NODELIST": "n[9-10]", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank % 2),
        "SLURM_NODEID": str(rank // 2),
    }


SLURM_HOSTS = ("n9", "n10")
PORT_1234_STEP0 = derive_port("1234", step="0")
PORT_1234 = derive_port("1234")
POLARIS = ("x3006c0s13b0n0.hsn.cm.polaris.alcf.anl.gov",
           "x3006c0s19b0n0.hsn.cm.polaris.alcf.anl.gov")
POLARIS_JOB = "4242.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"

CASES = [
    pytest.param(
        {}, "laptop", {},
        WorkerInfo(0, 0, 0, 1, 1, ("laptop",), "127.0.0.1", derive_port("local"),
                   "local", 0, "local", "local"),
        id="local-no-variables"),
    *[pytest.param(
        _srun_2x2(r), SLURM_HOSTS[r // 2], {},
        WorkerInfo(r, r % 2, r // 2, 4, 2, SLURM_HOSTS, "n9", PORT_1234_STEP0,
                   "1234", 0, "slurm", "slurm"),
        id=f"srun-2x2-rank{r}") for r in range(4)],
    pytest.param(
        {**_srun_2x2(2), "SLURM_STEP_NODELIST": "rack[1-2]-node[01-02]",
         "SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_STEP_NUM_TASKS": "7",
         "SLURM_PROCID": "6", "SLURM_LOCALID": "0", "SLURM_NODEID": "3",
         "SLURM_RESTART_COUNT": "2"},
        "rack2-node02", {},
        WorkerInfo(6, 0, 3, 7, 1,
                   ("rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"),
                   "rack1-node01", PORT_1234_STEP0, "1234", 2, "slurm", "slurm"),
        id="srun-uneven-tasks-per-node-requeued"),
    pytest.param(
        {**_srun_2x2(1), "SLURM_STEP_NODELIST": "n[08-11]", "SLURM_NODEID": "2",
         "SLURM_STEP_TASKS_PER_NODE": "1(x2),3(x1),1", "SLURM_STEP_NUM_TASKS": "6",
         "SLURM_PROCID": "3", "SLURM_LOCALID": "1"},
        "n10", {},
        WorkerInfo(3, 1, 2, 6, 3, ("n08", "n09", "n10", "n11"), "n08", PORT_1234_STEP0,
                   "1234", 0, "slurm", "slurm"),
        id="srun-leading-zeros"),
    pytest.param(
        {**_srun_2x2(0), "MASTER_ADDR": "n10", "MASTER_PORT": "29400"}, "n9", {},
        WorkerInfo(0, 0, 0, 4, 2, SLURM_HOSTS, "n10", 29400, "1234", 0, "slurm", "slurm"),
        id="rank0-not-on-first-host-master-addr-given"),
    pytest.param(
        # mpirun inside a Slurm allocation: every rank inherits SLURM_* of whichever
        # step started its daemon (SLURM_PROCID=0 everywhere, a step node list that
        # is not the job's). Ranks come from OMPI, hosts from the job-wide list.
        {**_srun_2x2(0), "SLURM_STEP_NODELIST": "n10", "SLURM_STEP_ID": "0",
         "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_TASKS_PER_NODE": "1",
         "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
         "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
         "OMPI_COMM_WORLD_NODE_RANK": "1", "OMPI_UNIVERSE_SIZE": "4"},
        "n10", {},
        WorkerInfo(3, 1, 1, 4, 2, SLURM_HOSTS, "n9", PORT_1234, "1234", 0,
                   "openmpi", "slurm"),
        id="slurm-vars-leak-into-mpirun-ranks"),
    pytest.param(
        {**_srun_2x2(0), "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
         "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
         "OMPI_COMM_WORLD_NODE_RANK": "0"},
        "n10.cluster.example.org", {},
        WorkerInfo(2, 0, 1, 4, 2, SLURM_HOSTS, "n9", PORT_1234, "1234", 0,
                   "openmpi", "slurm"),
        id="openmpi-node-from-fqdn-hostname"),
    pytest.param(
        {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
         "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
         "OMPI_COMM_WORLD_NODE_RANK": "1", "HPCTRAIN_HOSTS": "a,b",
         "HPCTRAIN_JOB_ID": "run-7"},
        "elsewhere", {},
        WorkerInfo(5, 1, 1, 8, 4, ("a", "b"), "a", derive_port("run-7"), "run-7", 0,
                   "openmpi", "local"),
        id="openmpi-node-by-slot-when-host-not-listed"),
    pytest.param(
        # srun --ntasks-per-node=1 torchrun ... : torchrun's ranks, Slurm's hosts.
        {**_srun_2x2(0), "SLURM_PROCID": "1", "SLURM_NODEID": "1", "SLURM_LOCALID": "0",
         "SLURM_STEP_ID": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_RESTART_COUNT": "1",
         "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
         "GROUP_RANK": "1", "MASTER_ADDR": "n9", "MASTER_PORT": "29500",
         "TORCHELASTIC_RESTART_COUNT": "0"},
        "n10", {},
        WorkerInfo(5, 1, 1, 8, 4, SLURM_HOSTS, "n9", 29500, "1234", 1, "torchrun", "slurm"),
        id="torchrun-inside-slurm"),
    pytest.param(
        {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
        "laptop", {},
        WorkerInfo(1, 1, 0, 2, 2, ("laptop",), "127.0.0.1", derive_port("local"),
                   "local", 0, "torchrun", "local"),
        id="torchrun-local-single-node"),
    pytest.param(
        # Polaris: PBS Pro + PALS mpiexec, 2 nodes x 4 ranks, FQDNs in the nodefile.
        {"PBS_JOBID": POLARIS_JOB, "PBS_NODEFILE": "/var/spool/pbs/aux/" + POLARIS_JOB,
         "PALS_APID": "abc", "PALS_DEPTH": "8", "PALS_RANKID": "5", "PALS_LOCAL_RANKID": "1",
         "PALS_NODEID": "1", "PALS_LOCAL_SIZE": "4", "PMI_RANK": "5", "PMI_SIZE": "8",
         "PMI_LOCAL_RANK": "1", "PMI_LOCAL_SIZE": "4"},
        "x3006c0s19b0n0", {"/var/spool/pbs/aux/" + POLARIS_JOB: "\n".join(POLARIS) + "\n"},
        WorkerInfo(5, 1, 1, 8, 4, POLARIS, POLARIS[0], derive_port(POLARIS_JOB),
                   POLARIS_JOB, 0, "pals", "pbs"),
        id="pals-polaris"),
    pytest.param(
        # srun --mpi=cray_shasta on a step that uses 2 of the job's 3 nodes: PALS_NODEID
        # indexes the step's node list, and the step id goes into the port.
        {"SLURM_JOB_ID": "1234", "SLURM_JOB_NODELIST": "n[9-11]", "SLURM_STEP_ID": "5",
         "SLURM_STEP_NODELIST": "n[10-11]", "SLURM_STEP_NUM_TASKS": "4",
         "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": "3", "SLURM_LOCALID": "1",
         "SLURM_NODEID": "1", "PALS_RANKID": "3", "PALS_LOCAL_RANKID": "1", "PALS_NODEID": "1",
         "PALS_APID": "1234.5", "PMI_RANK": "3", "PMI_SIZE": "4", "PMI_LOCAL_RANK": "1",
         "PMI_LOCAL_SIZE": "2"},
        "n11", {},
        WorkerInfo(3, 1, 1, 4, 2, ("n10", "n11"), "n10", derive_port("1234", step="5"),
                   "1234", 0, "pals", "slurm"),
        id="pals-through-srun-cray-shasta"),
    pytest.param(
        {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
         "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"},
        "laptop", {},
        WorkerInfo(2, 2, 0, 4, 4, ("laptop",), "127.0.0.1", derive_port("local"),
                   "local", 0, "openmpi", "local"),
        id="openmpi-single-node-no-scheduler"),
    pytest.param(
        # Intel MPI / MPICH Hydra on PBS, mpiprocs=2: rank 0 is on n2, listed first
        # although n1 sorts first.
        {"PBS_JOBID": "77.pbs01", "PBS_NODEFILE": "/aux/77", "PMI_RANK": "2", "PMI_SIZE": "4",
         "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2", "PMI_FD": "5"},
        "n1", {"/aux/77": "n2\nn2\nn1\nn1\n"},
        WorkerInfo(2, 0, 1, 4, 2, ("n2", "n1"), "n2", derive_port("77.pbs01"), "77.pbs01",
                   0, "pmi", "pbs"),
        id="intel-mpi-pbs-nodefile-order"),
    pytest.param(
        # MPICH Hydra inside Slurm: the proxies were started by srun, so SLURM_* of
        # the proxy step leak in; ranks come from PMI.
        {**_srun_2x2(0), "SLURM_PROCID": "1", "SLURM_NODEID": "1", "SLURM_STEP_ID": "4",
         "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
         "PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
        "n10", {},
        WorkerInfo(3, 1, 1, 4, 2, SLURM_HOSTS, "n9", PORT_1234, "1234", 0, "pmi", "slurm"),
        id="mpich-hydra-inside-slurm"),
    pytest.param(
        # srun --mpi=pmi2 sets PMI_RANK/PMI_SIZE but no local rank: Slurm has it all.
        {**_srun_2x2(3), "PMI_RANK": "3", "PMI_SIZE": "4", "PMI_FD": "7", "PMI_JOBID": "1234.0"},
        "n10", {},
        WorkerInfo(3, 1, 1, 4, 2, SLURM_HOSTS, "n9", PORT_1234_STEP0, "1234", 0,
                   "slurm", "slurm"),
        id="srun-mpi-pmi2"),
    pytest.param(
        # The batch script itself carries SLURM_PROCID=0 and SLURM_NTASKS of the job:
        # it is one process, not rank 0 of 4.
        {"SLURM_JOB_ID": "1234", "SLURM_JOB_NODELIST": "n[9-10]", "SLURM_PROCID": "0",
         "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NTASKS": "4",
         "SLURM_TASKS_PER_NODE": "2(x2)"},
        "n9", {},
        WorkerInfo(0, 0, 0, 1, 1, SLURM_HOSTS, "n9", PORT_1234, "1234", 0, "local", "slurm"),
        id="slurm-batch-script"),
    pytest.param(
        {**_srun_2x2(1), "HPCTRAIN_JOB_ID": "exp-3", "HPCTRAIN_RESTART_COUNT": "4",
         "HPCTRAIN_HOSTS": "n[10,9]", "SLURM_RESTART_COUNT": "1"},
        "n9", {},
        WorkerInfo(1, 1, 0, 4, 2, ("n10", "n9"), "n10", derive_port("exp-3", step="0"),
                   "exp-3", 4, "slurm", "slurm"),
        id="hpctrain-overrides"),
]


@pytest.mark.parametrize("env, hostname, files, expected", CASES)
def test_worker_info_from_env(env, hostname, files, expected):
    reads: list[str] = []

    def read_file(path: str) -> str:
        reads.append(path)
        return files[path]

    assert worker_info_from_env(env, hostname=hostname, read_file=read_file) == expected
    assert reads == list(files)  # the nodefile is read exactly when PBS needs it


def test_hpctrain_hosts_skip_the_nodefile():
    env = {"PBS_JOBID": "9.pbs", "PBS_NODEFILE": "/nope", "HPCTRAIN_HOSTS": "b,a"}

    def read_file(path: str) -> str:
        raise AssertionError("PBS_NODEFILE must not be read when HPCTRAIN_HOSTS is set")

    info = worker_info_from_env(env, hostname="b", read_file=read_file)
    assert (info.hosts, info.master_addr, info.scheduler) == (("b", "a"), "b", "pbs")


def test_every_rank_of_a_step_agrees():
    infos = [worker_info_from_env(_srun_2x2(r), hostname=SLURM_HOSTS[r // 2])
             for r in range(4)]
    assert len({(i.master_addr, i.master_port, i.hosts, i.job_id) for i in infos}) == 1
    assert sorted(i.world_rank for i in infos) == [0, 1, 2, 3]


# -------------------------------------------------------------------- errors

ERRORS = [
    pytest.param({"RANK": "zero", "LOCAL_RANK": "0", "WORLD_SIZE": "2",
                  "LOCAL_WORLD_SIZE": "2"}, {}, "RANK='zero' is not an integer",
                 id="non-integer-rank"),
    pytest.param({"RANK": "4", "LOCAL_RANK": "0", "WORLD_SIZE": "4",
                  "LOCAL_WORLD_SIZE": "4"}, {}, "RANK=4 is not below WORLD_SIZE=4",
                 id="rank-not-below-world-size"),
    pytest.param({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, {},
                 "LOCAL_WORLD_SIZE is not set", id="torchrun-missing-local-size"),
    pytest.param({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "0",
                  "LOCAL_WORLD_SIZE": "1"}, {}, "WORLD_SIZE='0' is below 1",
                 id="zero-world-size"),
    pytest.param({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
                  "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, {},
                 "OMPI_COMM_WORLD_LOCAL_SIZE is not set", id="openmpi-missing-local-size"),
    pytest.param({"PALS_RANKID": "0", "PALS_LOCAL_RANKID": "0", "PALS_NODEID": "0",
                  "PALS_LOCAL_SIZE": "4"}, {}, "PMI_SIZE is not set", id="pals-missing-size"),
    pytest.param({"PMI_RANK": "0", "PMI_SIZE": "2"}, {},
                 "MPI_LOCALNRANKS or PMI_LOCAL_SIZE is not set", id="pmi-missing-local"),
    pytest.param({**_srun_2x2(0), "SLURM_STEP_TASKS_PER_NODE": "2(x"}, {},
                 "SLURM_STEP_TASKS_PER_NODE: bad tasks-per-node", id="bad-tasks-per-node"),
    pytest.param({**_srun_2x2(0), "SLURM_NODEID": "2"}, {},
                 "SLURM_NODEID=2 is past the 2 nodes", id="node-id-past-tasks-list"),
    pytest.param({**_srun_2x2(0), "SLURM_STEP_NUM_TASKS": "", "SLURM_NTASKS": ""}, {},
                 "SLURM_STEP_NUM_TASKS or SLURM_NTASKS or SLURM_NPROCS is not set",
                 id="slurm-missing-size"),
    pytest.param({**_srun_2x2(3), "SLURM_LOCALID": "2"}, {},
                 r"SLURM_LOCALID=2 is not below SLURM_STEP_TASKS_PER_NODE\[1\]=2",
                 id="local-rank-not-below-local-size"),
    pytest.param({**_srun_2x2(0), "MASTER_PORT": "70000"}, {}, "MASTER_PORT='70000'",
                 id="port-out-of-range"),
    pytest.param({**_srun_2x2(0), "MASTER_PORT": "http"}, {}, "MASTER_PORT='http'",
                 id="port-not-integer"),
    pytest.param({**_srun_2x2(0), "HPCTRAIN_RESTART_COUNT": "-1"}, {},
                 "HPCTRAIN_RESTART_COUNT='-1' is below 0", id="negative-restart-count"),
    pytest.param({**_srun_2x2(0), "SLURM_RESTART_COUNT": "x"}, {},
                 "SLURM_RESTART_COUNT='x' is not an integer", id="bad-slurm-restart-count"),
    pytest.param({"PBS_JOBID": "1.pbs", "PBS_NODEFILE": "/missing"}, {},
                 "PBS_NODEFILE='/missing' could not be read", id="unreadable-nodefile"),
    pytest.param({"PBS_JOBID": "1.pbs", "PBS_NODEFILE": "/aux/1", "PALS_RANKID": "4",
                  "PALS_LOCAL_RANKID": "0", "PALS_NODEID": "2", "PALS_LOCAL_SIZE": "2",
                  "PMI_SIZE": "6"}, {"/aux/1": "a\na\nb\nb\n"},
                 "node rank 2 .pals. is past the 2 hosts of PBS_NODEFILE",
                 id="node-rank-past-host-list"),
    pytest.param({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "8",
                  "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, {},
                 "MASTER_ADDR is not set", id="multi-node-without-hosts-or-master"),
    pytest.param({"HPCTRAIN_HOSTS": "n[1-"}, {}, "bad hostlist", id="bad-hpctrain-hosts"),
]


@pytest.mark.parametrize("env, files, message", ERRORS)
def test_bad_values_raise_config_error(env, files, message):
    def read_file(path: str) -> str:
        if path not in files:
            raise FileNotFoundError(path)
        return files[path]

    with pytest.raises(ConfigError, match=message) as caught:
        worker_info_from_env(env, hostname="h", read_file=read_file)
    assert caught.value.hint  # every error says what to do
    assert "HINT:" in str(caught.value)


# ------------------------------------------------------------------- module

def test_docstring_examples_hold():
    result = doctest.testmod(cluster_env, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 20 and result.failed == 0


def test_module_imports_only_stdlib_and_hostlist():
    # Workers import this before any framework; it must not pull in torch.
    tree = ast.parse(pathlib.Path(cluster_env.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or "").split(".")[0])
    # .common: the scheduler registry's index, whose classes parse their own variables
    # (SLURM_*, PBS_*); it imports no framework either (test_registry checks that
    # `import hpctrain` stays light)
    assert imported <= {"__future__", "hashlib", "socket", "collections", "dataclasses",
                        "typing", "hostlist", ".errors", "os", ".common"}


def test_public_functions_have_examples():
    for name in cluster_env.__all__:
        obj = getattr(cluster_env, name)
        if callable(obj) and name != "WorkerInfo":
            assert ">>>" in (obj.__doc__ or ""), name
