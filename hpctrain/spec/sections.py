"""The job file's sections and keys, derived from the declarations (each config class's
fields, the sections declared here, each registered backend's and scheduler's), and the
checks of one section's values against them (:class:`Ctx` says which file or override
set a key, for the error)."""
from __future__ import annotations

import copy
import os
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ..config import (CheckpointConfig, ContainerConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig,
                      SchedulerConfig, SetupConfig, TomlKey, scheduler_keys, toml_keys)
from ..errors import ConfigError, one_or_all
from ..common.tomlfile import did_you_mean as _did_you_mean
from ..common.tomlfile import kind_name as _kind
from ..common.tomlfile import show_value as _show
from ..common import registry as _registry
from ..units import UnitError, parse_memory, parse_walltime
from ..callbacks import from_toml
from ..search_space import from_tables

#: The registered backend names (a live view of the backend registry,
#: :func:`hpctrain.common.registry.register_backend`).
BACKENDS = _registry.BACKENDS

# --------------------------------------------------------------------------- schema
# Each key of a job file is declared once: a config class's fields declare their own
# (hpctrain.config.toml), the sections that are no class's fields are declared here, and
# SECTIONS, the choices and the minima below are derived from both. hpctrain.schema
# exports the same declarations as JSON Schema.
#
# Value kinds: "int" (not bool), "number" (int or float, not bool), "bool", "str", "numbers" (table of str -> int/float),
# "strlist" (array of strings), "directives" (table of option -> string/number/true),
# "walltime" and "memory" (strings with units, see hpctrain.units).
EXPECTED = {
    "int": "an integer",
    "number": "a number",
    "bool": "true or false",
    "str": "a string",
    "numbers": "a table of numbers",
    "strlist": "an array of strings",
    "directives": "a table of option = value",
    "space": "a table of config keys and domains ({grid_search = [...]}, …)",
    "walltime": 'a walltime string such as "02:00:00"',
    "callback": "true, false or a table of options",
    "memory": 'a memory size such as "4G"',
    "split": '"all" or an array of dataset names',
    "tune": 'a table with type = "..." and the options of that class',
    "thresholds": "a table of result names and numbers",
    "frequency": '"auto" or a number of reports (an integer >= 1)',
    "binds": 'a table of host path = true or "/path/in/container"',
}

_FIXED_CLASS_SECTIONS: Dict[str, Any] = {
    "scaling": ScalingConfig, "run": RunConfig, "checkpoint": CheckpointConfig,
    "failure": FailureConfig, "scheduler": SchedulerConfig, "setup": SetupConfig,
    # which [datasets] are split over the ranks (hpctrain.DataConfig); the others whole
    "data": DataConfig,
    # the container each rank runs in (hpctrain.containers)
    "container": ContainerConfig,
}


class _Derived(Mapping):
    """A table derived from the registered backends and schedulers, rebuilt when they
    change (a backend registered later has its ``[name]`` section, its name among
    ``job.backend``'s choices; a scheduler its options among ``[scheduler]``'s keys)."""

    def __init__(self, build: Callable[[], Dict[str, Any]]) -> None:
        self._build, self._key, self._value = build, None, {}

    def _table(self) -> Dict[str, Any]:
        key = (_registry.backend_entries(), tuple(_registry.SCHEDULERS.entries().items()))
        if key != self._key:
            self._value, self._key = self._build(), key
        return self._value

    def __getitem__(self, name: str) -> Any:
        return self._table()[name]

    def __iter__(self):
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __repr__(self) -> str:
        return repr(self._table())


#: The sections whose keys are a config class's fields; each class declares its keys
#: (:func:`hpctrain.config.toml_keys`). A backend's section is its registered config
#: dataclass (``[torch]``: :class:`~hpctrain.backends.torch.TorchConfig`).
CLASS_SECTIONS: Mapping[str, Any] = _Derived(lambda: {
    **_FIXED_CLASS_SECTIONS,
    **{e.name: _registry.load(e.config) for e in _registry.backend_entries()}})


def _callback(what: str) -> TomlKey:
    return TomlKey("callback", f"{what}: true, false, or a table of its options.")


