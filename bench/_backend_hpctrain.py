"""``python _backend_hpctrain.py BACKEND MARK STORAGE``: the hpctrain side of
bench_backends.py, a Python script that builds the backend's trainer and calls fit()."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _backend_loop  # noqa: E402
from hpctrain import RunConfig, ScalingConfig  # noqa: E402

backend, mark, storage = sys.argv[1:4]
if backend == "mpi":
    from hpctrain.mpi import MPITrainer as Trainer
elif backend == "horovod":
    from hpctrain.horovod import HorovodTrainer as Trainer
else:
    from hpctrain.tensorflow import TensorflowTrainer as Trainer

Trainer(_backend_loop.train_func, train_loop_config={"backend": backend, "mark": mark},
        scaling_config=ScalingConfig(num_workers=int(os.environ.get("BENCH_WORKERS", "2"))),
        run_config=RunConfig(storage_path=storage, verbose=0)).fit()
