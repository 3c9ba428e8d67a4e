"""User-facing configuration objects, named as in Ray Train 2.

These are plain dataclasses; :mod:`hpctrain.spec` maps them to and from the TOML job
spec, so the Python API and ``job.toml`` describe the same :class:`~hpctrain.spec.JobSpec`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .errors import ConfigError

DEFAULT_STORAGE_ENV = "HPCTRAIN_STORAGE_PATH"


def default_storage_path() -> str:
    """``$HPCTRAIN_STORAGE_PATH`` or ``~/hpctrain_results`` (Ray's ``~/ray_results``)."""
    return os.environ.get(DEFAULT_STORAGE_ENV) or os.path.join(
        os.path.expanduser("~"), "hpctrain_results"
    )


@dataclass
class ScalingConfig:
    """How many workers, and what each one gets.

    ``num_workers`` is the total number of training processes (ranks). On a cluster they
    are spread over ``num_nodes`` nodes (``workers_per_node`` each) by the launcher.
    """

    num_workers: int = 1
    use_gpu: bool = False
    resources_per_worker: Optional[Dict[str, float]] = None
    num_nodes: Optional[int] = None
    workers_per_node: Optional[int] = None

    def __post_init__(self) -> None:
        _check_int("scaling.num_workers", self.num_workers, minimum=1)
        if not isinstance(self.use_gpu, bool):
            raise ConfigError(f"scaling.use_gpu: expected true or false, got {self.use_gpu!r}")
        if self.num_nodes is not None:
            _check_int("scaling.num_nodes", self.num_nodes, minimum=1)
        if self.workers_per_node is not None:
            _check_int("scaling.workers_per_node", self.workers_per_node, minimum=1)
        if self.num_nodes and self.workers_per_node:
            expected = self.num_nodes * self.workers_per_node
            if self.num_workers not in (1, expected):
                raise ConfigError(
                    f"scaling: num_workers={self.num_workers} but num_nodes × workers_per_node"
                    f" = {expected}; give one or make them agree"
                )
            self.num_workers = expected


@dataclass
class CheckpointConfig:
    """Checkpoint retention, as in Ray Train.

    ``num_to_keep`` keeps the best K checkpoints by ``checkpoint_score_attribute``
    (or the K most recent when no attribute is given). The most recent checkpoint — the
    one a restart resumes from — is always kept in addition.

    ``sync_to_disk`` (hpctrain only): fsync checkpoint files before publishing them, so a
    committed checkpoint survives a node crash, not only a process kill.
    """

    num_to_keep: Optional[int] = None
    checkpoint_score_attribute: Optional[str] = None
    checkpoint_score_order: str = "max"
    sync_to_disk: bool = True

    def __post_init__(self) -> None:
        if self.num_to_keep is not None:
            _check_int("checkpoint.num_to_keep", self.num_to_keep, minimum=1)
        if self.checkpoint_score_order not in ("max", "min"):
            raise ConfigError(
                "checkpoint.checkpoint_score_order: expected \"max\" or \"min\", got "
                f"{self.checkpoint_score_order!r}"
            )
        if self.checkpoint_score_attribute is not None and not isinstance(
            self.checkpoint_score_attribute, str
        ):
            raise ConfigError(
                "checkpoint.checkpoint_score_attribute: expected a metric name (string), got "
                f"{self.checkpoint_score_attribute!r}"
            )


@dataclass
class FailureConfig:
    """``max_failures``: restarts of the worker group allowed (0 = none, -1 = unlimited)."""

    max_failures: int = 0

    def __post_init__(self) -> None:
        _check_int("failure.max_failures", self.max_failures, minimum=-1)


@dataclass
class RunConfig:
    """Where the run directory goes and how the run behaves.

    The run directory is ``<storage_path>/<name>``. Running again with the same name
    continues that run from its latest committed checkpoint.
    """

    name: Optional[str] = None
    storage_path: Optional[str] = None
    checkpoint_config: CheckpointConfig = field(default_factory=CheckpointConfig)
    failure_config: FailureConfig = field(default_factory=FailureConfig)
    verbose: int = 1
    callbacks: List[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.checkpoint_config is None:
            self.checkpoint_config = CheckpointConfig()
        if self.failure_config is None:
            self.failure_config = FailureConfig()
        if self.callbacks is None:
            self.callbacks = []
        if self.name is not None:
            from .naming import check_run_name

            check_run_name(self.name, key="run.name")
        if self.verbose not in (0, 1, 2):
            raise ConfigError(f"run.verbose: expected 0, 1 or 2, got {self.verbose!r}")


def _check_int(key: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{key}: expected an integer ≥ {minimum}, got {value}")