#: The sections that are no config class's fields; ``None`` marks a free-form table.
SPEC_SECTIONS: Dict[str, Optional[Dict[str, TomlKey]]] = {
    "job": {
        "entrypoint": TomlKey("str", 'The training function: "train.py:train_func" (a file, '
                              'relative to the job file) or "package.module:train_func".',
                              schema={"pattern": r"^\s*[^:\s].*:[A-Za-z_][A-Za-z0-9_]*\s*$"}),
        "backend": TomlKey("str", "The framework whose communication is set up in each "
                           "worker.", choices=BACKENDS),
        # where a "module:function" entry point's module is looked for (written into
        # spec.toml by hpctrain: the job file's directory, so the job finds it too)
        "entrypoint_dir": TomlKey("str", "Where a module entry point is looked for "
                                  "(hpctrain writes it into spec.toml)."),
    },
    "env": None,
    "config": None,
    # name = "file.h5:col1,col2" or a table (hpctrain.data.as_dataset checks each entry)
    "datasets": None,
    # tracking callbacks: name = true | false | { option = value } (hpctrain.callbacks)
    "callbacks": {"json": _callback("Metrics as JSON lines"),
                  "csv": _callback("Metrics as CSV"),
                  "tensorboard": _callback("TensorBoard event files"),
                  "mlflow": _callback("MLflow tracking"),
                  "wandb": _callback("Weights & Biases")},
    # A hyperparameter sweep (``hpctrain sweep``): param_space overlays [config] per trial.
    "sweep": {
        "num_samples": TomlKey("int", "Repeats of the grid (or samples of the random "
                               "domains).", minimum=1),
        "metric": TomlKey("str", "The reported metric that ranks the trials."),
        "mode": TomlKey("str", "Whether a smaller (min) or a larger (max) metric is better.",
                        choices=("min", "max")),
        "max_concurrent_trials": TomlKey("int", "Trials running at once.", minimum=1),
        "seed": TomlKey("int", "The seed of the random domains.", minimum=0),
        "param_space": TomlKey("space", "Config keys and their domains: lr = {loguniform = "
                               "[1e-4, 1e-1]}, bs = {grid_search = [32, 64]}."),
        "scheduler": TomlKey("tune", 'A trial scheduler: {type = "asha", ...}.'),
        "search_alg": TomlKey("tune", 'A search algorithm: {type = "optuna", ...}.'),
        "stop": TomlKey("thresholds", "Stop a trial once a reported value reaches its "
                        "threshold: {training_iteration = 20}."),
    },
}

def _section_keys(name: str, classes: Mapping[str, Any]) -> Optional[Dict[str, TomlKey]]:
    if name == "scheduler":  # the shared keys and every scheduler's own options
        return scheduler_keys()
    return toml_keys(classes[name]) if name in classes else SPEC_SECTIONS[name]


def _keys() -> Dict[str, Optional[Dict[str, TomlKey]]]:
    classes = dict(CLASS_SECTIONS)
    return {name: _section_keys(name, classes)
            for name in ("job", "scaling", "run", "checkpoint", "failure", "scheduler",
                         "setup", "container", "env", "config", "datasets", "data", "callbacks",
                         *BACKENDS, "sweep")}


#: Every section's keys in order, with their kinds, docs and choices (``None``: a
#: free-form table).
KEYS: Mapping[str, Optional[Dict[str, TomlKey]]] = _Derived(_keys)

#: Allowed keys per section and their kinds; ``None`` marks a free-form table ([config],
#: [env]).
SECTIONS: Mapping[str, Optional[Dict[str, str]]] = _Derived(lambda: {
    name: None if keys is None else {key: k.kind for key, k in keys.items()}
    for name, keys in KEYS.items()
})

#: Top-level keys that are not sections.
TOP_LEVEL_KEYS = {"site": TomlKey("str", "The site config layered under this file "
                                  "(`hpctrain sites` lists them)."),
                  "format": TomlKey("int", "The format version of a spec.toml that hpctrain "
                                    "wrote into a run directory (1); a job file needs none. "
                                    "A newer one than this hpctrain reads is refused.",
                                    minimum=1)}
TOP_LEVEL = {name: k.kind for name, k in TOP_LEVEL_KEYS.items()}

#: Table kinds whose entries merge key by key across layers (site < job file < --set).
MERGED_TABLES = ("numbers", "directives", "callback", "space", "binds")

