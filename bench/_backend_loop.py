"""The loop ``bench_backends.py`` times: set up the framework, one collective, then the
first report. Rank 0 appends ``time.time()`` at that point to the mark file.

* under hpctrain: ``train_func`` (the framework was set up by the backend);
* started by hand: ``python _backend_loop.py BACKEND MARK`` under ``mpirun``,
  ``horovodrun --gloo``, or with a hand-written ``TF_CONFIG``.
"""
import json
import os
import sys
import time


def first_collective(backend: str) -> int:
    """This rank's framework rank, after one sum across the ranks."""
    if backend == "mpi":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        comm.allreduce(1)
        return comm.Get_rank()
    if backend == "horovod":
        import horovod.torch as hvd
        import torch

        hvd.init()
        hvd.allreduce(torch.ones(1), op=hvd.Sum)
        return hvd.rank()
    if backend == "tensorflow":
        import tensorflow as tf

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        strategy.reduce(tf.distribute.ReduceOp.SUM,
                        strategy.run(lambda: tf.constant(1.0)), axis=None)
        return json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    raise ValueError(backend)


def _mark(path: str, rank: int) -> None:
    if rank == 0:
        with open(path, "a") as f:
            f.write(f"{time.time()!r}\n")


def train_func(config):
    import hpctrain

    rank = first_collective(config["backend"])
    _mark(config["mark"], rank)
    hpctrain.report({"rank": rank})


if __name__ == "__main__":
    backend, mark = sys.argv[1], sys.argv[2]
    _mark(mark, first_collective(backend))
    if backend == "mpi":  # as the backend does: finalize before leaving
        from mpi4py import MPI

        MPI.Finalize()
