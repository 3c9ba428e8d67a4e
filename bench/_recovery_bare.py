"""The anchor of ``bench_recovery.py``: one task of a bare ``sbatch`` + ``srun`` job doing by
hand the set-up the resumed training of ``_recovery_loop.py`` does under hpctrain.

    srun python bench/_recovery_bare.py STATE_PT RESULTS_FILE [SLEEP]

No hpctrain: ``import torch``; a Gloo process group over the job's tasks (``env://``:
``MASTER_ADDR`` / ``MASTER_PORT`` from the batch script, rank and size from ``SLURM_*``);
the seeds and deterministic algorithms of ``enable_reproducibility(0)``; DDP of the same
MLP 8→16→1 and SGD; ``torch.load`` of the same ``state.pt`` (model, optimiser, step);
one training step with the loop's idle time; then rank 0 appends one JSON line to
``RESULTS_FILE`` and flushes it (the floor of a report, as in ``_loop_torchrun.py``).

Each task prints one line, ``time.time()`` of each stage::

    bare <rank> <process started> <torch imported> <process group up>
         <DDP built, checkpoint loaded> <first step reported> <CPU seconds used by then>

and ends with ``os._exit(0)``, as hpctrain's ranks do (no interpreter teardown).
"""
from __future__ import annotations

import json
import os
import random
import sys
import time

from _procmem import process_started


def main() -> None:
    state_pt, results = sys.argv[1], sys.argv[2]
    sleep = float(sys.argv[3]) if len(sys.argv) > 3 else 0.1
    started = process_started()
    rank, size = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel

    imported = time.time()
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size)
    group = time.time()
    random.seed(0)
    torch.manual_seed(0)
    try:
        import numpy as np

        np.random.seed(0)
    except ImportError:
        pass
    torch.use_deterministic_algorithms(True)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.Tanh(),
                                                  nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    st = torch.load(state_pt)
    model.module.load_state_dict(st["model"])
    opt.load_state_dict(st["opt"])
    step = st["step"] + 1
    loaded = time.time()
    g = torch.Generator().manual_seed(step * 10 + rank)
    x = torch.randn(32, 8, generator=g)
    loss = ((model(x) - torch.sin(x.sum(1, keepdim=True))) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(sleep)
    if rank == 0:
        with open(results, "a") as f:
            f.write(json.dumps({"loss": loss.item(), "step": step}) + "\n")
            f.flush()
    reported = time.time()
    print(f"bare {rank} {started:.6f} {imported:.6f} {group:.6f} {loaded:.6f} "
          f"{reported:.6f} {time.process_time():.6f}", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
