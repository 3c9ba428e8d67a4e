"""Horovod backend: the MPI controller under an MPI launcher, else Gloo with our rendezvous.

* Ranks started by ``mpirun``/``mpiexec`` (``info.launcher`` is ``openmpi``, ``pmi`` or
  ``pals``) and a Horovod built with MPI: ``HOROVOD_CONTROLLER=mpi``; MPI knows the ranks.
  ``HorovodConfig(controller="mpi")`` also accepts ranks from ``srun --mpi=pmix`` (which
  hpctrain's srun launcher then uses).
* Otherwise (the local launcher, ``srun``): the Gloo controller, with the rendezvous that
  ``horovodrun`` would provide. Rank 0 starts Horovod's own ``RendezvousServer`` (an HTTP
  key-value store, in threads of the rank-0 process), gives it the host/slot plan built
  from the ranks hpctrain derived, and every rank gets the ``HOROVOD_*`` variables
  ``horovodrun --gloo`` sets (rank, size, local and cross rank/size, hostname, rendezvous
  address and port, the network interface). The port of the server travels to the
  other ranks over hpctrain's TCP group (:mod:`hpctrain.rendezvous`), which
  also carries ``report()``'s agreement, so hpctrain never calls ``hvd`` collectives.

The training function calls ``hvd.init()`` itself, as in Ray Train's Horovod examples.
``HorovodConfig(controller="gloo"|"mpi")`` forces one controller; ``"mpi"`` makes a local
run start its ranks with ``mpirun``.
"""
from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..cluster_env import WorkerInfo, launcher_set_up_mpi
from ..config import toml
from ..errors import ConfigError
from .base import Backend
from .tensorflow import worker_address
from hpctrain.rendezvous import TcpGroup, group_token

CONTROLLERS = ("auto", "gloo", "mpi")
MPI_LAUNCHERS = ("openmpi", "pmi", "pals")


