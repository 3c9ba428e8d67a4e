"""The TensorFlow, Horovod and MPI backends across the two nodes of the real test Slurm
cluster (n1, n2), one rank per node: the framework's collective gives the exact sums, its
ranks and hosts are hpctrain's, and a rank that crashes in the first attempt is
recovered in the same allocation from the last committed checkpoint. MPI runs both
ways that work with Debian's Slurm and Open MPI: `srun --mpi=pmix` (the default launcher
for MPITrainer in a Slurm job) and `mpirun` inside the allocation."""
import json
import os

import pytest

import backend_workloads as bw
from helpers import MPI_AS_ROOT, run_state, workload, write_job, cli as hpctrain_cli
from test_backends import assert_exact_sums, lines

pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm")]
STEPS = 12



def job_file(tmp_path, storage, name, backend, launcher=None, options=None):
    return write_job(
        tmp_path, name, site="test-cluster",
        entrypoint=workload("backend_workloads:collective_loop"), job={"backend": backend},
        storage=storage, scaling={"num_nodes": 2, "workers_per_node": 1},
        failure={"max_failures": 1}, **(options or {}),
        scheduler={"time": "00:05:00", **({"launcher": launcher} if launcher else {})},
        env=MPI_AS_ROOT, config={"backend": backend, "steps": STEPS, "every": 2,
                                 "crash_rank": 1, "crash_step": 5, "sleep": 0.01})


@pytest.mark.parametrize("name,backend,launcher,command", [
    ("mpi-srun", "mpi", None, "--ntasks-per-node=1 --mpi=pmix"),
    ("mpi-mpirun", "mpi", "mpirun", "mpirun -np 2"),
    ("horovod", "horovod", None, "srun --kill-on-bad-exit=1"),
    ("horovod-mpi", "horovod", None, "--mpi=pmix"),
    ("tensorflow", "tensorflow", None, "srun --kill-on-bad-exit=1"),
], ids=["mpi-srun-pmix", "mpi-mpirun", "horovod-gloo-srun", "horovod-mpi-srun-pmix",
        "tensorflow-srun"])
def test_two_nodes_exact_collectives_and_a_crashed_rank_recovered(
        name, backend, launcher, command, tmp_path, storage):
    # (the [env] lets mpirun start ranks as root, as the tests run; it is not needed elsewhere)
    options = {"horovod": {"controller": "mpi"}} if name == "horovod-mpi" else {}
    job = job_file(tmp_path, storage, name, backend, launcher, options)
    p = hpctrain_cli("submit", job, "--follow", timeout=400)
    assert "run FINISHED" in p.stdout, p.stdout + p.stderr
    run = os.path.join(storage, name)
    state = run_state(run)
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "FINISHED"]
    assert len({a["job_id"] for a in state["attempts"]}) == 1  # the same allocation
    with open(os.path.join(state["attempts"][1]["resumed_from"], "state.json")) as f:
        assert json.load(f)["step"] == 3
    for r in range(2):
        assert [s["step"] for s in lines(run, f"starts-rank-{r}.jsonl")] == [0, 4]
    assert_exact_sums(run, 2, STEPS)
    last = json.loads(open(os.path.join(run, "result.json")).read().splitlines()[-1])
    assert last["w"] == bw.expected_w(STEPS, 2)
    idents = [json.load(open(os.path.join(run, "test-out", f"ident-rank-{r}.json")))
              for r in range(2)]
    for r, ident in enumerate(idents):
        assert (ident["framework_rank"], ident["framework_size"]) == (r, 2)
        assert (ident["node_rank"], ident["host"]) == (r, f"n{r + 1}")  # one rank per node
    if backend == "tensorflow":
        assert idents[0]["tf_config"]["cluster"] == idents[1]["tf_config"]["cluster"]
        hosts = [w.split(":")[0] for w in idents[0]["tf_config"]["cluster"]["worker"]]
        assert hosts == ["n1", "n2"]
    if name == "horovod-mpi":
        assert {i["horovod"]["HOROVOD_CONTROLLER"] for i in idents} == {"mpi"}
    elif backend == "horovod":
        assert [i["horovod"]["HOROVOD_HOSTNAME"] for i in idents] == ["n1", "n2"]
        assert [i["horovod"]["HOROVOD_CROSS_RANK"] for i in idents] == ["0", "1"]
        assert {i["horovod"]["HOROVOD_CONTROLLER"] for i in idents} == {"gloo"}
    job_id = state["attempts"][0]["job_id"]
    with open(os.path.join(run, "logs", job_id, "launcher.out")) as f:
        assert command in f.read()
