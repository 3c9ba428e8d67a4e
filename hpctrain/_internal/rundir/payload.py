"""The payload of a run: what every rank loads from the run directory
(``.hpctrain/payload.pkl``) that is not in its environment. The driver (a
:class:`~hpctrain.run.Run`) writes it; the worker entry reads it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import cloudpickle

from hpctrain.config import CheckpointConfig, ScalingConfig
from hpctrain._internal.base.fsutil import atomic_write_bytes
from hpctrain._internal.rundir.layout import RunDir
from hpctrain._internal.base.trust import MAX_PAYLOAD_BYTES, load_trusted_pickle


@dataclass
class WorkerPayload:
    """Everything a worker needs that is not in its environment, pickled into the run
    directory by the driver (``.hpctrain/payload.pkl``)."""

    train_func: Any                     # a callable, or a spec.EntryPoint resolved in the worker
    train_loop_config: Optional[Dict[str, Any]]
    backend: str
    backend_config: Any
    scaling: ScalingConfig
    checkpoint_config: CheckpointConfig
    run_name: str
    per_rank_results: bool = False      # the seed-era API wants every rank's metrics
    keep_return_values: bool = False    # the seed-era run() returns them
    datasets: Dict[str, Any] = field(default_factory=dict)
    #: DataConfig.datasets_to_split: "all" or the names split over the ranks (the others
    #: are read whole by every rank)
    datasets_to_split: Any = "all"
    metadata: Optional[Dict[str, Any]] = None   # the trainer's metadata= (Ray)
    # experiment_name, trial_id, trial_name for get_context() (a sweep's trial sets them)
    trial: Optional[Dict[str, str]] = None
    #: FailureConfig.mtbi in seconds (the site's interruption rate, for
    #: CheckpointConfig(checkpoint_frequency="auto"))
    mtbi_s: Optional[int] = None

    def save(self, run: RunDir) -> None:
        # 0600: train_loop_config may hold what only the user should read
        atomic_write_bytes(run.payload_file, cloudpickle.dumps(self), mode=0o600)

    @staticmethod
    def load(run: RunDir) -> "WorkerPayload":
        return load_trusted_pickle(run.payload_file, what="the run's payload",
                                   max_bytes=MAX_PAYLOAD_BYTES)