@dataclass
class HorovodConfig:
    """``controller``: "auto" (MPI under an MPI launcher, else Gloo), "gloo" or "mpi".
    ``timeout_s``: how long ranks wait for each other at start-up and in hpctrain's
    agreement (also ``HOROVOD_GLOO_TIMEOUT_SECONDS`` unless set)."""

    controller: str = field(default="auto", metadata=toml(
        "str", "Horovod's controller.", choices=("auto", "gloo", "mpi")))
    timeout_s: int = field(default=1800, metadata=toml(
        "int", "Seconds to wait for the other workers before giving up.", minimum=1))

    def __post_init__(self) -> None:
        if self.controller not in CONTROLLERS:
            raise ConfigError(f"horovod.controller: expected one of {', '.join(CONTROLLERS)}, "
                              f"got {self.controller!r}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, int) or self.timeout_s <= 0:
            raise ConfigError(f"horovod.timeout_s: expected a positive integer, got {self.timeout_s!r}")


def slot_plan(places: Sequence[Tuple[str, int]]) -> List[Dict[str, Any]]:
    """Horovod's slot variables for every rank, from each rank's ``(host, local_rank)``
    in rank order (what ``horovodrun`` computes from ``-H host:slots``). The cross rank
    is the host's position among the hosts that have this local rank.

    >>> [sorted(s.items()) for s in slot_plan([("n1", 0), ("n1", 1), ("n2", 0)])]
    ... # doctest: +NORMALIZE_WHITESPACE
    [[('cross_rank', 0), ('cross_size', 2), ('hostname', 'n1'), ('local_rank', 0),
      ('local_size', 2), ('rank', 0), ('size', 3)],
     [('cross_rank', 0), ('cross_size', 1), ('hostname', 'n1'), ('local_rank', 1),
      ('local_size', 2), ('rank', 1), ('size', 3)],
     [('cross_rank', 1), ('cross_size', 2), ('hostname', 'n2'), ('local_rank', 0),
      ('local_size', 1), ('rank', 2), ('size', 3)]]
    """
    hosts: List[str] = []
    for host, _ in places:
        if host not in hosts:
            hosts.append(host)
    plan = []
    for rank, (host, local_rank) in enumerate(places):
        with_local = [h for h in hosts if any(p == (h, local_rank) for p in places)]
        plan.append({
            "hostname": host, "rank": rank, "local_rank": local_rank, "size": len(places),
            "local_size": sum(1 for h, _ in places if h == host),
            "cross_rank": with_local.index(host), "cross_size": len(with_local)})
    return plan


def slot_env(slot: Dict[str, Any]) -> Dict[str, str]:
    """The ``HOROVOD_*`` variables of one slot, as ``horovodrun`` sets them.

    >>> slot_env({"hostname": "n2", "rank": 2, "local_rank": 0, "size": 3, "local_size": 1,
    ...           "cross_rank": 1, "cross_size": 2})["HOROVOD_CROSS_RANK"]
    '1'
    """
    return {f"HOROVOD_{k.upper()}": str(v) for k, v in slot.items()}


def interface_for(addr: str) -> Optional[str]:
    """The name of this host's network interface that reaches ``addr`` (``lo`` for a
    loopback address), or None when it cannot be told."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))
            local = s.getsockname()[0]
    except OSError:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == local for a in addrs):
            return name
    return None


class HorovodBackend(Backend):
    @classmethod
    def needs_mpi_launcher(cls, options) -> bool:
        return options.get("controller") == "mpi"

    def __init__(self, config: HorovodConfig = None):
        super().__init__(config or HorovodConfig())
        self._group = None
        self._server = None
        self.controller = "gloo"

    def on_start(self, info: WorkerInfo, *, use_gpu: bool) -> None:

        cfg: HorovodConfig = self.config
        mpi_launched = mpi_launched_here(info.launcher, os.environ)
        self.controller = cfg.controller
        if self.controller == "auto":  # MPI only for ranks from mpirun/mpiexec
            self.controller = "mpi" if info.launcher in MPI_LAUNCHERS and _mpi_built() else "gloo"
        if self.controller == "mpi" and not mpi_launched and info.world_size > 1:
            raise RuntimeError(
                f"HorovodConfig(controller=\"mpi\") but the ranks were started by "
                f"{info.launcher}, not by an MPI launcher.\nHINT: use scheduler.launcher = "
                "\"mpirun\", or controller=\"gloo\" (hpctrain then provides the rendezvous)")
        self._group = TcpGroup(rank=info.world_rank, world_size=info.world_size,
                               addr=info.master_addr, port=info.master_port,
                               timeout_s=cfg.timeout_s, token=group_token(info))
        if self.controller == "mpi":
            os.environ.update(HOROVOD_CONTROLLER="mpi", HOROVOD_CPU_OPERATIONS="mpi")
            return
        host = worker_address(info)
        places = self._group.allgather([host, info.local_rank])
        port = 0
        if info.world_rank == 0:
            port = self._start_rendezvous(slot_plan([tuple(p) for p in places]))
        port = self._group.allgather(port)[0]
        env = slot_env(slot_plan([tuple(p) for p in places])[info.world_rank])
        rendezvous_addr = "127.0.0.1" if host == "localhost" else info.master_addr
        env.update(HOROVOD_CONTROLLER="gloo", HOROVOD_CPU_OPERATIONS="gloo",
                   HOROVOD_GLOO_RENDEZVOUS_ADDR=rendezvous_addr,
                   HOROVOD_GLOO_RENDEZVOUS_PORT=str(port))
        os.environ.update(env)
        os.environ.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", str(cfg.timeout_s))
        # the interface this rank reaches the other nodes by (rank 0's own host may resolve
        # to a loopback address, e.g. Debian's 127.0.1.1 line: look past it to a peer)
        peer = info.master_addr
        if info.node_rank == 0 and len(info.hosts) > 1:
            peer = info.hosts[1]
        iface = interface_for(_resolve(peer)) if host != "localhost" else interface_for("127.0.0.1")
        if iface and "HOROVOD_GLOO_IFACE" not in os.environ:
            os.environ["HOROVOD_GLOO_IFACE"] = iface

    def _start_rendezvous(self, plan: List[Dict[str, Any]]) -> int:
        from horovod.runner.common.util.hosts import SlotInfo
        from horovod.runner.http.http_server import RendezvousServer

        self._server = RendezvousServer(verbose=0)
        port = self._server.start()
        self._server.init([SlotInfo(**slot) for slot in plan])
        return port

    def coordinator(self, info: WorkerInfo):
        return self._group

    def on_shutdown(self, info: WorkerInfo) -> None:

        hvd = sys.modules.get("horovod.torch")
        if hvd is not None:
            try:
                if hvd.is_initialized():
                    hvd.shutdown()
            except Exception:  # noqa: BLE001 - shutting down; the result is already written
                pass
        if self._group is not None:
            self._group.close()
        if self._server is not None:
            self._server.stop()


def mpi_launched_here(launcher: str, env) -> bool:
    """True when this rank was started as part of one MPI job: by mpirun/mpiexec (the
    launcher detected from the environment), or by the scheduler's own launcher with MPI
    set up (``srun --mpi=pmix|pmi2``: :func:`hpctrain.cluster_env.launcher_set_up_mpi`).

    >>> mpi_launched_here("openmpi", {}), mpi_launched_here("slurm", {"PMIX_RANK": "0"})
    (True, True)
    >>> mpi_launched_here("slurm", {"SLURM_JOB_ID": "7", "SLURM_MPI_TYPE": "none"}), mpi_launched_here("local", {})
    (False, False)
    """
    return launcher in MPI_LAUNCHERS or launcher_set_up_mpi(env)


def _mpi_built() -> bool:
    try:
        import horovod.torch as hvd

        return bool(hvd.mpi_built())
    except ImportError:
        return False


def _resolve(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host
