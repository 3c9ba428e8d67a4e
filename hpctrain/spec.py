"""The job spec: one data model behind the Python configs and ``job.toml``.

:class:`JobSpec` holds what a run needs (entry point, backend, scaling, run/checkpoint/
failure settings, ``train_loop_config`` and backend options). :func:`load_job_spec`
reads it from a TOML file plus ``section.key=value`` overrides; :meth:`JobSpec.to_toml`
writes the resolved spec back (``spec.toml`` in the run directory), and that file loads
into an equal spec.

Every error is a :class:`~hpctrain.errors.ConfigError` naming the file (or override),
the dotted key, what was expected and what was found.
"""
from __future__ import annotations

import copy
import datetime as _dt
import hashlib
import importlib
import importlib.util
import keyword
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, MutableMapping, Optional, Sequence

try:
    import tomllib
except ImportError:  # pragma: no cover - Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

import tomli_w

from .config import (CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig,
                     SchedulerConfig, SetupConfig, TomlKey, scheduler_config_class,
                     scheduler_keys, toml_keys)
from . import sites
from .errors import ConfigError
from .sites import Site, derive_nodes
from .sites import check_limits as check_site_limits
from .userconfig import load_user_defaults
from ._internal.tomlfile import did_you_mean as _did_you_mean
from ._internal.tomlfile import kind_name as _kind
from ._internal.tomlfile import loads_toml as _loads_toml
from ._internal.tomlfile import read_toml as _read_toml
from ._internal.tomlfile import show_value as _show
from ._internal import registry as _registry

__all__ = [
    "BACKENDS", "EntryPoint", "JobSpec", "KEYS", "SECTIONS", "apply_overrides", "load_job_spec",
    "spec_from_dict",
]

#: The registered backend names (a live view of the backend registry,
#: :func:`hpctrain._internal.registry.register_backend`).
BACKENDS = _registry.BACKENDS

# --------------------------------------------------------------------------- schema
# Each key of a job file is declared once: a config class's fields declare their own
# (hpctrain.config.toml), the sections that are no class's fields are declared here, and
# SECTIONS, the choices and the minima below are derived from both. hpctrain.schema
# exports the same declarations as JSON Schema.
#
# Value kinds: "int" (not bool), "bool", "str", "numbers" (table of str -> int/float),
# "strlist" (array of strings), "directives" (table of option -> string/number/true),
# "walltime" and "memory" (strings with units, see hpctrain.units).
EXPECTED = {
    "int": "an integer",
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
}

