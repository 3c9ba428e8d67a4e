""":class:`JobSpec`, what a run needs, and its TOML form (``spec.toml``)."""
from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import tomli_w

from ..config import (ContainerConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig,
                      SchedulerConfig, SetupConfig)
from ..common.tomlfile import show_value as _show
from ..config.keys import toml_keys
from ..units import parse_walltime
from .entrypoint import EntryPoint
from .sections import Ctx, check_table, check_value
from .values import ENV_NAME, check_env, redact_config
from ..callbacks import to_toml as callbacks_toml

@dataclass
class JobSpec:
    """Everything a run needs; the TOML file and the Python API both build one."""

    entrypoint: Optional[EntryPoint] = None
    backend: str = "torch"
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    run: RunConfig = field(default_factory=RunConfig)
    config: Dict[str, Any] = field(default_factory=dict)
    backend_options: Dict[str, Any] = field(default_factory=dict)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    setup: SetupConfig = field(default_factory=SetupConfig)
    #: The container each rank runs in (``[container]``; no runtime: none).
    container: ContainerConfig = field(default_factory=ContainerConfig)
    env: Dict[str, str] = field(default_factory=dict)
    site: Optional[str] = None
    #: name → hpctrain.data.HDF5Dataset / SequenceDataset (``[datasets]``, ``datasets=``)
    datasets: Dict[str, Any] = field(default_factory=dict)
    #: Which datasets are split over the ranks (``[data]``, ``dataset_config=``)
    data_config: DataConfig = field(default_factory=DataConfig)
    #: The ``[sweep]`` table (``hpctrain sweep``), validated; empty for a single run.
    sweep: Dict[str, Any] = field(default_factory=dict)
    source: Optional[str] = field(default=None, compare=False)
    #: The loaded site config (``hpctrain.sites.Site``), when ``site`` is set.
    site_config: Any = field(default=None, compare=False, repr=False)
    #: Where each dotted key's value came from (site file, job file, override).
    origins: Dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def where(self, key: str) -> Optional[str]:
        """The file (or ``override '...'``) that set ``key``, for error messages."""
        return Ctx(self.source, self.origins).where(key)

    def __post_init__(self) -> None:
        ctx = Ctx(self.source)
        if isinstance(self.entrypoint, str):
            self.entrypoint = EntryPoint.parse(self.entrypoint, base_dir=os.getcwd(),
                                               file=self.source)
        check_value(ctx, "job.backend", "str", self.backend)
        self.backend_options = check_table(ctx, self.backend, self.backend_options or {})
        if self.config is None:
            self.config = {}
        if isinstance(self.scheduler, str):
            self.scheduler = SchedulerConfig(kind=self.scheduler)
        self.env = check_env(ctx, self.env or {})
        var = getattr(self.scheduler, "gpu_binding_var", None)
        if not isinstance(var, str) or not ENV_NAME.fullmatch(var):
            raise Ctx(self.source, self.origins).error(
                "scheduler.gpu_binding_var", f"expected an environment variable name (letters, "
                f"digits and _, not starting with a digit), got {_show(var)}",
                'e.g. "CUDA_VISIBLE_DEVICES" (NVIDIA GPUs) or "ROCR_VISIBLE_DEVICES" (AMD)')

    def to_toml_dict(self) -> Dict[str, Any]:
        """The resolved spec as TOML sections; ``None`` omitted, objects as their repr."""
        r = self.run
        data: Dict[str, Any] = {
            "job": {"entrypoint": None if self.entrypoint is None else str(self.entrypoint),
                    "backend": self.backend,
                    "entrypoint_dir": getattr(self.entrypoint, "base_dir", None)
                    if getattr(self.entrypoint, "module", None) else None},
            # every key the section's class declares (config/keys.py), as a job file
            # writes it: a new field is in spec.toml with no edit here
            "scaling": _section(self.scaling),
            "run": _section(r),
            "checkpoint": _section(r.checkpoint_config, _CHECKPOINT_WRITTEN),
            "failure": _section(r.failure_config, _FAILURE_WRITTEN,
                                only_when_set=_BUDGET_KEYS),
            "scheduler": {k: v for k, v in vars(self.scheduler).items()
                          if v not in (None, [], {}) and v != getattr(_SCHED_DEFAULTS, k, None)},
            "setup": {k: v for k, v in vars(self.setup).items() if v},
            "container": {k: v for k, v in vars(self.container).items()
                          if v not in (None, [], {}) and v != getattr(_CONTAINER_DEFAULTS, k)}
            if self.container.enabled else {},
            "env": self.env,
            # a credential-looking key of a Python train_loop_config (a job file's is
            # refused) stays out of spec.toml and the script: the payload carries it
            "config": redact_config(self.config),
            "datasets": {k: v.to_toml() for k, v in (self.datasets or {}).items()
                         if v.to_toml() is not None},
            "data": {"datasets_to_split": self.data_config.datasets_to_split}
            if self.data_config.datasets_to_split != "all" else {},
            self.backend: self.backend_options,
            "sweep": self.sweep,
        }
        out = _tomlable(data)
        if self.site:
            out = {"site": self.site, **out}
        if r.callbacks:
            out["callbacks"] = callbacks_toml(r.callbacks)
        for name in ("config", "env", "setup", "container", "scheduler", "datasets", "data", "callbacks",
                     self.backend, "sweep"):
            if not out.get(name):
                out.pop(name, None)
        return out

    def to_toml(self) -> str:
        """``to_toml_dict()`` as TOML text, loadable by :func:`load_job_spec`."""
        return "# resolved hpctrain job spec\n" + tomli_w.dumps(self.to_toml_dict())


