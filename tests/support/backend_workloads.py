"""Training functions for the TensorFlow, Horovod and MPI backend tests (imported by the
workers). No framework is imported at module level: each function imports its own."""
import json
import os
import tempfile
import time

import hpctrain
from hpctrain import Checkpoint


def _out(name):
    d = os.path.join(hpctrain.get_context().get_run_dir(), "test-out")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def _append(name, record):
    with open(_out(name), "a") as f:
        f.write(json.dumps(record) + "\n")


class _Collective:
    """A sum over the ranks through the backend's own collective, and what the framework
    says this rank is."""

    def __init__(self, backend):
        self.backend = backend
        if backend == "mpi":
            from mpi4py import MPI

            self.comm = MPI.COMM_WORLD
            self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        elif backend == "horovod":
            import horovod.torch as hvd

            hvd.init()
            self.hvd = hvd
            self.rank, self.size = hvd.rank(), hvd.size()
        elif backend == "tensorflow":
            import tensorflow as tf

            self.tf = tf
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy()
            config = json.loads(os.environ["TF_CONFIG"])
            self.rank, self.size = config["task"]["index"], self.strategy.num_replicas_in_sync
            self.tf_config = config
        else:
            raise ValueError(backend)

    def sum(self, value):
        if self.backend == "mpi":
            return self.comm.allreduce(value)
        if self.backend == "horovod":
            import torch

            out = self.hvd.allreduce(torch.tensor([float(value)], dtype=torch.float64),
                                     op=self.hvd.Sum)
            return int(out.item())
        tf = self.tf
        per_replica = self.strategy.run(lambda: tf.constant(float(value), tf.float64))
        return int(self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None))


def collective_loop(config):
    """``steps`` steps; step s adds the sum over ranks of (rank + 1) * (s + 1) to the
    state ``w``, through the backend's collective. A checkpoint every ``every`` steps and
    whenever ``should_checkpoint()``; rank ``crash_rank`` raises at step ``crash_step``
    of the first attempt. Each rank logs its identity, every sum it saw and where each
    attempt started."""
    ctx = hpctrain.get_context()
    rank, attempt = ctx.get_world_rank(), ctx.get_restart_count()
    coll = _Collective(config["backend"])
    start, w = 0, 0
    ck = hpctrain.get_checkpoint()
    if ck is not None:
        with open(os.path.join(ck.path, "state.json")) as f:
            st = json.load(f)
        start, w = st["step"] + 1, st["w"]
    _append(f"starts-rank-{rank}.jsonl", {"attempt": attempt, "step": start})
    if attempt == 0:
        ident = {"rank": rank, "framework_rank": coll.rank, "framework_size": coll.size,
                 "world_size": ctx.get_world_size(), "local_rank": ctx.get_local_rank(),
                 "node_rank": ctx.get_node_rank(), "host": os.environ.get("SLURMD_NODENAME"),
                 "tf_config": getattr(coll, "tf_config", None),
                 "horovod": {k: v for k, v in os.environ.items() if k.startswith("HOROVOD_")}}
        with open(_out(f"ident-rank-{rank}.json"), "w") as f:
            json.dump(ident, f)
    for step in range(start, config["steps"]):
        if (attempt == 0 and rank == config.get("crash_rank", -1)
                and step == config.get("crash_step")):
            from workloads import _wait_until_committed  # the last checkpoint, for certain

            every = config["every"]
            _wait_until_committed(ctx, iteration=step // every * every)  # report of step-1
            raise RuntimeError(f"injected crash of rank {rank} at step {step}")
        total = coll.sum((rank + 1) * (step + 1))
        w += total
        _append(f"sums-rank-{rank}.jsonl", {"attempt": attempt, "step": step, "sum": total})
        time.sleep(config.get("sleep", 0.0))
        every = config.get("every", 0)
        if ctx.should_checkpoint() or (every and (step + 1) % every == 0):
            d = tempfile.mkdtemp()
            if rank == 0:
                with open(os.path.join(d, "state.json"), "w") as f:
                    json.dump({"step": step, "w": w}, f)
            if ctx.should_checkpoint():
                _append(f"warned-rank-{rank}.jsonl", {"attempt": attempt, "step": step})
            hpctrain.report({"step": step, "w": w, "sum": total},
                            checkpoint=Checkpoint.from_directory(d) if rank == 0 else None)
        else:
            hpctrain.report({"step": step, "w": w, "sum": total})


def expected_w(steps, world_size):
    """The state after ``steps`` steps, uninterrupted."""
    return sum((s + 1) for s in range(steps)) * world_size * (world_size + 1) // 2


def keras_fit(config):
    """Keras under MultiWorkerMirroredStrategy with rank-dependent data, epochs reported by
    ReportCheckpointCallback, resumed with load_checkpoint; rank 1 crashes at the end of
    epoch ``crash_epoch`` of the first attempt. Each rank saves its final weights."""
    import numpy as np
    import tensorflow as tf

    from hpctrain.tensorflow.keras import ReportCheckpointCallback, load_checkpoint

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model, start = load_checkpoint(hpctrain.get_checkpoint())
        if model is None:
            tf.keras.utils.set_random_seed(0)  # the same initial weights everywhere
            model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
            model.compile(optimizer="sgd", loss="mse")
    rng = np.random.default_rng(100 + rank)  # each rank its own data
    x = rng.normal(size=(64, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    from hpctrain.tensorflow import prepare_dataset_shard

    ds = prepare_dataset_shard(ds)

    class Crash(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            _append(f"epochs-rank-{rank}.jsonl", {"attempt": ctx.get_restart_count(),
                                                   "epoch": epoch})
            if ctx.get_restart_count() == 0 and rank == 1 and epoch == config.get("crash_epoch"):
                raise RuntimeError(f"injected crash at epoch {epoch}")

    model.fit(ds, epochs=config["epochs"], initial_epoch=start, verbose=0,
              callbacks=[ReportCheckpointCallback(metrics={"loss": "loss"}), Crash()])
    np.save(_out(f"weights-rank-{rank}.npy"),
            np.concatenate([w.ravel() for w in model.get_weights()]))