_CHOICES: Mapping[str, Sequence[Any]] = _Derived(lambda: {
    f"{name}.{key}": k.choices for name, keys in KEYS.items() for key, k in (keys or {}).items()
    if k.choices is not None and not k.own_check})
_MINIMUM: Mapping[str, int] = _Derived(lambda: {
    f"{name}.{key}": k.minimum for name, keys in KEYS.items() for key, k in (keys or {}).items()
    if k.minimum is not None and not k.own_check})

def _matches(kind: str, value: Any) -> bool:
    if kind in ("walltime", "memory"):
        return True  # hpctrain.units explains what is wrong
    if kind == "strlist":
        return isinstance(value, list)
    if kind == "split":
        return value == "all" or isinstance(value, list)
    if kind == "frequency":
        return value == "auto" or (isinstance(value, int) and not isinstance(value, bool)
                                   and value >= 0)
    if kind == "space":
        return isinstance(value, dict)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "callback":
        return isinstance(value, (bool, dict))
    return isinstance(value, dict)  # "numbers", "directives": entries checked separately


class Ctx:
    """Where values came from: the job file, or (per dotted key) the site config or the
    command-line override (``origins`` maps dotted keys to those places)."""

    def __init__(self, file: Optional[str], origins: Optional[Mapping[str, str]] = None):
        self.file = file
        self.origins = dict(origins or {})

    def _origin(self, key: str) -> Optional[str]:
        parts = key.split(".")
        for n in range(len(parts), 0, -1):
            found = self.origins.get(".".join(parts[:n]))
            if found is not None:
                return found
        return None

    def override_for(self, key: str) -> Optional[str]:
        """The ``override '...'`` that set ``key``, if one did."""
        found = self._origin(key)
        return found if found is not None and found.startswith("override ") else None

    def where(self, key: str) -> Optional[str]:
        found = self._origin(key)
        return found if found is not None else self.file

    def error(self, key: str, message: str, hint: Optional[str] = None) -> ConfigError:
        return ConfigError(f"{key}: {message}", file=self.where(key), hint=hint)

    def reraise(self, err: ConfigError) -> ConfigError:
        """Attach the file (or override) to an error raised by a config dataclass."""
        if err.file is not None:
            return err
        key = err.message.split(":", 1)[0]
        return ConfigError(err.message, file=self.where(key), hint=err.hint)



def check_datasets(ctx: Ctx, table: Any, base_for: Callable[[str], str]) -> Dict[str, Any]:
    """``[datasets]``: name → "file.h5:col1,col2" or a table of options."""
    if not isinstance(table, dict):
        raise ctx.error("datasets", f"expected a table ([datasets] section), got {_show(table)} "
                        f"({_kind(table)})")
    if not table:
        return {}
    from ..data import as_dataset

    out = {}
    for name, value in table.items():
        key = f"datasets.{name}"
        if name in SECTIONS["data"]:
            raise ctx.error(key, f"{name!r} is not a dataset", f"{name!r} belongs in [data]")
        try:
            out[name] = as_dataset(value, key, base_dir=base_for(key))
        except ConfigError as e:
            raise ctx.reraise(e) from None
    return out


def check_data_config(ctx: Ctx, table: Dict[str, Any], datasets: Dict[str, Any]) -> DataConfig:
    """``[data]``: ``datasets_to_split`` names datasets of ``[datasets]`` (or is "all")."""
    key = "data.datasets_to_split"
    try:
        config = DataConfig(table.get("datasets_to_split", "all"))
        config.check_names(list(datasets), key=key)
    except ConfigError as e:
        raise ctx.error(key, e.message.split(": ", 1)[1], e.hint) from None
    return config


def check_callbacks(ctx: Ctx, table: Dict[str, Any]) -> List[Any]:
    if not table:
        return []

    try:
        return from_toml(table)
    except ConfigError as e:
        raise ctx.reraise(e) from None


def unknown_key(ctx: Ctx, section: str, key: str) -> ConfigError:
    valid = SECTIONS[section] or {}
    hint = _did_you_mean(key, valid)
    if hint is None:
        homes = [s for s, keys in SECTIONS.items() if keys and key in keys and s != section]
        if homes:
            hint = f"{key!r} belongs in [{homes[0]}]"
        else:
            hint = "valid keys: " + ", ".join(valid)
    return ctx.error(f"{section}.{key}", f"unknown key in [{section}]", hint)


