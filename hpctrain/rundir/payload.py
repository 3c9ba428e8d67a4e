"""The payload of a run: what every rank loads from the run directory
(``.hpctrain/payload.pkl``) that is not in its environment. The driver (a
:class:`~hpctrain.run.Run`) writes it; the worker entry reads it.

The file holds two pickles one after the other: first the backend's name and config
(hpctrain's own classes only), then the payload. A worker reads the first, sets the
backend's environment (``TF_USE_LEGACY_KERAS``: read when TensorFlow is imported), and only
then unpickles the payload, whose training function may import the user's frameworks. A
file of an older hpctrain holds the payload alone."""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional

import cloudpickle

from hpctrain.config import CheckpointConfig, ScalingConfig
from hpctrain.common.fsutil import atomic_write_bytes
from hpctrain.common.source_files import restore_source_files
from hpctrain.rundir.layout import RunDir
from hpctrain.common.trust import MAX_PAYLOAD_BYTES, read_trusted

#: The first pickle's marker (its ``format`` key).
HEADER_FORMAT = "hpctrain-payload-header-1"


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
    #: the trainer's ValidationConfig (asynchronous validation), or None
    validation: Any = None

    def save(self, run: RunDir) -> None:
        header = {"format": HEADER_FORMAT, "backend": self.backend,
                  "backend_config": self.backend_config}
        # 0600: train_loop_config may hold what only the user should read
        atomic_write_bytes(run.payload_file, cloudpickle.dumps(header) + cloudpickle.dumps(self),
                           mode=0o600)

    @staticmethod
    def load(run: RunDir, *, before_user: Optional[Callable[[str, Any], None]] = None
             ) -> "WorkerPayload":
        """The run's payload. ``before_user(backend, backend_config)`` runs before anything
        of the user's is unpickled (a worker sets its backend's environment there)."""
        stream = io.BytesIO(read_trusted(run.payload_file, what="the run's payload",
                                         max_bytes=MAX_PAYLOAD_BYTES))
        first = cloudpickle.load(stream)
        if isinstance(first, WorkerPayload):  # written by an hpctrain before the header
            return first
        if before_user is not None:
            before_user(first["backend"], first["backend_config"])
        payload: WorkerPayload = cloudpickle.load(stream)
        # the user's frames name their file in a rank's traceback (cloudpickle >= 3.1 writes
        # "<dynamic-code>" for a function of the user's script)
        restore_source_files(payload.train_func, payload.validation)
        return payload