_FIXED_CLASS_SECTIONS: Dict[str, Any] = {
    "scaling": ScalingConfig, "run": RunConfig, "checkpoint": CheckpointConfig,
    "failure": FailureConfig, "scheduler": SchedulerConfig, "setup": SetupConfig,
    # which [datasets] are split over the ranks (hpctrain.DataConfig); the others whole
    "data": DataConfig,
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
_SPEC_SECTIONS: Dict[str, Optional[Dict[str, TomlKey]]] = {
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
    return toml_keys(classes[name]) if name in classes else _SPEC_SECTIONS[name]


def _keys() -> Dict[str, Optional[Dict[str, TomlKey]]]:
    classes = dict(CLASS_SECTIONS)
    return {name: _section_keys(name, classes)
            for name in ("job", "scaling", "run", "checkpoint", "failure", "scheduler",
                         "setup", "env", "config", "datasets", "data", "callbacks",
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
_MERGED_TABLES = ("numbers", "directives", "callback", "space")

_CHOICES: Mapping[str, Sequence[Any]] = _Derived(lambda: {
    f"{name}.{key}": k.choices for name, keys in KEYS.items() for key, k in (keys or {}).items()
    if k.choices is not None and not k.own_check})
_MINIMUM: Mapping[str, int] = _Derived(lambda: {
    f"{name}.{key}": k.minimum for name, keys in KEYS.items() for key, k in (keys or {}).items()
    if k.minimum is not None and not k.own_check})
#: An ``[env]`` name (JSON Schema's ``propertyNames`` too).
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_ENV_NAME = re.compile(ENV_NAME_PATTERN)

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


def _check_env(ctx: Ctx, table: Any) -> Dict[str, str]:
    """``[env]``: variable names → string values."""
    if not isinstance(table, dict):
        raise ctx.error("env", f"expected a table ([env] section), got {_show(table)} "
                        f"({_kind(table)})")
    out: Dict[str, str] = {}
    for name, value in table.items():
        if not _ENV_NAME.fullmatch(name):
            raise ctx.error(f"env.{name}", "not a valid environment variable name",
                            "letters, digits and _, not starting with a digit")
        if not isinstance(value, str):
            raise ctx.error(f"env.{name}", f"expected a string, got {_show(value)} "
                            f"({_kind(value)})", f'quote it: {name} = "{_show(value)}"'
                            if not isinstance(value, (dict, list)) else None)
        if script_value_problem(value) is not None:
            raise ctx.error(f"env.{name}", "a newline, carriage return or NUL byte cannot go "
                            "into a variable exported by the batch script",
                            "remove the line break; a value that needs one is read from a "
                            "file in the training function")
        if _is_credential(name) and not _ENV_REF.fullmatch(value):
            raise ctx.error(f"env.{name}", "looks like a credential: it would be written "
                            "into spec.toml and the batch script",
                            f"export {name} in the shell that submits the job (Slurm passes "
                            "its environment on), or source a file only you can read in "
                            "[setup] commands")
        m = _URL_USERINFO.match(value)
        if m and not _ENV_REF.fullmatch(m.group(1)):
            raise ctx.error(f"env.{name}", "holds a password in a URL (scheme://user:"
                            "password@host): it would be written into spec.toml and the "
                            "batch script",
                            f"export {name} in the shell that submits the job and write "
                            f'{name} = "${name}", or put a reference in its place: '
                            '"https://user:${MY_PASSWORD}@host"')
        out[name] = value
    return out


_ENV_REF = re.compile(r"^\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")
#: ``scheme://user:password@`` at the start of a value; group 1: the password.
_URL_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*:([^/@\s]*)@")


def _is_credential(name: str) -> bool:
    """``WANDB_API_KEY``, ``MLFLOW_TRACKING_PASSWORD``, ``HF_TOKEN``… (a reference such as
    ``"$WANDB_API_KEY"`` is fine: the value stays out of the files)."""
    from .callbacks import CREDENTIAL_RE

    return bool(CREDENTIAL_RE.search(name))


# --------------------------------------------------------------------------- script values
#: What no value may hold once it reaches a batch script: a line break starts a new
#: command (also inside a comment), and bash's handling of NUL differs between versions.
_LINE_BREAKING = {"\n": "a newline (LF)", "\r": "a carriage return (CR)", "\0": "a NUL byte"}


def script_value_problem(value: str) -> Optional[str]:
    """What makes ``value`` unfit for a batch script (a line break or NUL), or None.

    >>> script_value_problem("--cpu-bind=cores") is None
    True
    >>> script_value_problem("x\\necho hi")
    'a newline (LF)'
    """
    found = [what for c, what in _LINE_BREAKING.items() if c in value]
    return " and ".join(found) if found else None


#: What a few keys expect, and how to fix them, for :func:`check_script_value`'s error.
SCRIPT_VALUE_HELP = {
    "scheduler.launcher_args": ("one launcher argument per entry, on a single line",
                                "give each argument as an entry of its own: launcher_args "
                                '= ["--cpu-bind=cores", "--exclusive"]'),
    "scheduler.python": ("the path of a Python interpreter (a single line)",
                         'e.g. python = "/opt/venv/bin/python"'),
    "setup.commands": ("one shell line per entry",
                       "give several entries instead of one with newlines"),
    "setup.modules": ("a non-empty single line", None),
}


def check_script_value(value: Any, key: str, *, file: Optional[str] = None,
                       expected: Optional[str] = None, hint: Optional[str] = None) -> Any:
    """The one check of every value that reaches a batch script (directives, modules,
    set-up lines, ``[env]``, launcher arguments, the interpreter, paths, the job name,
    anything in the template's context): CR, LF and NUL are refused, with an error naming
    ``key`` (and ``file``, the job file or override that set it), what was expected and
    how to fix it. Returns ``value``.

    >>> check_script_value("x\\nid", "scheduler.python", file="job.toml")
    Traceback (most recent call last):
    ...
    hpctrain.errors.ConfigError: job.toml: scheduler.python: expected the path of a Python interpreter (a single line), got 'x\\nid', which holds a newline (LF): in the batch script it would start a new command
    HINT: e.g. python = "/opt/venv/bin/python"
    """
    if isinstance(value, str):
        problem = script_value_problem(value)
        if problem is not None:
            own_expected, own_hint = SCRIPT_VALUE_HELP.get(re.sub(r"\[\d+\]$", "", key),
                                                           (None, None))
            raise ConfigError(
                f"{key}: expected {expected or own_expected or 'a single line'}, got "
                f"{value!r}, which holds {problem}: in the batch script it would start a "
                "new command", file=file,
                hint=hint or own_hint or 'remove it (in TOML a "\\n" escape or a multi-line '
                                         '"""string""" puts a line break in a value)')
    return value


#: The sections whose values reach the batch script as shell text, directives or comments
#: (not only inside the embedded spec, a quoted heredoc of TOML where "\n" stays escaped).
SCRIPT_SECTIONS = ("scaling", "run", "failure", "scheduler", "setup", "env")
#: Keys whose own check refuses line breaks already, with its own words: the directives
#: (:func:`hpctrain.schedulers.base.check_directive`) and ``[env]`` (:func:`_check_env`).
_OWN_SCRIPT_CHECK = ("scheduler.directives", "env")


def _check_script_values(ctx: Ctx, data: Mapping[str, Any]) -> None:
    """Every string of the sections that reach the batch script is one line: CR, LF and
    NUL are refused here (:func:`check_script_value`), naming the key and the file (or
    override) that set it; the renderer checks its whole context again
    (:func:`hpctrain.schedulers.base.check_script_context`)."""
    def check(key: str, where: str, value: Any) -> None:
        if isinstance(value, str):
            check_script_value(value, key, file=ctx.where(where))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                check(f"{key}[{i}]", where, item)
        elif isinstance(value, dict):
            for sub, item in value.items():
                check(f"{key}.{sub}", f"{where}.{sub}", item)

    for section in SCRIPT_SECTIONS:
        table = data.get(section)
        if section in _OWN_SCRIPT_CHECK or not isinstance(table, dict):
            continue
        for key, value in table.items():
            if f"{section}.{key}" not in _OWN_SCRIPT_CHECK:
                check(f"{section}.{key}", f"{section}.{key}", value)


#: What spec.toml and the batch script hold in place of a credential-looking value of a
#: train_loop_config given in Python (the workers get the real one, from the payload).
REDACTED = "<redacted: credential-looking key>"
#: Words of a [config] key that name a secret wherever they stand (``db_password``).
_SECRET_WORDS = {"password", "passwd", "passphrase", "secret", "secrets", "credential",
                 "credentials", "apikey", "apitoken", "accesstoken", "authtoken",
                 "secretkey", "accesskey", "privatekey"}
#: ``<word>_key`` pairs that name a secret (``api_key``, ``access_key``…).
_KEY_WORDS = {"api", "access", "secret", "private", "auth", "license", "signing",
              "encryption", "client", "account", "service"}
#: ``<word>_token`` of a tokenizer (``pad_token = "<pad>"``), not a credential.
_TOKENIZER_WORDS = {"pad", "bos", "eos", "unk", "sep", "cls", "mask", "start", "end", "stop",
                    "special", "additional", "max", "min", "num", "image", "vision", "audio",
                    "video", "eot", "sot", "begin", "new", "first", "last", "decoder"}
#: A key ending in one of these names where a secret is, not the secret
#: (``api_key_file``, ``token_env``, ``secret_name``).
_POINTER_WORDS = {"file", "path", "dir", "env", "var", "name", "id", "length", "len",
                  "size", "count", "type", "kind"}


def _key_words(name: str) -> List[str]:
    """``"wandb.apiKey"`` → ``["wandb", "api", "key"]``."""
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", str(name))
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", spaced).lower()
    return [w for w in re.split(r"[^a-z0-9]+", spaced) if w]


def is_credential_key(name: str) -> bool:
    """Whether a ``[config]`` key names a secret: ``api_key``, ``hf_token``, ``apiKey``,
    ``db_password``, ``client_secret``… but not ``tokenizer``, ``max_tokens``,
    ``pad_token`` or ``api_key_file`` (where the secret is: the way to give one).

    >>> [n for n in ("api_key", "apiKey", "hf_token", "token", "db_password", "tokenizer",
    ...              "pad_token", "max_new_tokens", "api_key_file", "WANDB_API_KEY")
    ...  if is_credential_key(n)]
    ['api_key', 'apiKey', 'hf_token', 'token', 'db_password', 'WANDB_API_KEY']
    """
    words = _key_words(name)
    if not words or words[-1] in _POINTER_WORDS:
        return False
    if any(w in _SECRET_WORDS for w in words):
        return True
    if any(a in _KEY_WORDS and b == "key" for a, b in zip(words, words[1:])):
        return True
    return words[-1] == "token" and (len(words) == 1 or words[-2] not in _TOKENIZER_WORDS)


def _holds_text(value: Any) -> bool:
    """A non-empty string, or a table/array holding one (numbers and booleans are no
    secrets: ``use_auth_token = true``)."""
    if isinstance(value, str):
        return value != "" and value != REDACTED
    if isinstance(value, dict):
        return any(_holds_text(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_text(v) for v in value)
    return False


def _credential_paths(value: Any, path: str = "") -> List[str]:
    """The dotted paths (under ``path``) of credential-looking keys holding text."""
    out: List[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            key = f"{path}.{k}" if path else str(k)
            if is_credential_key(str(k)) and _holds_text(v):
                out.append(key)
            else:
                out.extend(_credential_paths(v, key))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            out.extend(_credential_paths(v, f"{path}[{i}]"))
    return out


def redact_config(value: Any) -> Any:
    """``value`` (a train_loop_config) with the text under each credential-looking key
    replaced by :data:`REDACTED`: what spec.toml and the batch script hold."""
    if isinstance(value, Mapping):
        return {k: REDACTED if is_credential_key(str(k)) and _holds_text(v)
                else redact_config(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_config(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_config(v) for v in value)
    return value


def _check_config(ctx: Ctx, table: Any) -> None:
    """``[config]`` of a job file or site config (and ``--set config.x=...``): a
    credential-looking key holding text is refused, as in ``[env]``: it would be copied
    into spec.toml and the batch script. (A train_loop_config given in Python is redacted
    there instead, :func:`redact_config`: Ray programs pass one freely.)"""
    if not isinstance(table, Mapping):
        return  # spec_from_dict says what a [config] section must be
    for path in _credential_paths(table):
        leaf = re.split(r"[.\[]", path)[-1]
        var = "_".join(_key_words(re.sub(r"\[\d+\]", "", path))).upper()
        raise ctx.error(
            f"config.{path}", "looks like a credential: it would be written into spec.toml "
            "and the batch script (and shown in their comments)",
            f'read it in the training function instead: os.environ["{var}"] (export {var} '
            "in the shell that submits the job; Slurm passes its environment on), or give "
            f'the path of a file only you can read (mode 0600): {leaf}_file = "~/.{leaf}"')


def _check_datasets(ctx: Ctx, table: Any, base_for: Callable[[str], str]) -> Dict[str, Any]:
    """``[datasets]``: name → "file.h5:col1,col2" or a table of options."""
    if not isinstance(table, dict):
        raise ctx.error("datasets", f"expected a table ([datasets] section), got {_show(table)} "
                        f"({_kind(table)})")
    if not table:
        return {}
    from .data import as_dataset

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


def _check_data_config(ctx: Ctx, table: Dict[str, Any], datasets: Dict[str, Any]) -> DataConfig:
    """``[data]``: ``datasets_to_split`` names datasets of ``[datasets]`` (or is "all")."""
    key = "data.datasets_to_split"
    try:
        config = DataConfig(table.get("datasets_to_split", "all"))
        config.check_names(list(datasets), key=key)
    except ConfigError as e:
        raise ctx.error(key, e.message.split(": ", 1)[1], e.hint) from None
    return config


def _check_callbacks(ctx: Ctx, table: Dict[str, Any]) -> List[Any]:
    if not table:
        return []
    from .callbacks import from_toml

    try:
        return from_toml(table)
    except ConfigError as e:
        raise ctx.reraise(e) from None


def _unknown_key(ctx: Ctx, section: str, key: str) -> ConfigError:
    valid = SECTIONS[section] or {}
    hint = _did_you_mean(key, valid)
    if hint is None:
        homes = [s for s, keys in SECTIONS.items() if keys and key in keys and s != section]
        if homes:
            hint = f"{key!r} belongs in [{homes[0]}]"
        else:
            hint = "valid keys: " + ", ".join(valid)
    return ctx.error(f"{section}.{key}", f"unknown key in [{section}]", hint)


def _unknown_section(ctx: Ctx, name: str) -> ConfigError:
    homes = [s for s, keys in SECTIONS.items() if keys and name in keys]
    hint = f"{name!r} belongs in [{homes[0]}]" if homes else _did_you_mean(name, list(SECTIONS))
    if hint is None:
        hint = "valid sections: " + ", ".join(f"[{s}]" for s in SECTIONS)
    return ctx.error(name, "unknown section", hint)


def _check_value(ctx: Ctx, key: str, kind: str, value: Any) -> Any:
    """Type-check one value of a fixed-schema section; return it (copied if a table)."""
    if not _matches(kind, value):
        hint = None
        if kind == "str" and not isinstance(value, (dict, list)):
            hint = f"quote it: {key.split('.')[-1]} = \"{value}\""
        elif kind == "split":
            hint = ('e.g. datasets_to_split = ["train"]: "train" is split over the ranks, '
                    "the other datasets are read whole by every rank")
        raise ctx.error(key, f"expected {EXPECTED[kind]}, got {_show(value)} ({_kind(value)})",
                        hint)
    if kind in ("walltime", "memory"):
        from .units import UnitError, parse_memory, parse_walltime

        try:
            (parse_walltime if kind == "walltime" else parse_memory)(value)
        except UnitError as e:
            raise ctx.error(key, str(e), e.hint) from None
        return value
    if kind == "split" and value == "all":
        return value
    if kind in ("strlist", "split"):
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise ctx.error(f"{key}[{i}]", f"expected a string, got {_show(item)} "
                                f"({_kind(item)})")
        return list(value)
    if kind == "callback":
        return copy.deepcopy(value)
    if kind == "directives":
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
    if kind == "space":
        from .search_space import from_tables

        from_tables(value, key, ctx.error)  # checks every domain; the tables stay as given
        return copy.deepcopy(value)
    if kind == "tune":
        # the table's shape here; its type and options are checked by building the
        # scheduler or search algorithm (hpctrain.tune.tuner.control_from_spec), which
        # `hpctrain validate`, `hpctrain sweep` and the Tuner do before anything is made
        if not isinstance(value.get("type"), str):
            raise ctx.error(f"{key}.type", f"expected the name of a {key.split('.')[-1]} "
                            f"(a string), got {_show(value.get('type'))}",
                            f'e.g. [{key}] type = "{"asha" if key.endswith("scheduler") else "optuna"}"')
        return copy.deepcopy(value)
    if kind == "thresholds":
        for name, number in value.items():
            if isinstance(number, bool) or not isinstance(number, (int, float)):
                raise ctx.error(f"{key}.{name}", f"expected a number, got {_show(number)} "
                                f"({_kind(number)})", "e.g. stop = {training_iteration = 20}")
        return dict(value)
    if kind == "numbers":
        out: Dict[str, Any] = {}
        for name, number in value.items():
            if isinstance(number, bool) or not isinstance(number, (int, float)) or number < 0:
                raise ctx.error(f"{key}.{name}", "expected a number ≥ 0, got "
                                f"{_show(number)} ({_kind(number)})")
            out[name] = number
        return out
    choices = _CHOICES.get(key)
    if choices is not None and value not in choices:
        raise ctx.error(key, "expected one of " + ", ".join(f'"{c}"' for c in choices)
                        + f", got {_show(value)}", _did_you_mean(value, choices))
    minimum = _MINIMUM.get(key)
    if minimum is not None and value < minimum:
        raise ctx.error(key, f"expected an integer ≥ {minimum}, got {value}")
    return value


def _check_table(ctx: Ctx, section: str, table: Any) -> Dict[str, Any]:
    """Validate one fixed-schema section; return ``{key: value}`` as given."""
    if not isinstance(table, dict):
        raise ctx.error(section, f"expected a table ([{section}] section), got "
                        f"{_show(table)} ({_kind(table)})")
    schema = SECTIONS[section] or {}
    out: Dict[str, Any] = {}
    for key, value in table.items():
        if key not in schema:
            raise _unknown_key(ctx, section, key)
        out[key] = _check_value(ctx, f"{section}.{key}", schema[key], value)
    return out


def _expand_path(ctx: Ctx, key: str, value: str, base_dir: str) -> str:
    """Expand ``~`` and ``$VARS``; make a relative path absolute against ``base_dir``."""
    expanded = os.path.expandvars(os.path.expanduser(value))
    missing = re.search(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expanded)
    if missing:
        raise ctx.error(key, f"environment variable ${missing.group(1)} is not set "
                        f"(in {_show(value)})")
    if "://" in expanded:
        return expanded
    return os.path.abspath(os.path.join(base_dir, expanded))


# --------------------------------------------------------------------------- entry point
_MODULE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclass
class EntryPoint:
    """The training function: ``"pkg.mod:func"`` or ``"path/to/file.py:func"``.

    Exactly one of ``module`` and ``path`` is set; ``path`` is absolute.
    """

    module: Optional[str]
    path: Optional[str]
    function: str
    key: str = field(default="job.entrypoint", compare=False, repr=False)
    file: Optional[str] = field(default=None, compare=False, repr=False)
    base_dir: Optional[str] = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(cls, text: str, *, base_dir: str, key: str = "job.entrypoint",
              file: Optional[str] = None) -> "EntryPoint":
        """Parse ``"X:Y"``. ``X`` ending in ``.py`` (or holding a ``/``) is a file, resolved
        against ``base_dir`` and required to exist; otherwise it is a dotted module name."""
        usage = 'expected "module:function" or "file.py:function"'
        if not isinstance(text, str):
            raise ConfigError(f"{key}: {usage}, got {_show(text)} ({_kind(text)})", file=file)
        target, sep, function = text.strip().rpartition(":")
        if not sep or not target:
            raise ConfigError(f"{key}: {usage}, got {_show(text)}", file=file,
                              hint='name the function to call, e.g. "train.py:train_func"')
        if not function.isidentifier() or keyword.iskeyword(function):
            raise ConfigError(f'{key}: expected a Python function name after ":", got '
                              f"{_show(function)} (in {_show(text)})", file=file)
        if target.endswith(".py") or "/" in target or os.sep in target:
            if not target.endswith(".py"):
                raise ConfigError(f"{key}: expected a .py file before \":\", got {_show(target)}",
                                  file=file)
            path = os.path.abspath(os.path.join(base_dir, os.path.expanduser(target)))
            if not os.path.isfile(path):
                raise ConfigError(f"{key}: file not found: {path} (from {_show(text)})",
                                  file=file,
                                  hint="relative paths are resolved against the job file's "
                                       "directory")
            return cls(None, path, function, key=key, file=file, base_dir=base_dir)
        if not _MODULE_RE.match(target):
            raise ConfigError(f'{key}: expected a dotted module name (like "mypkg.train") '
                              f'or a .py file before ":", got {_show(target)}', file=file)
        return cls(target, None, function, key=key, file=file,
                   base_dir=os.path.abspath(base_dir))

    def __str__(self) -> str:
        return f"{self.module if self.path is None else self.path}:{self.function}"

    def _error(self, message: str, hint: Optional[str] = None) -> ConfigError:
        return ConfigError(f"{self.key}: {message}", file=self.file, hint=hint)

    def _import_module(self) -> Any:
        assert self.module is not None
        try:
            return importlib.import_module(self.module)
        except ModuleNotFoundError as e:
            ours = e.name is not None and (self.module == e.name
                                           or self.module.startswith(e.name + "."))
            if not ours:
                raise  # the module itself imports something missing: the user's traceback
            # Console scripts do not put the working directory on sys.path; try the job
            # file's directory before giving up.
            if self.base_dir and self.base_dir not in sys.path:
                sys.path.insert(0, self.base_dir)
                importlib.invalidate_caches()
                return self._import_module()
            raise self._error(f"cannot import module {self.module!r}: {e}",
                              "is the package installed, or on PYTHONPATH?") from e

    def _load_file(self) -> Any:
        assert self.path is not None
        if not os.path.isfile(self.path):
            raise self._error(f"file not found: {self.path}")
        digest = hashlib.sha1(self.path.encode()).hexdigest()[:12]
        stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(self.path))[0])
        name = f"_hpctrain_entry_{stem}_{digest}"
        if name in sys.modules:
            return sys.modules[name]
        directory = os.path.dirname(self.path)
        if directory not in sys.path:
            sys.path.insert(0, directory)  # so that sibling imports work
        spec = importlib.util.spec_from_file_location(name, self.path)
        if spec is None or spec.loader is None:
            raise self._error(f"cannot load {self.path} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return module

    def check(self) -> None:
        """Check, without running any of the user's code, that the function exists:
        parse the file (or the module's source) and look for a top-level definition of
        that name. Lets ``hpctrain run``/``validate`` refuse a bad entry point before
        anything starts, without importing torch in the driver."""
        import ast

        if self.path is not None:
            source_file = self.path
        else:
            try:
                found = importlib.util.find_spec(self.module)
            except (ImportError, ValueError):
                found = None
            if found is None and self.base_dir:
                if self.base_dir not in sys.path:
                    sys.path.insert(0, self.base_dir)
                importlib.invalidate_caches()
                try:
                    found = importlib.util.find_spec(self.module)
                except (ImportError, ValueError):
                    found = None
            if found is None:
                raise self._error(f"cannot find module {self.module!r}",
                                  "is the package installed, or on PYTHONPATH?")
            source_file = found.origin
            if not source_file or not source_file.endswith(".py"):
                return  # compiled or namespace module: resolve() will tell
        try:
            with open(source_file, encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename=source_file)
        except SyntaxError as e:
            raise self._error(f"{source_file} does not parse: {e.msg} (line {e.lineno})") from None
        names = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif not isinstance(node, (ast.Expr, ast.Pass)):
                return  # conditional definitions etc.: leave it to resolve()
        if self.function not in names:
            where = self.path if self.path is not None else self.module
            raise self._error(f"{where} defines no function {self.function!r}",
                              _did_you_mean(self.function, sorted(names)))

    def resolve(self) -> Callable[..., Any]:
        """Import the module (or load the file) and return the function."""
        module = self._load_file() if self.path is not None else self._import_module()
        where = self.path if self.path is not None else self.module
        try:
            obj = getattr(module, self.function)
        except AttributeError:
            names = [n for n in dir(module)
                     if not n.startswith("_") and callable(getattr(module, n, None))]
            raise self._error(f"{where} has no function {self.function!r}",
                              _did_you_mean(self.function, names)) from None
        if not callable(obj):
            raise self._error(f"{self} is not callable (found {_show(obj)}, "
                              f"{type(obj).__name__})")
        return obj


# --------------------------------------------------------------------------- job spec
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
        _check_value(ctx, "job.backend", "str", self.backend)
        self.backend_options = _check_table(ctx, self.backend, self.backend_options or {})
        if self.config is None:
            self.config = {}
        if isinstance(self.scheduler, str):
            self.scheduler = SchedulerConfig(kind=self.scheduler)
        self.env = _check_env(ctx, self.env or {})
        var = getattr(self.scheduler, "gpu_binding_var", None)
        if not isinstance(var, str) or not _ENV_NAME.fullmatch(var):
            raise Ctx(self.source, self.origins).error(
                "scheduler.gpu_binding_var", f"expected an environment variable name (letters, "
                f"digits and _, not starting with a digit), got {_show(var)}",
                'e.g. "CUDA_VISIBLE_DEVICES" (NVIDIA GPUs) or "ROCR_VISIBLE_DEVICES" (AMD)')

    def to_toml_dict(self) -> Dict[str, Any]:
        """The resolved spec as TOML sections; ``None`` omitted, objects as their repr."""
        s, r = self.scaling, self.run
        ck, fl = r.checkpoint_config, r.failure_config
        data: Dict[str, Any] = {
            "job": {"entrypoint": None if self.entrypoint is None else str(self.entrypoint),
                    "backend": self.backend,
                    "entrypoint_dir": getattr(self.entrypoint, "base_dir", None)
                    if getattr(self.entrypoint, "module", None) else None},
            "scaling": {"num_workers": s.num_workers, "use_gpu": s.use_gpu,
                        "num_nodes": s.num_nodes, "workers_per_node": s.workers_per_node,
                        "resources_per_worker": s.resources_per_worker},
            "run": {"name": r.name, "storage_path": r.storage_path, "verbose": r.verbose,
                    "share": r.share},
            "checkpoint": {"num_to_keep": ck.num_to_keep,
                           "checkpoint_score_attribute": ck.checkpoint_score_attribute,
                           "checkpoint_score_order": ck.checkpoint_score_order,
                           "sync_to_disk": ck.sync_to_disk,
                           # only when set: a spec.toml of an older run compares equal
                           "checkpoint_upload_mode": None if ck.upload_mode_name == "sync"
                           else ck.upload_mode_name,
                           "checkpoint_frequency": ck.checkpoint_frequency},
            "failure": {"max_failures": fl.max_failures, "warning_signal": fl.warning_signal,
                        "warning_time": f"{fl.warning_s}s", "requeue": fl.requeue,
                        "max_requeues": fl.max_requeues,
                        "mtbi": None if fl.mtbi is None else f"{fl.mtbi_s}s"},
            "scheduler": {k: v for k, v in vars(self.scheduler).items()
                          if v not in (None, [], {}) and v != getattr(_SCHED_DEFAULTS, k, None)},
            "setup": {k: v for k, v in vars(self.setup).items() if v},
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
        if self.scaling.mem_per_worker is not None:
            data["scaling"]["mem_per_worker"] = self.scaling.mem_per_worker
        for key in ("cpus_per_worker", "gpus_per_worker", "accelerator_type"):
            data["scaling"][key] = getattr(self.scaling, key)
        out = _tomlable(data)
        if self.site:
            out = {"site": self.site, **out}
        if r.callbacks:
            from .callbacks import to_toml as callbacks_toml

            out["callbacks"] = callbacks_toml(r.callbacks)
        for name in ("config", "env", "setup", "scheduler", "datasets", "data", "callbacks",
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


# --------------------------------------------------------------------------- loading
def _build(ctx: Ctx, cls: Any, **kwargs: Any) -> Any:
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ctx.reraise(e) from e


def _check_spec_format(ctx: Ctx, value: int) -> None:
    """``format`` (what a run directory's spec.toml records): 1 up to the version this
    hpctrain writes; a newer one is refused."""
    from ._internal.formats import SPEC_FORMAT, newer_format

    if value < 1:
        raise ctx.error("format", f"expected a format version (1, 2…), got {_show(value)}",
                        "leave it out: hpctrain writes it into a run directory's spec.toml")
    if value > SPEC_FORMAT:
        raise newer_format(ctx.where("format") or "the job spec", value, SPEC_FORMAT,
                           "the spec")


def spec_from_dict(data: Mapping[str, Any], *, file: Optional[str] = None, base_dir: str = ".",
                   origins: Optional[Mapping[str, str]] = None) -> JobSpec:
    """Validate a parsed TOML document and build the :class:`JobSpec`.

    ``base_dir`` resolves relative paths (entry point file, storage path); ``origins``
    maps dotted keys set by overrides to the override text, so errors name the override
    (and its relative paths resolve against the working directory instead).
    """
    ctx = Ctx(file, origins)
    if not isinstance(data, Mapping):
        raise ConfigError(f"expected a table of sections, got {_kind(data)}", file=file)
    for name, value in data.items():
        if name in TOP_LEVEL:
            _check_value(ctx, name, TOP_LEVEL[name], value)
            if name == "format":
                _check_spec_format(ctx, value)
            continue
        if name not in SECTIONS:
            raise _unknown_section(ctx, name)
        if not isinstance(value, dict):
            raise ctx.error(name, f"expected a table ([{name}] section), got "
                            f"{_show(value)} ({_kind(value)})",
                            "sections hold key = value lines under a [name] header")

    def base_for(key: str) -> str:
        where = ctx.where(key)
        if ctx.override_for(key) is not None:
            return os.getcwd()
        if where and where != file and os.path.isfile(where):
            return os.path.dirname(os.path.abspath(where))  # a site config's own directory
        return base_dir

    job = _check_table(ctx, "job", data.get("job", {}))
    backend_tables = {b: _check_table(ctx, b, data[b]) for b in BACKENDS if b in data}
    entrypoint = None
    if "entrypoint" in job:
        entry_base = base_for("job.entrypoint")
        if "entrypoint_dir" in job:
            entry_base = _expand_path(ctx, "job.entrypoint_dir", job["entrypoint_dir"],
                                      base_for("job.entrypoint_dir"))
        entrypoint = EntryPoint.parse(job["entrypoint"], base_dir=entry_base,
                                      file=ctx.where("job.entrypoint"))
    scaling = _build(ctx, ScalingConfig, **_check_table(ctx, "scaling", data.get("scaling", {})))
    checkpoint = _build(ctx, CheckpointConfig,
                        **_check_table(ctx, "checkpoint", data.get("checkpoint", {})))
    failure = _build(ctx, FailureConfig, **_check_table(ctx, "failure", data.get("failure", {})))
    run = _check_table(ctx, "run", data.get("run", {}))
    if "storage_path" in run:
        run["storage_path"] = _expand_path(ctx, "run.storage_path", run["storage_path"],
                                           base_for("run.storage_path"))
    callbacks = _check_callbacks(ctx, _check_table(ctx, "callbacks", data.get("callbacks", {})))
    run_config = _build(ctx, RunConfig, checkpoint_config=checkpoint, failure_config=failure,
                        callbacks=callbacks, **run)
    scheduler = _build(ctx, SchedulerConfig,
                       **_check_table(ctx, "scheduler", data.get("scheduler", {})))
    setup = _build(ctx, SetupConfig, **_check_table(ctx, "setup", data.get("setup", {})))
    sweep = _check_table(ctx, "sweep", data.get("sweep", {}))
    if ("metric" in sweep) != ("mode" in sweep):
        given, missing = ("metric", "mode") if "metric" in sweep else ("mode", "metric")
        raise ctx.error(f"sweep.{missing}", f"expected sweep.{missing} too, since sweep.{given}"
                        " is set (trials are ranked by a metric, \"min\" or \"max\")",
                        'e.g. metric = "loss" and mode = "min"')
    backend = job.get("backend", "torch")
    datasets = _check_datasets(ctx, data.get("datasets", {}), base_for)
    data_config = _check_data_config(ctx, _check_table(ctx, "data", data.get("data", {})),
                                     datasets)
    spec = _build(ctx, JobSpec, entrypoint=entrypoint, backend=backend, scaling=scaling,
                  run=run_config, config=copy.deepcopy(dict(data.get("config", {}))),
                  backend_options=backend_tables.get(backend, {}), scheduler=scheduler,
                  setup=setup, env=dict(data.get("env", {})), site=data.get("site"),
                  datasets=datasets, data_config=data_config,
                  sweep=sweep, source=file, origins=dict(ctx.origins))
    _check_script_values(ctx, data)  # after the keys' own checks, whose errors say more
    return spec


def load_job_spec(path: str, overrides: Sequence[str] = (), *, site: Optional[str] = None,
                  require_entrypoint: bool = True, check_limits: bool = True) -> JobSpec:
    """Read ``path`` (TOML), layer it, validate it.

    Layers, last wins: hpctrain's defaults < the site config (``site``, else the
    overrides' or the job file's ``site = "..."``, else ``$HPCTRAIN_SITE``, else the user
    config's ``site``) < the user config (account, storage path:
    :mod:`hpctrain.userconfig`) < the job file < ``overrides`` (``"section.key=value"``).
    Tables of options (``scheduler.directives``,
    ``scaling.resources_per_worker``, ``[env]``, ``[config]``) merge key by key; other
    values, arrays included, are replaced whole. With ``check_limits`` the request is
    checked against the site's limits.
    """
    path = os.fspath(path)
    data = _read_toml(path)
    origins: Dict[str, str] = {}
    over = _apply_overrides({}, overrides, origins, keep_deletes=True)
    user = load_user_defaults()
    site_name = site if site is not None else over.get("site", data.get("site"))
    site_file = ("command line (--site)" if site is not None else
                 origins.get("site", path))
    if site_name is None and "site" not in over and user.get("site"):
        site_name, site_file = user.get("site"), user.sources["site"]
    over.pop("site", None)
    data = {k: v for k, v in data.items() if k != "site"}
    site_key = "site"
    layers: List[tuple] = []
    site_config = None
    if site_name is not None:
        if not isinstance(site_name, str):
            raise ConfigError(f"site: expected a site name (a string), got {_show(site_name)}",
                              file=site_file, hint="`hpctrain sites` lists them")
        site_config = load_site(site_name, key=site_key, file=site_file)
        layers.append((site_config.layer, site_config.path))
    layers.extend(user.layer())
    layers.append((data, None))
    layers.append((over, "overrides"))
    merged = merge_layers(layers, origins, job_file=path)
    _prefer_later_layer(merged, origins, path)
    if site_name is not None:
        merged["site"] = site_name
    # (here, not in spec_from_dict: the spec embedded in the job.sh of a run started from
    # Python before credentials were redacted must still load when the job is requeued)
    _check_config(Ctx(path, origins), merged.get("config", {}))
    spec = spec_from_dict(merged, file=path, base_dir=os.path.dirname(os.path.abspath(path)),
                          origins=origins)
    spec.site_config = site_config
    if require_entrypoint and spec.entrypoint is None:
        raise ConfigError('job.entrypoint: missing; expected "module:function" or '
                          '"file.py:function"', file=Ctx(path, origins).where("job.entrypoint"),
                          hint='add  [job]  entrypoint = "train.py:train_func"')
    derive_nodes(spec)
    if check_limits:
        check_site_limits(spec)
    return spec


def load_site(name: str, *, key: str = "site", file: Optional[str] = None) -> Site:
    """The site config ``name`` (:func:`hpctrain.sites.load_site`), its settings checked on
    their own against the job spec's schema, so that a broken site config is blamed on
    itself (``<site file>: scheduler.queu: unknown key``)."""
    site = sites.load_site(name, key=key, file=file)
    _check_config(Ctx(site.path), site.layer.get("config", {}))
    spec_from_dict(site.layer, file=site.path, base_dir=os.path.dirname(site.path))
    return site


#: Pairs of keys that say the same thing; when both are set by different layers, the later
#: layer's wins (a job file's ``cpus_per_worker`` beats its site's resources_per_worker.CPU).
_SYNONYMS = [("scaling.cpus_per_worker", "scaling.resources_per_worker.CPU"),
             ("scaling.gpus_per_worker", "scaling.resources_per_worker.GPU")]


def _prefer_later_layer(merged: Dict[str, Any], origins: Mapping[str, str],
                        job_file: str) -> None:
    def rank(key: str) -> int:
        where = Ctx(job_file, origins).where(key)
        if where and where.startswith("override "):
            return 3
        return 2 if where == job_file else 1

    def lookup(key: str):
        node: Any = merged
        for part in key.split(".")[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        last = key.split(".")[-1]
        return (node, last) if isinstance(node, dict) and last in node else (None, last)

    for a, b in _SYNONYMS:
        (na, ka), (nb, kb) = lookup(a), lookup(b)
        if na is None or nb is None:
            continue
        ra, rb = rank(a), rank(b)
        if ra > rb:
            del nb[kb]
        elif rb > ra:
            del na[ka]
    _drop_other_schedulers_keys(merged, rank)


def _drop_other_schedulers_keys(merged: Dict[str, Any], rank: Callable[[str], int]) -> None:
    """A layer that chose the scheduler (``kind``) drops what a lower layer set for
    another one: a job file's ``kind = "pbs"`` over a Slurm site's ``partition``. A key of
    another scheduler set at the same layer as ``kind``, or above it, stays and is refused
    (:func:`hpctrain.config.check_scheduler_keys` names the scheduler that has it)."""
    sched = merged.get("scheduler")
    kind = sched.get("kind", "local") if isinstance(sched, dict) else None
    if not isinstance(kind, str) or kind not in _registry.SCHEDULERS or "kind" not in sched:
        return
    own = toml_keys(scheduler_config_class(kind))
    for key in [k for k in sched if k not in own and k in SECTIONS["scheduler"]]:
        if rank(f"scheduler.{key}") < rank("scheduler.kind"):
            del sched[key]


def _without_deletes(value: Any) -> Any:
    """A copy of ``value`` without delete markers (an override ``key=`` that removes a
    key no lower layer set)."""
    if isinstance(value, dict):
        return {k: _without_deletes(v) for k, v in value.items() if v is not _DELETE}
    return copy.deepcopy(value)


def merge_layers(layers: Sequence[tuple], origins: MutableMapping[str, str],
                  job_file: Optional[str] = None) -> Dict[str, Any]:
    """Merge ``(data, where)`` layers, last wins; record in ``origins`` where each key set
    by a site layer came from (``where=None``: the job file; ``"overrides"``: origins
    already hold the override texts)."""
    merged: Dict[str, Any] = {}

    def record(key: str, where: Optional[str]) -> None:
        if where is None:
            for k in [k for k in origins if k == key or k.startswith(key + ".")]:
                if not origins[k].startswith("override "):
                    del origins[k]
            if job_file is not None and not origins.get(key, "").startswith("override "):
                origins[key] = job_file  # beats a site's origin recorded for a parent table
        elif where != "overrides" and not origins.get(key, "").startswith("override "):
            origins[key] = where

    for data, where in layers:
        for section, table in data.items():
            if not isinstance(table, dict) or section not in SECTIONS:
                merged[section] = _without_deletes(table)
                record(section, where)
                continue
            target = merged.setdefault(section, {})
            if not isinstance(target, dict):
                merged[section] = target = {}
            schema = SECTIONS[section]
            for key, value in table.items():
                dotted = f"{section}.{key}"
                kind = schema.get(key) if schema is not None else None
                if value is _DELETE:
                    target.pop(key, None)
                    record(dotted, where)
                elif isinstance(value, dict) and isinstance(target.get(key), dict) and (
                        schema is None or kind in _MERGED_TABLES):
                    for sub, item in value.items():
                        if item is _DELETE:
                            target[key].pop(sub, None)
                        else:
                            target[key][sub] = _without_deletes(item)
                        record(f"{dotted}.{sub}", where)
                else:
                    target[key] = _without_deletes(value)
                    record(dotted, where)
    return merged


# --------------------------------------------------------------------------- overrides
_DELETE = object()


def _override_key(text: str, raw_key: str) -> List[str]:
    where = f"override {text!r}"
    if not raw_key:
        raise ConfigError("empty key; expected section.key=value, e.g. scaling.num_workers=8",
                          file=where)
    try:
        node: Any = _loads_toml(f"{raw_key} = 0", file=where)
    except tomllib.TOMLDecodeError:
        raise ConfigError(f"malformed key {raw_key!r}; expected section.key=value",
                          file=where) from None
    path: List[str] = []
    while isinstance(node, dict) and len(node) == 1:
        (name, node), = node.items()
        path.append(name)
    if node != 0 or not path:
        raise ConfigError(f"malformed key {raw_key!r}; expected section.key=value", file=where)
    return path


def _override_value(text: str, raw: str) -> Any:
    if raw == "":
        return _DELETE
    try:
        return _loads_toml(f"v = {raw}", file=f"override {text!r}")["v"]
    except tomllib.TOMLDecodeError:
        if raw[:1] in "[{\"'":
            raise ConfigError(f"value {raw} is not a valid TOML value",
                              file=f"override {text!r}",
                              hint='quote strings: run.name="x"; arrays: config.sizes=[1, 2]'
                              ) from None
        return raw  # a bare word: a string


def _apply_overrides(data: Mapping[str, Any], overrides: Sequence[str],
                     origins: MutableMapping[str, str], *,
                     keep_deletes: bool = False) -> Dict[str, Any]:
    result = copy.deepcopy(dict(data))
    for text in overrides:
        where = f"override {text!r}"
        if not isinstance(text, str) or "=" not in text:
            raise ConfigError("expected section.key=value, e.g. scaling.num_workers=8",
                              file=where)
        raw_key, _, raw_value = text.partition("=")
        path = _override_key(text, raw_key.strip())
        ctx = Ctx(where)
        section, dotted = path[0], ".".join(path)
        if path == ["site"]:
            value = _override_value(text, raw_value.strip())
            if value is _DELETE:
                result["site"] = None
            else:
                result["site"] = raw_value.strip() if not isinstance(value, str) else value
            origins["site"] = where
            continue
        if section not in SECTIONS:
            raise _unknown_section(ctx, section)
        if len(path) < 2:
            raise ctx.error(section, "expected section.key=value, not a whole section")
        value = _override_value(text, raw_value.strip())
        schema = SECTIONS[section]
        if schema is not None:
            key = path[1]
            if key not in schema:
                raise _unknown_key(ctx, section, key)
            if len(path) > (3 if schema[key] in _MERGED_TABLES else 2):
                raise ctx.error(dotted, f"{section}.{key} is not a table")
            if schema[key] in ("str", "walltime", "memory") and len(path) == 2 and isinstance(
                    value, (bool, int, float, _dt.date, _dt.time)):
                value = raw_value.strip()  # run.name=2024 means the string "2024"
        node: Any = result
        for i, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ctx.error(".".join(path[: i + 1]),
                                f"cannot set {dotted}: {_show(child)} is not a table")
            node = child
        if value is _DELETE and not keep_deletes:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
        origins[dotted] = where
    return result


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> Dict[str, Any]:
    """Return a copy of ``data`` with each ``"section.key=value"`` set.

    The value is read as a TOML value (``8``, ``true``, ``0.1``, ``[1, 2]``, ``"x"``); a
    bare word is a string, and an empty value (``run.name=``) removes the key so the
    default applies.
    """
    return _apply_overrides(data, overrides, {})
