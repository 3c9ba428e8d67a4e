"""A run started by hand inside an interactive allocation (``salloc``, ``qsub -I``; also a
user's own batch script that calls ``hpctrain run``): its ranks go over the allocation's
nodes with the batch system's launcher (srun, mpiexec), not all on the node the command
runs on. The batch step's own detection (:func:`hpctrain.cluster_env.detect_scheduler`,
the scheduler's ``allocation_from_env``) says which allocation this is."""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Tuple

from hpctrain import cluster_env
from hpctrain.errors import ConfigError
from hpctrain.schedulers import scheduler_class


@dataclass(frozen=True)
class InteractiveAllocation:
    """The allocation this process is in, and the spec as its ranks run there."""

    kind: str                  # the batch system ("slurm", "pbs"…)
    job_id: str
    hosts: Tuple[str, ...]
    spec: Any                  # the run's spec, spread over the allocation's nodes

    def describe(self, launcher: str) -> str:
        scaling = self.spec.scaling
        return (f"inside {self.kind} allocation {self.job_id} ({', '.join(self.hosts)}): "
                f"{scaling.num_workers} workers on {scaling.nodes} node(s) with {launcher}")


def _read_text(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()


def interactive_allocation(spec: Any, env: Optional[Mapping[str, str]] = None
                           ) -> Optional[InteractiveAllocation]:
    """The batch allocation this process runs in, for a run of ``spec`` started here
    (``hpctrain run``, a local ``fit()``); None outside one, or for a spec that names
    another batch system. The spec's nodes: its own ``num_nodes``/``workers_per_node``
    (at most the allocation's), else as many of the allocation's nodes as the workers
    fill evenly."""
    env = os.environ if env is None else env
    kind = cluster_env.detect_scheduler(env)
    if kind == "local" or spec.scheduler.kind not in ("local", kind):
        return None
    found = scheduler_class(kind).allocation_from_env(env, launcher="local",
                                                      read_file=_read_text)
    hosts = tuple(found.hosts)
    if not hosts:
        return None  # nothing says where its nodes are: run here, as before
    scaling = spec.scaling
    where = f"{kind} allocation {found.job_id} ({len(hosts)} node(s): {', '.join(hosts)})"
    if scaling.num_nodes or scaling.workers_per_node:
        if scaling.nodes > len(hosts):
            raise ConfigError(
                f"scaling: the run asks for {scaling.nodes} nodes, but it runs inside {where}",
                file=spec.where("scaling.num_nodes"),
                hint="ask the allocation for more nodes (salloc -N, qsub -l select=), or "
                     "fewer in scaling.num_nodes / workers_per_node")
        return InteractiveAllocation(kind, found.job_id, hosts, spec)
    nodes = min(len(hosts), scaling.num_workers)
    if scaling.num_workers % nodes:
        raise ConfigError(
            f"scaling.num_workers: {scaling.num_workers} workers do not spread evenly over "
            f"the {nodes} nodes of {where}",
            file=spec.where("scaling.num_workers"),
            hint="give a multiple of the nodes, or scaling.num_nodes / workers_per_node")
    spread = copy.copy(spec)  # (the run's own spec, spec.toml included, is left as it is)
    spread.scaling = replace(scaling, num_nodes=nodes)
    return InteractiveAllocation(kind, found.job_id, hosts, spread)
