"""User-facing configuration objects, named as in Ray Train 2.

These are plain dataclasses; :mod:`hpctrain.spec` maps them to and from the TOML job
spec, so the Python API and ``job.toml`` describe the same :class:`~hpctrain.spec.JobSpec`.

The package's modules, bottom up:

* :mod:`.keys`: how a field declares its job-file key (:class:`TomlKey`, :func:`toml`).
* :mod:`.ray_named`: :class:`ScalingConfig`, :class:`RunConfig`, :class:`CheckpointConfig`,
  :class:`FailureConfig`, :class:`SyncConfig`, :class:`DataConfig`.
* :mod:`.scheduler`: :class:`SchedulerConfig` (the keys every batch system shares; each
  scheduler's own options are a subclass in its module) and :class:`SetupConfig`.
* :mod:`.container`: :class:`ContainerConfig`, the ``[container]`` the ranks run in.
* :mod:`.validation`: :class:`ValidationConfig`, :class:`ValidationTaskConfig` (asynchronous
  validation).

Every name is importable from ``hpctrain.config`` as before.
"""
from __future__ import annotations

from .keys import TomlKey, python_only, toml, toml_keys
from .ray_named import (DEFAULT_STORAGE_ENV, STORAGE_URI_HINT, WARNING_SIGNALS, CheckpointConfig,
                        CheckpointUploadMode, DataConfig, FailureConfig, RunConfig,
                        ScalingConfig, SyncConfig, check_stop, default_storage_path,
                        default_storage_paths,
                        local_storage_path, upload_mode)
from .container import ContainerConfig
from .validation import ValidationConfig, ValidationTaskConfig
from .scheduler import (GPU_BINDINGS, SchedulerConfig, SetupConfig, check_scheduler_keys,
                        kind_field, scheduler_config_class, scheduler_keys,
                        scheduler_options, scheduler_title)
from ..common.registry import LAUNCHERS, SCHEDULERS

__all__ = [
    "CheckpointConfig", "CheckpointUploadMode", "ContainerConfig", "DEFAULT_STORAGE_ENV", "DataConfig",
    "FailureConfig", "GPU_BINDINGS", "LAUNCHERS", "RunConfig", "SCHEDULERS",
    "STORAGE_URI_HINT", "ScalingConfig", "SchedulerConfig", "SetupConfig", "SyncConfig",
    "TomlKey", "ValidationConfig", "ValidationTaskConfig", "WARNING_SIGNALS", "check_scheduler_keys", "check_stop",
    "default_storage_path", "default_storage_paths", "kind_field", "local_storage_path", "python_only", "scheduler_config_class",
    "scheduler_keys", "scheduler_options", "scheduler_title", "toml", "toml_keys", "upload_mode",
]
