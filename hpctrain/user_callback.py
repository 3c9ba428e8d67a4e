"""Ray Train v2's ``ray.train.UserCallback``, given to ``RunConfig(callbacks=[...])``
(run by :mod:`hpctrain.allocation.tracking`, beside the tracking callbacks)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

__all__ = ["UserCallback", "wants_rank_results"]


class UserCallback:
    """Ray Train v2's ``ray.train.UserCallback``: ``RunConfig(callbacks=[MyCallback()])``.

    Called in the supervisor (the driver of a local run, the batch step of a job), never
    in a training process, as Ray calls it in its controller. ``run_context`` is the
    run's :class:`~hpctrain.callbacks.RunInfo` (``path``, ``name``, ``config``) where Ray
    passes its ``TrainRunContext``.
    """

    def after_report(self, run_context: Any, metrics: List[Dict[str, Any]],
                     checkpoint: Optional[Any]) -> None:
        """After every rank made a report: ``metrics[i]`` is what rank ``i`` reported
        (with hpctrain's ``_training_iteration``, ``_timestamp``…); ``checkpoint`` the
        committed :class:`~hpctrain.Checkpoint` of this report, None when no rank handed
        one in. A report whose checkpoint is committed later (``ASYNC``, fast reports) is
        delivered once it is."""

    def after_exception(self, run_context: Any,
                        worker_exceptions: Dict[int, BaseException]) -> None:
        """After an attempt failed: ``{rank: the exception it raised}`` for each rank that
        left one (a rank killed by a signal leaves none). Called once per failed attempt,
        before the restart when ``max_failures`` allows one."""


def wants_rank_results(callbacks: Optional[List[Any]]) -> bool:
    """Whether a run must keep every rank's reports: a UserCallback sees them all."""
    return any(isinstance(cb, UserCallback) for cb in callbacks or [])
