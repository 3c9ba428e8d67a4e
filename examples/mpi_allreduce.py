"""An mpi4py training function under MPITrainer: COMM_WORLD is hpctrain's world.

    python examples/mpi_allreduce.py          # 4 ranks here, started with mpirun
    hpctrain submit examples/mpi_job.toml --follow   # the same across 2 Slurm nodes

Each rank computes part of a sum; an allreduce gives every rank the total. The state is
checkpointed by rank 0 every 5 steps, and on demand when the scheduler warns.
"""
import json
import os
import tempfile

from mpi4py import MPI

import hpctrain
from hpctrain import Checkpoint, ScalingConfig
from hpctrain.mpi import MPITrainer


def train_func(config):
    comm = MPI.COMM_WORLD
    ctx = hpctrain.get_context()
    assert comm.Get_rank() == ctx.get_world_rank() and comm.Get_size() == ctx.get_world_size()
    step, total = 0, 0.0
    checkpoint = hpctrain.get_checkpoint()
    if checkpoint:
        with open(os.path.join(checkpoint.path, "state.json")) as f:
            state = json.load(f)
        step, total = state["step"] + 1, state["total"]
    for step in range(step, config["steps"]):
        part = (comm.Get_rank() + 1) * (step + 1)      # this rank's share of the work
        total += comm.allreduce(part, op=MPI.SUM)      # everyone gets the same total
        ckpt = None
        if (step + 1) % 5 == 0 or ctx.should_checkpoint():
            d = tempfile.mkdtemp()
            if comm.Get_rank() == 0:
                with open(os.path.join(d, "state.json"), "w") as f:
                    json.dump({"step": step, "total": total}, f)
                ckpt = Checkpoint.from_directory(d)
        hpctrain.report({"step": step, "total": total}, checkpoint=ckpt)


if __name__ == "__main__":
    result = MPITrainer(train_func, train_loop_config={"steps": 20},
                        scaling_config=ScalingConfig(num_workers=4)).fit()
    print(result.metrics["total"], result.checkpoint)
