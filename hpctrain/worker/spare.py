"""A warm spare worker: ``python -m hpctrain.worker.spare RUN_DIR``.

Started by :class:`hpctrain.launchers.warm.WarmLocalLauncher` while the ranks of an
attempt train. It pays now what a rank pays at every start — the interpreter, ``import
torch`` and ``torch.distributed``, ``torch._dynamo`` (which DDP imports), hpctrain, and the
user's module through the run's payload — and then waits on stdin for one line, its
assignment::

    {"env": {...the whole environment of rank R of attempt A...}}

It then replaces its environment with that one and runs exactly what
``python -m hpctrain.worker RUN_DIR`` runs. End of input (the pool closed, or
its owner died) ends it with status 0 and no output.

Nothing here starts a thread, forks, or initialises CUDA or MPI before the assignment, so
the rank it becomes sees the same process a cold start gives, minus the import time. What
the interpreter reads only at its own start (``PYTHON*`` variables: ``sys.path``, hash
seed, buffering) is fixed when the spare starts; the pool hands a spare only an
assignment whose such variables match (see :data:`FIXED_AT_START`).
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import time

from hpctrain.common.trust import makedirs, modes_of
from hpctrain.worker.entry import main as worker_main, prepare_backend_environment

#: Variables read at interpreter or library start-up (import time), not when a rank
#: starts: a spare started with other values than the assignment's is not used.
FIXED_AT_START = ("PYTHON", "OMP_", "MKL_", "OPENBLAS_", "LD_", "TORCH_", "CUDA_",
                  "HPCTRAIN_WARM_")

#: Written into ``.hpctrain/spares/`` when the spare is ready (removed when it is assigned).
READY_SUFFIX = ".ready"

#: What a spare imports for each backend (each guarded: a failed import only costs
#: the time a cold rank would spend on it).
PRELOAD = {
    "torch": ("torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo",
              "hpctrain.torch", "hpctrain.backends.torch"),
}
COMMON = ("cloudpickle", "hpctrain", "hpctrain.cluster_env", "hpctrain.backends",
          "hpctrain.worker.session", "hpctrain.worker")


def fixed_part(env) -> dict:
    return {k: v for k, v in env.items() if k.startswith(FIXED_AT_START)}


def preload(run_dir: str) -> list:
    """Import what a rank of this run imports; returns the modules that failed."""
    failed = []
    for name in COMMON:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the rank will meet (and report) it again
            failed.append(name)
    backend = os.environ.get("HPCTRAIN_WARM_BACKEND", "torch")
    for name in PRELOAD.get(backend, ()):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001
            failed.append(name)
    extra = os.environ.get("HPCTRAIN_WARM_PRELOAD", "")
    for name in filter(None, (x.strip() for x in extra.split(","))):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001
            failed.append(name)
    try:  # the payload: imports the training function's module (its top level runs)
        from hpctrain.rundir.layout import RunDir
        from hpctrain.rundir.payload import WorkerPayload

        WorkerPayload.load(RunDir(run_dir), before_user=prepare_backend_environment)
    except Exception:  # noqa: BLE001
        failed.append("payload")
    return failed


def _mark_ready(run_dir: str) -> str:
    d = os.path.join(run_dir, ".hpctrain", "spares")
    path = os.path.join(d, f"{os.getpid()}{READY_SUFFIX}")
    try:
        makedirs(d, modes_of(run_dir)[0])
        with open(path, "w") as f:
            f.write(f"{time.time():.6f}\n")
    except OSError:
        return ""
    return path


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    run_dir = argv[0]
    preload(run_dir)
    ready = _mark_ready(run_dir)
    line = sys.stdin.readline()
    if ready:
        try:
            os.unlink(ready)
        except OSError:
            pass
    if not line.strip():
        os._exit(0)  # the pool closed (or its owner is gone): nothing to become
    order = json.loads(line)
    os.environ.clear()
    os.environ.update(order["env"])
    try:  # nothing more comes on stdin; a rank reads none
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)
    except OSError:
        pass

    worker_main([order.get("run_dir", run_dir)])


if __name__ == "__main__":
    main()
