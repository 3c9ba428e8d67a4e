"""TensorFlow backend: a ``TF_CONFIG`` per worker for ``MultiWorkerMirroredStrategy``.

Before the training function runs, every rank picks a port that is free on its own host
(below the kernel's ephemeral range, hashed from the job, attempt and rank, probed by
binding it: :func:`~hpctrain.rendezvous.reserve_port`), the ranks exchange their
``host:port`` over hpctrain's TCP group (:mod:`hpctrain.rendezvous`, rank 0 at
``master_addr:master_port``), and each sets

    TF_CONFIG = {"cluster": {"worker": [<host:port of rank 0>, <rank 1>, ...]},
                 "task": {"type": "worker", "index": <world rank>}}

— ``cluster.worker`` identical on all ranks, ``task.index`` = hpctrain's world rank — before
the strategy is created (the user creates it inside the training function, as in Ray Train).
``report()``'s agreement runs over the same TCP group, never over TensorFlow's collectives.

Keras: TensorFlow ≥ 2.16 ships Keras 3, with which ``model.fit`` under
``MultiWorkerMirroredStrategy`` fails (shared/notes); the tf.keras code of the Ray Train docs
is Keras 2 code. The backend therefore sets ``TF_USE_LEGACY_KERAS=1`` (the ``tf-keras``
package) unless the job sets it itself (``TensorflowConfig(legacy_keras=False)`` or
``[env] TF_USE_LEGACY_KERAS = "0"``). It must be set before TensorFlow is imported, which is
why the backend does it (:meth:`TensorflowBackend.prepare_environment`), before the worker
unpickles the training function (which may import TensorFlow: a function that names
``ReportCheckpointCallback`` builds that class from ``tf.keras`` as it is unpickled), and
not the training function.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List

from ..cluster_env import WorkerInfo
from ..config import toml
from ..errors import ConfigError
from .base import Backend
from hpctrain.rendezvous import TcpGroup, group_token, reserve_port

_LOOPBACK = "localhost"


@dataclass
class TensorflowConfig:
    """``timeout_s``: how long a rank waits for the others (set-up and each agreement).
    ``legacy_keras``: set ``TF_USE_LEGACY_KERAS=1`` (tf.keras is Keras 2) unless the
    environment already sets it."""

    timeout_s: int = field(default=1800, metadata=toml(
        "int", "Seconds to wait for the other workers before giving up.", minimum=1))
    legacy_keras: bool = field(default=True, metadata=toml(
        "bool", "Use tf-keras (Keras 2) instead of Keras 3."))

    def __post_init__(self) -> None:
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, int) or self.timeout_s <= 0:
            raise ConfigError(f"tensorflow.timeout_s: expected a positive integer, got {self.timeout_s!r}")
        if not isinstance(self.legacy_keras, bool):
            raise ConfigError(f"tensorflow.legacy_keras: expected true or false, got {self.legacy_keras!r}")


def worker_address(info: WorkerInfo) -> str:
    """The host other workers reach this rank at: ``localhost`` when every rank shares
    one node, else this node's name in the allocation's host list.

    >>> from hpctrain.cluster_env import worker_info_from_env
    >>> worker_address(worker_info_from_env({"RANK": "1", "WORLD_SIZE": "2",
    ...     "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}))
    'localhost'
    >>> worker_address(worker_info_from_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "4",
    ...     "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0",
    ...     "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}))
    'n2'
    """
    if info.world_size == info.local_world_size:
        return _LOOPBACK
    return info.hosts[info.node_rank]


def tf_config(workers: List[str], index: int) -> Dict[str, Any]:
    """The ``TF_CONFIG`` of worker ``index``.

    >>> tf_config(["n1:41000", "n2:41002"], 1)
    {'cluster': {'worker': ['n1:41000', 'n2:41002']}, 'task': {'type': 'worker', 'index': 1}}
    """
    return {"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}}


class TensorflowBackend(Backend):
    def __init__(self, config: TensorflowConfig = None):
        super().__init__(config or TensorflowConfig())
        self._group = None

    def prepare_environment(self) -> None:
        if self.config.legacy_keras:
            os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

    def on_start(self, info: WorkerInfo, *, use_gpu: bool) -> None:
        cfg: TensorflowConfig = self.config
        self.prepare_environment()  # (already done when the worker loaded the payload)
        self._group = TcpGroup(rank=info.world_rank, world_size=info.world_size,
                               addr=info.master_addr, port=info.master_port,
                               timeout_s=cfg.timeout_s, token=group_token(info))
        host = worker_address(info)
        port = reserve_port(f"tf/{group_token(info)}/{info.world_rank}")
        workers = self._group.allgather(f"{host}:{port}")
        os.environ["TF_CONFIG"] = json.dumps(tf_config(workers, info.world_rank))

    def coordinator(self, info: WorkerInfo):
        return self._group

    def on_shutdown(self, info: WorkerInfo) -> None:
        if self._group is not None:
            self._group.close()
