"""Asynchronous validation, with Ray Train 2.x's names (``ray.train.v2.api.validation_config``):
the trainer's :class:`ValidationConfig` (the validation function and what its job may
use) and the per-report :class:`ValidationTaskConfig` (``report(..., validation=...)``).

On a batch system a validation is a job of its own (docs/guide/validation.md): the
training allocation never waits for it."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from ..errors import ConfigError
from ..units import parse_memory

#: ``ray_remote_kwargs`` keys a validation job honours (a Ray task's resources).
REMOTE_KEYS = ("num_cpus", "num_gpus", "memory")


@dataclass
class ValidationTaskConfig:
    """One validation (``report(metrics, checkpoint, validation=ValidationTaskConfig(...))``).

    ``fn_kwargs``: JSON keyword arguments for the validation function, over the
    trainer's defaults. ``timeout_s``: after this many seconds without a result the
    validation counts as abandoned (its checkpoint stays COMMITTED; retention may delete
    it); None: no limit."""

    fn_kwargs: Optional[Dict[str, Any]] = None
    timeout_s: Optional[float] = None

    def __post_init__(self) -> None:
        if self.fn_kwargs is None:
            self.fn_kwargs = {}
        if not isinstance(self.fn_kwargs, dict) or not all(
                isinstance(k, str) for k in self.fn_kwargs):
            raise ConfigError("ValidationTaskConfig(fn_kwargs=...): expected a dict with "
                              f"string keys, got {self.fn_kwargs!r}")
        t = self.timeout_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))
                              or not math.isfinite(t) or t < 0):
            raise ConfigError("ValidationTaskConfig(timeout_s=...): expected None or a "
                              f"number of seconds >= 0, got {t!r}")


class ValidationConfig:
    """The trainer's validation (``TorchTrainer(..., validation_config=ValidationConfig(fn))``).

    ``fn(checkpoint, **kwargs) -> dict`` runs once per ``report(..., validation=...)``,
    in a process of its own (a local run) or a batch job of its own (Slurm, PBS); the
    dict it returns is merged into that checkpoint's metrics. ``task_config``: the
    default :class:`ValidationTaskConfig`. ``ray_remote_kwargs``: the job's resources,
    ``num_cpus``, ``num_gpus`` and ``memory`` (bytes, or a string such as ``"8G"``).
    ``scheduler`` (hpctrain's): ``[scheduler]`` options for the validation job that
    differ from the training job's, such as ``{"partition": "debug", "time": "00:20:00"}``.
    Ray's older names ``validate_fn=`` and ``validation_task_config=`` are accepted."""

    def __init__(self, fn: Optional[Callable[..., Dict[str, Any]]] = None,
                 task_config: Optional[ValidationTaskConfig] = None,
                 ray_remote_kwargs: Optional[Dict[str, Any]] = None, *,
                 validate_fn: Optional[Callable[..., Dict[str, Any]]] = None,
                 validation_task_config: Optional[ValidationTaskConfig] = None,
                 scheduler: Optional[Dict[str, Any]] = None):
        fn = fn if fn is not None else validate_fn
        if not callable(fn):
            raise ConfigError("ValidationConfig(fn=...): expected the validation function "
                              f"fn(checkpoint, **kwargs) -> dict, got {fn!r}")
        task = task_config if task_config is not None else validation_task_config
        if task is None:
            task = ValidationTaskConfig()
        if not isinstance(task, ValidationTaskConfig):
            raise ConfigError("ValidationConfig(task_config=...): expected a "
                              f"ValidationTaskConfig, got {type(task).__name__}")
        remote = dict(ray_remote_kwargs or {})
        unknown = sorted(set(remote) - set(REMOTE_KEYS))
        if unknown:
            raise ConfigError(
                f"ValidationConfig(ray_remote_kwargs=...): {', '.join(unknown)} has no "
                "meaning for a validation job", hint="use " + ", ".join(REMOTE_KEYS) +
                "; other options of the job go to scheduler={...}")
        for key in ("num_cpus", "num_gpus"):
            v = remote.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or v < 0 or v != int(v)):
                raise ConfigError(f"ValidationConfig(ray_remote_kwargs={{{key!r}: ...}}): "
                                  f"expected a whole number >= 0, got {v!r}")
        if remote.get("memory") is not None and not isinstance(remote["memory"], str):
            remote["memory"] = f"{int(remote['memory']) // 2**20}M"
        if remote.get("memory") is not None:
            parse_memory(remote["memory"])  # a bad size is refused here
        if scheduler is not None and not isinstance(scheduler, dict):
            raise ConfigError("ValidationConfig(scheduler=...): expected a dict of "
                              f"[scheduler] options, got {type(scheduler).__name__}")
        try:
            json.dumps(scheduler)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"ValidationConfig(scheduler=...): the options must be "
                              f"plain values (strings, numbers): {e}") from None
        self.fn = fn
        self.task_config = task
        self.ray_remote_kwargs = remote
        self.scheduler = dict(scheduler or {})

    # Ray's older attribute names
    validate_fn = property(lambda self: self.fn)
    validation_task_config = property(lambda self: self.task_config)

    def kwargs_for(self, task: ValidationTaskConfig) -> Dict[str, Any]:
        """The keyword arguments of one validation: the defaults, then the report's."""
        return {**(self.task_config.fn_kwargs or {}), **(task.fn_kwargs or {})}

    def __repr__(self) -> str:
        return (f"ValidationConfig(fn={getattr(self.fn, '__name__', self.fn)!r}, "
                f"task_config={self.task_config!r}, "
                f"ray_remote_kwargs={self.ray_remote_kwargs!r}, scheduler={self.scheduler!r})")


def task_config_of(validation: Any) -> Optional[ValidationTaskConfig]:
    """``report(validation=...)`` as a :class:`ValidationTaskConfig`: True gives the
    defaults, False/None no validation; anything else is refused."""
    if validation is None or validation is False:
        return None
    if validation is True:
        return ValidationTaskConfig()
    if isinstance(validation, ValidationTaskConfig):
        return validation
    raise ConfigError("report(validation=...): expected True, False or a "
                      f"ValidationTaskConfig, got {validation!r}")


__all__ = ["ValidationConfig", "ValidationTaskConfig", "task_config_of", "REMOTE_KEYS"]