_OMIT = object()
#: The shared keys' defaults (a scheduler's own options default to None).
_SCHED_DEFAULTS = SchedulerConfig()
_FAILURE_DEFAULTS = FailureConfig()
#: written only when set: a spec.toml of an older run compares equal
_BUDGET_KEYS = ("max_user_errors", "max_node_failures", "max_hangs",
                "max_attempts_without_progress", "max_excluded_nodes", "straggler_factor")
_CONTAINER_DEFAULTS = ContainerConfig()
#: keys written otherwise than as their field holds them (a kind's own spelling aside)
_CHECKPOINT_WRITTEN: Dict[str, Callable[[Any], Any]] = {
    # only when set (the canonical name): a spec.toml of an older run compares equal
    "checkpoint_upload_mode": lambda ck: None if ck.upload_mode_name == "sync"
    else ck.upload_mode_name,
}
_FAILURE_WRITTEN: Dict[str, Callable[[Any], Any]] = {
    "hang_timeout": lambda fl: None if fl.hang_timeout is None else (
        "off" if fl.hang_timeout_s == 0 else f"{fl.hang_timeout_s}s"),
}


def _section(obj: Any, written: Mapping[str, Callable[[Any], Any]] = {},
             only_when_set: Sequence[str] = ()) -> Dict[str, Any]:
    """A config object's job-file section: each key its class declares (``toml_keys``),
    as a job file writes it (a duration as seconds, ``"90s"``; ``written``: a key's own
    writer); a key of ``only_when_set`` only when it differs from the default."""
    defaults = type(obj)() if only_when_set else None
    out: Dict[str, Any] = {}
    for key, decl in toml_keys(type(obj)).items():
        value = getattr(obj, key)
        if key in only_when_set and value == getattr(defaults, key):
            continue
        if key in written:
            value = written[key](obj)
        elif decl.kind == "walltime" and value is not None:
            value = f"{value if isinstance(value, int) else parse_walltime(value)}s"
        out[key] = value
    return out


def _tomlable(value: Any) -> Any:
    """Convert to what TOML can hold: drop ``None`` in tables, other objects → repr."""
    if value is None:
        return _OMIT
    if isinstance(value, (bool, int, float, str, _dt.date, _dt.time)):
        return value
    if isinstance(value, Mapping):
        out = {str(k): _tomlable(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not _OMIT}
    if isinstance(value, (list, tuple)):
        return [repr(v) if v is None else _tomlable(v) for v in value]
    return repr(value)


