"""``ray.air.session``: the per-worker session functions of Ray 2.0–2.6 (still in a large
share of public Ray code: ``session.report(...)``, ``session.get_checkpoint()``,
``session.get_world_rank()``), each the hpctrain call Ray later renamed it to
(``ray.train.report``, ``ray.train.get_context().get_world_rank()``…).

Called outside a training function they raise as ``hpctrain.get_context()`` does. Ray's
``get_trial_resources()`` (a Tune placement group) has no counterpart: the ranks' resources
are the allocation's (docs/porting.md).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from .. import get_checkpoint, get_context, get_dataset_shard
from .. import report as _report
from ..checkpoint import Checkpoint

__all__ = ["report", "get_checkpoint", "get_dataset_shard", "get_metadata",
           "get_experiment_name", "get_trial_name", "get_trial_id", "get_trial_dir",
           "get_log_dir", "get_world_size", "get_world_rank", "get_local_rank",
           "get_local_world_size", "get_node_rank"]


def report(metrics: Dict[str, Any], *, checkpoint: Optional[Checkpoint] = None) -> None:
    """``session.report(metrics, checkpoint=...)``: :func:`hpctrain.report`."""
    _report(metrics, checkpoint=checkpoint)


def get_metadata() -> Dict[str, Any]:
    return get_context().get_metadata()


def get_experiment_name() -> str:
    return get_context().get_experiment_name()


def get_trial_name() -> str:
    return get_context().get_trial_name()


def get_trial_id() -> str:
    return get_context().get_trial_id()


def get_trial_dir() -> str:
    return get_context().get_trial_dir()


def get_log_dir() -> str:
    """Ray 2.0's name for the trial directory."""
    return get_context().get_trial_dir()


def get_world_size() -> int:
    return get_context().get_world_size()


def get_world_rank() -> int:
    return get_context().get_world_rank()


def get_local_rank() -> int:
    return get_context().get_local_rank()


def get_local_world_size() -> int:
    return get_context().get_local_world_size()


def get_node_rank() -> int:
    return get_context().get_node_rank()
