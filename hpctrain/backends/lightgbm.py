"""LightGBM backend: LightGBM's socket network over the allocation's hosts.

Every rank picks a port that is free on its own host (:func:`~hpctrain.rendezvous.reserve_port`), the ranks exchange ``host:port`` over hpctrain's TCP group, and
each rank keeps LightGBM's network parameters, as Ray's ``LightGBMConfig`` does::

    {"num_machines": N, "machines": "n1:41000,n2:41002", "local_listen_port": <this rank's>}

:func:`hpctrain.lightgbm.get_network_params` returns them (Ray's
``ray.train.lightgbm.get_network_params``). So that Ray's quick start, which never passes
them, trains one model over all ranks, ``lightgbm.train`` in the worker adds them (and
``tree_learner="data"``) to the ``params`` of a call whose params set no network of their own,
and ``num_threads`` (this rank's share of the node's cores, or ``OMP_NUM_THREADS``) unless
they set it (``LightGBMConfig(inject_network_params=False)`` turns both off).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ..cluster_env import WorkerInfo
from ..config import toml
from ..errors import ConfigError
from .base import Backend
from .xgboost import cores_per_rank, worker_ip
from hpctrain.rendezvous import TcpGroup, group_token, reserve_port

_NETWORK_KEYS = ("machines", "num_machines", "local_listen_port", "machine_list_filename")
_THREAD_KEYS = ("num_threads", "num_thread", "nthread", "nthreads", "n_jobs")
_params: Optional[Dict[str, Any]] = None
_threads = 0  # the default num_threads of lightgbm.train's params in a worker
_lock = threading.Lock()


@dataclass
class LightGBMConfig:
    """``timeout_s``: how long a rank waits for the others (set-up and each agreement).
    ``inject_network_params``: add the network parameters (and ``num_threads``: this
    rank's share of the node's cores) to ``lightgbm.train``'s params when they set none."""

    timeout_s: int = field(default=1800, metadata=toml(
        "int", "Seconds to wait for the other machines before giving up.", minimum=1))
    inject_network_params: bool = field(default=True, metadata=toml(
        "bool", "Set LightGBM's machines and ports in the parameters."))

    def __post_init__(self) -> None:
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, int) or self.timeout_s <= 0:
            raise ConfigError(f"lightgbm.timeout_s: expected a positive integer, got {self.timeout_s!r}")
        if not isinstance(self.inject_network_params, bool):
            raise ConfigError("lightgbm.inject_network_params: expected true or false, got "
                              f"{self.inject_network_params!r}")


def network_params(machines: List[str], rank: int) -> Dict[str, Any]:
    """LightGBM's network parameters of ``rank`` (the three of Ray's).

    >>> network_params(["10.0.0.1:41000", "10.0.0.2:41002"], 1)
    {'num_machines': 2, 'machines': '10.0.0.1:41000,10.0.0.2:41002', 'local_listen_port': 41002}
    """
    return {"num_machines": len(machines), "machines": ",".join(machines),
            "local_listen_port": int(machines[rank].rsplit(":", 1)[1])}


def get_network_params() -> Dict[str, Any]:
    """This worker's network parameters; ``{}`` outside a LightGBMTrainer's worker."""
    with _lock:
        return dict(_params) if _params else {}


def with_network(params: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """``params`` plus this worker's network (and ``tree_learner="data"``) unless they set a
    network of their own, or there is none (one worker); and ``num_threads`` = this
    rank's share of the node's cores unless they set it."""
    params = dict(params or {})
    if _threads and not any(k in params for k in _THREAD_KEYS):
        params["num_threads"] = _threads
    net = get_network_params()
    if not net or any(k in params for k in _NETWORK_KEYS):
        return params
    params.update(net)
    if not any(k in params for k in ("tree_learner", "tree", "tree_type", "tree_learner_type")):
        params["tree_learner"] = "data"
    return params


def _patch_train() -> None:
    import lightgbm

    train = lightgbm.train
    if getattr(train, "_hpctrain_network", False):
        return

    def train_with_network(params, *args, **kwargs):
        return train(with_network(params), *args, **kwargs)

    train_with_network.__doc__ = train.__doc__
    train_with_network._hpctrain_network = True
    lightgbm.train = train_with_network


class LightGBMBackend(Backend):
    checkpoint_ranks = "rank0"

    def __init__(self, config: LightGBMConfig = None):
        super().__init__(config or LightGBMConfig())
        self._group = None

    def on_start(self, info: WorkerInfo, *, use_gpu: bool) -> None:
        global _params, _threads

        cfg: LightGBMConfig = self.config
        self._group = TcpGroup(rank=info.world_rank, world_size=info.world_size,
                               addr=info.master_addr, port=info.master_port,
                               timeout_s=cfg.timeout_s, token=group_token(info))
        if info.world_size <= 1:
            return
        port = reserve_port(f"lightgbm/{group_token(info)}/{info.world_rank}")
        machines = self._group.allgather(f"{worker_ip(info)}:{port}")
        with _lock:
            _params = network_params(machines, info.world_rank)
        if cfg.inject_network_params:
            _threads = cores_per_rank(info)
            _patch_train()

    def coordinator(self, info: WorkerInfo):
        return self._group

    def on_shutdown(self, info: WorkerInfo) -> None:
        if self._group is not None:
            self._group.close()