def unknown_section(ctx: Ctx, name: str) -> ConfigError:
    homes = [s for s, keys in SECTIONS.items() if keys and name in keys]
    hint = f"{name!r} belongs in [{homes[0]}]" if homes else _did_you_mean(name, list(SECTIONS))
    if hint is None:
        hint = "valid sections: " + ", ".join(f"[{s}]" for s in SECTIONS)
    return ctx.error(name, "unknown section", hint)


def check_value(ctx: Ctx, key: str, kind: str, value: Any) -> Any:
    """Type-check one value of a fixed-schema section; return it (copied if a table)."""
    if not _matches(kind, value):
        raise _wrong_kind(ctx, key, kind, value)
    check = _KIND_CHECKS.get(kind)
    if check is not None:
        return check(ctx, key, value)
    return _check_choice_and_minimum(ctx, key, value)


def _wrong_kind(ctx: Ctx, key: str, kind: str, value: Any) -> ConfigError:
    """The error for a value not of its key's kind, with a hint for the common slips."""
    hint = None
    if kind == "str" and not isinstance(value, (dict, list)):
        hint = f"quote it: {key.split('.')[-1]} = \"{value}\""
    elif kind == "split":
        hint = ('e.g. datasets_to_split = ["train"]: "train" is split over the ranks, '
                "the other datasets are read whole by every rank")
    return ctx.error(key, f"expected {EXPECTED[kind]}, got {_show(value)} ({_kind(value)})",
                     hint)


def _check_unit(ctx: Ctx, key: str, value: Any, parse: Callable[[object], int]) -> Any:
    """A walltime or memory string that ``parse`` understands, as given."""
    try:
        parse(value)
    except UnitError as e:
        raise ctx.error(key, str(e), e.hint) from None
    return value


def _check_walltime(ctx: Ctx, key: str, value: Any) -> Any:
    """A walltime string (:func:`hpctrain.units.parse_walltime`), as given."""
    return _check_unit(ctx, key, value, parse_walltime)


def _check_memory(ctx: Ctx, key: str, value: Any) -> Any:
    """A memory size string (:func:`hpctrain.units.parse_memory`), as given."""
    return _check_unit(ctx, key, value, parse_memory)


def _check_strlist(ctx: Ctx, key: str, value: Any) -> Any:
    """An array of strings, copied."""
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ctx.error(f"{key}[{i}]", f"expected a string, got {_show(item)} "
                            f"({_kind(item)})")
    return list(value)


def _check_split(ctx: Ctx, key: str, value: Any) -> Any:
    """``"all"``, or an array of dataset names (copied)."""
    if value == "all":
        return value
    return _check_strlist(ctx, key, value)


def _copied(ctx: Ctx, key: str, value: Any) -> Any:
    """A deep copy of a table whose contents are checked elsewhere."""
    return copy.deepcopy(value)


def _check_binds(ctx: Ctx, key: str, value: Any) -> Any:
    """A table of host path = true or the path in the container, copied."""
    for name, item in value.items():
        if not (item is True or isinstance(item, str)):
            raise ctx.error(f"{key}.{name}", "expected true (the same path in the "
                            "container) or the path in the container, got "
                            f"{_show(item)} ({_kind(item)})",
                            f'e.g. binds = {{"{name}" = true}}; "" removes it')
    return dict(value)


def _check_directives(ctx: Ctx, key: str, value: Any) -> Any:
    """A table of directive = string, integer or true, copied."""
    out_d: Dict[str, Any] = {}
    for name, item in value.items():
        if isinstance(item, bool) and not item:
            raise ctx.error(f"{key}.{name}", "false is not a directive value",
                            'to remove a directive set by the site, give "" (empty)')
        if not isinstance(item, (str, int, bool)) or isinstance(item, float):
            raise ctx.error(f"{key}.{name}", "expected a string, an integer or true, got "
                            f"{_show(item)} ({_kind(item)})")
        out_d[name] = item
    return out_d


def _check_space(ctx: Ctx, key: str, value: Any) -> Any:
    """A search space: every domain checked, the tables copied as given."""
    from_tables(value, key, ctx.error)  # checks every domain; the tables stay as given
    return copy.deepcopy(value)


