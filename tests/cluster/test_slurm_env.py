"""WorkerInfo derived inside real Slurm job steps (srun) and real Open MPI ranks started by
mpirun inside an allocation — the environments cluster_env's tables stand for."""
import ast

import pytest

import slurm

pytestmark = pytest.mark.cluster("slurm")

# each rank writes its own file: lines of ranks sharing one output stream can interleave
WRITE_INFO = (
    "python3 -c \"from hpctrain.cluster_env import worker_info_from_env as w; i = w(); "
    "open('{out}/rank-%d' % i.world_rank, 'w').write(repr((i.world_rank, i.local_rank, "
    "i.node_rank, i.world_size, i.local_world_size, i.hosts, i.master_addr, i.launcher, "
    "i.scheduler, i.job_id, i.master_port)))\"")


def run_job(tmp_path, launch: str):
    out = tmp_path / "ranks"
    out.mkdir()
    script = (f"#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=2 -o {tmp_path}/job.out\n"
              "export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n"
              f"{launch} {WRITE_INFO.format(out=out)}\n")
    job_id = slurm.sbatch(script)
    rows = sorted(ast.literal_eval(p.read_text()) for p in out.iterdir())
    assert len(rows) == 4, (tmp_path / "job.out").read_text()
    return job_id, rows


@pytest.mark.parametrize("launch, launcher", [
    pytest.param("srun", "slurm", id="srun"),
    pytest.param("mpirun -np 4", "openmpi", id="mpirun-inside-allocation"),
])
def test_ranks_hosts_and_master_from_a_real_two_node_job(tmp_path, launch, launcher):
    job_id, rows = run_job(tmp_path, launch)
    assert [r[:5] for r in rows] == [(0, 0, 0, 4, 2), (1, 1, 0, 4, 2),
                                     (2, 0, 1, 4, 2), (3, 1, 1, 4, 2)]
    for r in rows:
        assert r[5] == ("n1", "n2") and r[6] == "n1"        # hosts, rank 0's host
        assert r[7] == launcher and r[8] == "slurm" and r[9] == job_id
    assert len({r[10] for r in rows}) == 1                  # every rank agrees on the port
