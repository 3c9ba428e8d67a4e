"""Plain PyTorch (no hpctrain): does a restart's fresh DDP wrapper change the result?

    OMP_NUM_THREADS=1 python scripts/ddp-restart-bits.py 4     # world size; 2: split step

N Gloo ranks train a small MLP for 5 steps, once straight and once with the DDP wrapper
and the optimizer made anew from their state dicts before step SPLIT (what a restart from
a checkpoint does, minus the new processes). Prints the largest difference per weight.
Seen with torch 2.13.0+cpu: 0 for 1, 2 and 3 ranks; with 4 ranks a few weights differ in
the last bit (about 1e-9), also with one bucket per parameter (DDPKW='{"bucket_cap_mb":
1e-6}'), so the bucket order alone does not explain it. docs/guide/fault-tolerance.md.
"""
import json
import os
import random
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def step(model, opt, index, rank):
    g = torch.Generator().manual_seed(index * 10 + rank)
    x = torch.randn(32, 8, generator=g)
    loss = ((model(x) - torch.sin(x.sum(1, keepdim=True))) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def make(kw):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    d = nn.parallel.DistributedDataParallel(m, **kw)
    return d, torch.optim.SGD(d.parameters(), lr=0.05, momentum=0.9)


def worker(rank, world, split, port, kw, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.use_deterministic_algorithms(True)
    m, o = make(kw)
    for e in range(5):
        if e == split:  # a restart: a new DDP wrapper and optimizer from the saved state
            sd, osd = m.module.state_dict(), o.state_dict()
            m, o = make(kw)
            m.module.load_state_dict(sd)
            o.load_state_dict(osd)
        step(m, o, e, rank)
    if rank == 0:
        torch.save(m.module.state_dict(), out)
    dist.destroy_process_group()


if __name__ == "__main__":
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    split = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    kw = json.loads(os.environ.get("DDPKW", "{}"))
    res = []
    for s in (None, split):
        out = f"/tmp/ddp-restart-bits-{os.getpid()}-{s}.pt"
        mp.spawn(worker, args=(world, s, random.randint(20000, 40000), kw, out), nprocs=world)
        res.append(torch.load(out))
        os.remove(out)
    print(f"{world} ranks, restart before step {split}:",
          {k: float((res[0][k] - res[1][k]).abs().max()) for k in res[0]})
