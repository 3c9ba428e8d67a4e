"""``ray.tune.stopper``: :class:`Stopper`, the base of a class-based stopping criterion
given as ``RunConfig(stop=MyStopper())``.

A stopper is pickled into the sweep and consulted by each trial's rank 0 after every
report (:func:`hpctrain.tune._control.stop_met`): ``__call__(trial_id, result)`` true
stops that trial, and ``stop_all()`` true stops it too. Unlike Ray, where one stopper
object in the driver sees every trial's results, each trial consults its own copy: state
kept on the stopper (a flag set by one trial's result) is that trial's alone, so
``stop_all()`` ends the trial that set it, not the whole sweep (docs/porting.md).
"""
from typing import Any, Dict

__all__ = ["Stopper"]


class Stopper:
    """Ray Tune's ``Stopper``: override ``__call__`` (and ``stop_all`` if needed)."""

    def __call__(self, trial_id: str, result: Dict[str, Any]) -> bool:
        raise NotImplementedError

    def stop_all(self) -> bool:
        return False
