"""``tune.with_resources``: what one trial of a function trainable gets.

Ray's ``tune.with_resources(train_fn, resources={"cpu": 2, "gpu": 0})`` reserves those
resources for each trial. Here a function trainable runs as a 1-worker trainer (the
framework-free ``function`` backend: :mod:`hpctrain.function_trainer`), so the
resources become that worker's :class:`~hpctrain.ScalingConfig`: ``{"cpu": 2}`` is
``resources_per_worker={"CPU": 2}`` (trials side by side on one machine count it; on a
cluster it is the array task's cores) and ``"gpu"`` > 0 is ``use_gpu=True`` with that many
GPUs. A ``ScalingConfig`` is taken as it is. Ray's ``PlacementGroupFactory`` and a function
of the config are not supported (docs/porting.md).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Optional, Union

from ..config import ScalingConfig
from ..errors import ConfigError

__all__ = ["with_resources", "scaling_of"]

_SCALING_ATTR = "_hpctrain_scaling_config"


def _scaling(resources: Union[Dict[str, float], ScalingConfig]) -> ScalingConfig:
    if isinstance(resources, ScalingConfig):
        return resources
    if not isinstance(resources, dict):
        raise ConfigError(f"with_resources(resources=...): expected a dict such as "
                          f"{{'cpu': 2, 'gpu': 0}} or a ScalingConfig, got "
                          f"{type(resources).__name__}",
                          hint="Ray's PlacementGroupFactory and functions of the config have "
                               "no counterpart here; give the trial's cores and GPUs")
    per_worker: Dict[str, float] = {}
    for key, value in resources.items():
        name = str(key).upper()
        if name not in ("CPU", "GPU"):
            raise ConfigError(f"with_resources(resources=...): unknown key {key!r}; expected "
                              f"'cpu' and/or 'gpu'")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"with_resources(resources=...): {key!r}: expected a number "
                              f"≥ 0, got {value!r}")
        if value:
            per_worker[name] = value
    return ScalingConfig(num_workers=1, use_gpu=bool(per_worker.get("GPU")),
                         resources_per_worker=per_worker or None)


def with_resources(trainable: Callable[..., Any],
                   resources: Union[Dict[str, float], ScalingConfig]) -> Callable[..., Any]:
    """``trainable`` (a training function) with each trial's resources attached."""
    if not callable(trainable):
        raise ConfigError(f"with_resources(trainable=...): expected a training function, got "
                          f"{type(trainable).__name__}",
                          hint="a trainer takes scaling_config=ScalingConfig(...) instead")
    scaling = _scaling(resources)

    @functools.wraps(trainable)
    def trial(*args: Any, **kwargs: Any) -> Any:
        return trainable(*args, **kwargs)

    setattr(trial, _SCALING_ATTR, scaling)
    return trial


def scaling_of(trainable: Any) -> Optional[ScalingConfig]:
    """The ScalingConfig :func:`with_resources` attached to ``trainable``, else None."""
    return getattr(trainable, _SCALING_ATTR, None)
