"""XGBoost backend: XGBoost's own collective (a ``RabitTracker`` and a communicator), set
up so that ``xgboost.train`` in the training function trains one model over all ranks.

Rank 0 starts the tracker (:class:`xgboost.tracker.RabitTracker`, ``sortby="task"``) on
its own host; its ``worker_args()`` (tracker address and port) reach the other ranks over
hpctrain's TCP group (:mod:`hpctrain.rendezvous`, as for TensorFlow and
Horovod); every rank then joins with ``xgboost.collective.init(**args,
dmlc_task_id=<rank>)`` — the task id orders XGBoost's ranks as hpctrain's, as Ray's
``XGBoostConfig`` does — before the training function runs, and ``finalize()`` after it.
``report()``'s agreement runs over the same TCP group. Every rank holds the same model
after each round, so only rank 0's checkpoint is kept.
"""
from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from ..cluster_env import WorkerInfo
from ..config import toml
from ..errors import ConfigError
from .base import Backend
from .tensorflow import worker_address
from hpctrain.rendezvous import TcpGroup, group_token


@dataclass
class XGBoostConfig:
    """``xgboost_communicator``: "rabit" (Ray's name and its only choice).
    ``timeout_s``: how long a rank waits for the others (set-up and each agreement; also
    the tracker's)."""

    xgboost_communicator: str = field(default="rabit", metadata=toml(
        "str", "XGBoost's communicator."))
    timeout_s: int = field(default=1800, metadata=toml(
        "int", "Seconds to wait for the tracker before giving up.", minimum=1))

    def __post_init__(self) -> None:
        if self.xgboost_communicator != "rabit":
            raise ConfigError(f"xgboost.xgboost_communicator: expected \"rabit\", got "
                              f"{self.xgboost_communicator!r}",
                              hint="XGBoost's tracker and collective are the only communicator")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, int) or self.timeout_s <= 0:
            raise ConfigError(f"xgboost.timeout_s: expected a positive integer, got {self.timeout_s!r}")


def task_id(rank: int) -> str:
    """XGBoost's task id of ``rank``: the tracker sorts ranks by it (``sortby="task"``).

    >>> sorted([task_id(10), task_id(2)])
    ['hpctrain-rank-00000002', 'hpctrain-rank-00000010']
    """
    return f"hpctrain-rank-{rank:08d}"


def worker_ip(info: WorkerInfo) -> str:
    """This rank's IP address that the other ranks reach: 127.0.0.1 when every rank
    shares one node, else the address of this host's interface on the route to rank 0's
    host (XGBoost's tracker binds it; LightGBM finds its own entry of ``machines`` among
    the host's interface addresses, so a name that resolves elsewhere, e.g. to Debian's
    127.0.1.1, would not do); the host's name resolved when there is no route."""
    if worker_address(info) == "localhost":
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((socket.gethostbyname(info.master_addr), info.master_port or 9))
            return s.getsockname()[0]
    except OSError:
        return socket.gethostbyname(info.hosts[info.node_rank])


def cores_per_rank(info: WorkerInfo) -> int:
    """The threads one rank should use: ``OMP_NUM_THREADS`` when the job sets it, else this
    process's CPUs shared by the ranks on this node (at least 1). XGBoost and LightGBM use
    every core by default; two ranks on one node that both do spin against each other
    (LightGBM's quick start: 3 s with one thread per rank, over a minute without, on a
    busy 2-core node)."""

    if os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) > 0:
        return int(os.environ["OMP_NUM_THREADS"])
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // max(1, info.local_world_size))


class XGBoostBackend(Backend):
    checkpoint_ranks = "rank0"

    def __init__(self, config: XGBoostConfig = None):
        super().__init__(config or XGBoostConfig())
        self._group = None
        self._tracker = None
        self._wait: Optional[threading.Thread] = None
        self._joined = False

    def on_start(self, info: WorkerInfo, *, use_gpu: bool) -> None:
        import xgboost
        from xgboost import collective


        cfg: XGBoostConfig = self.config
        # the default of params' nthread (XGBoost's global config: set_config(nthread=))
        xgboost.set_config(nthread=cores_per_rank(info))
        self._group = TcpGroup(rank=info.world_rank, world_size=info.world_size,
                               addr=info.master_addr, port=info.master_port,
                               timeout_s=cfg.timeout_s, token=group_token(info))
        if info.world_size <= 1:
            return  # xgboost.train alone: nothing to join
        args: Dict[str, Any] = {}
        if info.world_rank == 0:
            from xgboost.tracker import RabitTracker

            self._tracker = RabitTracker(n_workers=info.world_size, host_ip=worker_ip(info),
                                         sortby="task", timeout=cfg.timeout_s)
            self._tracker.start()
            self._wait = threading.Thread(target=self._tracker.wait_for, daemon=True,
                                          name="hpctrain-xgboost-tracker")
            self._wait.start()
            args = dict(self._tracker.worker_args())
        args = self._group.allgather(args)[0]
        collective.init(**args, dmlc_task_id=task_id(info.world_rank))
        self._joined = True

    def coordinator(self, info: WorkerInfo):
        return self._group

    def on_shutdown(self, info: WorkerInfo) -> None:
        if self._joined:
            from xgboost import collective

            collective.finalize()
            self._joined = False
        if self._wait is not None:
            self._wait.join(timeout=30)
        if self._group is not None:
            self._group.close()