def _check_tune(ctx: Ctx, key: str, value: Any) -> Any:
    """A scheduler or search algorithm table with a ``type`` name, copied."""
    # the table's shape here; its type and options are checked by building the
    # scheduler or search algorithm (hpctrain.tune.jobfile.control_from_spec), which
    # `hpctrain validate`, `hpctrain sweep` and the Tuner do before anything is made
    if not isinstance(value.get("type"), str):
        raise ctx.error(f"{key}.type", f"expected the name of a {key.split('.')[-1]} "
                        f"(a string), got {_show(value.get('type'))}",
                        f'e.g. [{key}] type = "{"asha" if key.endswith("scheduler") else "optuna"}"')
    return copy.deepcopy(value)


def _check_thresholds(ctx: Ctx, key: str, value: Any) -> Any:
    """A table of result names and numbers, copied."""
    for name, number in value.items():
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise ctx.error(f"{key}.{name}", f"expected a number, got {_show(number)} "
                            f"({_kind(number)})", "e.g. stop = {training_iteration = 20}")
    return dict(value)


def _check_numbers(ctx: Ctx, key: str, value: Any) -> Any:
    """A table of names and numbers ≥ 0, copied."""
    out: Dict[str, Any] = {}
    for name, number in value.items():
        if isinstance(number, bool) or not isinstance(number, (int, float)) or number < 0:
            raise ctx.error(f"{key}.{name}", "expected a number ≥ 0, got "
                            f"{_show(number)} ({_kind(number)})")
        out[name] = number
    return out


def _check_choice_and_minimum(ctx: Ctx, key: str, value: Any) -> Any:
    """A scalar among its key's choices and not below its key's minimum, if it has them."""
    choices = _CHOICES.get(key)
    if choices is not None and value not in choices:
        # a registry's name whose plugin was left out: why, as the HINT
        left_out = getattr(choices, "broken", {}).get(value) if isinstance(value, str) else None
        raise ctx.error(key, "expected one of " + ", ".join(f'"{c}"' for c in choices)
                        + f", got {_show(value)}", left_out or _did_you_mean(value, choices))
    minimum = _MINIMUM.get(key)
    if minimum is not None and value < minimum:
        raise ctx.error(key, f"expected an integer ≥ {minimum}, got {value}")
    return value


#: The check of each kind whose values need more than the type check; the other kinds'
#: values are scalars checked against their key's choices and minimum.
_KIND_CHECKS: Dict[str, Callable[[Ctx, str, Any], Any]] = {
    "walltime": _check_walltime,
    "memory": _check_memory,
    "split": _check_split,
    "strlist": _check_strlist,
    "callback": _copied,
    "binds": _check_binds,
    "directives": _check_directives,
    "space": _check_space,
    "tune": _check_tune,
    "thresholds": _check_thresholds,
    "numbers": _check_numbers,
}


def check_table(ctx: Ctx, section: str, table: Any) -> Dict[str, Any]:
    """Validate one fixed-schema section; return ``{key: value}`` as given."""
    if not isinstance(table, dict):
        raise ctx.error(section, f"expected a table ([{section}] section), got "
                        f"{_show(table)} ({_kind(table)})")
    schema = SECTIONS[section] or {}
    out: Dict[str, Any] = {}
    problems: List[ConfigError] = []  # every bad key of the table, reported together
    for key, value in table.items():
        if key not in schema:
            problems.append(unknown_key(ctx, section, key))
            continue
        try:
            out[key] = check_value(ctx, f"{section}.{key}", schema[key], value)
        except ConfigError as e:
            problems.append(e)
    if problems:
        raise one_or_all(problems)
    return out


def expand_path(ctx: Ctx, key: str, value: str, base_dir: str) -> str:
    """Expand ``~`` and ``$VARS``; make a relative path absolute against ``base_dir``."""
    expanded = os.path.expandvars(os.path.expanduser(value))
    missing = re.search(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expanded)
    if missing:
        raise ctx.error(key, f"environment variable ${missing.group(1)} is not set "
                        f"(in {_show(value)})")
    if _registry.uri_scheme(expanded) is not None:  # a URI (file:// too), as it is
        return expanded
    return os.path.abspath(os.path.join(base_dir, expanded))


