"""The job file's JSON Schema, for editors.

:func:`json_schema` turns the declarations :func:`hpctrain.load_job_spec` checks job files
with (:data:`hpctrain.spec.KEYS`: each config class's fields, and the sections declared in
:mod:`hpctrain.spec`) into a JSON Schema (draft 2020-12): the sections and their keys,
types, the allowed values, the walltime and memory patterns, and a description of each.
``hpctrain schema -o hpctrain.schema.json`` writes it; an editor that reads JSON Schema for
TOML (Taplo, VS Code's "Even Better TOML") then completes keys and flags mistakes while
typing. ``load_job_spec`` stays the judge: it also checks what a schema cannot say (the
entry point exists, num_workers divides over num_nodes, the site's limits), and
``hpctrain validate`` renders the batch script as ``hpctrain render`` would.

>>> schema = json_schema()
>>> schema["properties"]["scaling"]["properties"]["num_workers"]["minimum"]
1
>>> "slurm" in schema["properties"]["scheduler"]["properties"]["kind"]["enum"]
True
"""
from __future__ import annotations

import json
from typing import Any, Dict, Optional

from .config import TomlKey, scheduler_config_class, toml_keys
from .common.registry import SCHEDULERS
from .spec import ENV_NAME_PATTERN, EXPECTED, KEYS, TOP_LEVEL_KEYS
from .units import MEMORY_PATTERN, WALLTIME_PATTERN

__all__ = ["SCHEMA_ID", "json_schema", "key_schema", "schema_text"]

#: The schema's ``$id`` (a name, not a URL anything is fetched from).
SCHEMA_ID = "urn:hpctrain:job-file"
_DRAFT = "https://json-schema.org/draft/2020-12/schema"

_NUMBER = {"type": "number"}

#: JSON Schema of each value kind (hpctrain.spec.EXPECTED says them in words).
_KINDS: Dict[str, Dict[str, Any]] = {
    "int": {"type": "integer"},
    "number": {"type": "number"},
    "bool": {"type": "boolean"},
    "str": {"type": "string"},
    "numbers": {"type": "object", "additionalProperties": {"type": "number", "minimum": 0}},
    "strlist": {"type": "array", "items": {"type": "string"}},
    "directives": {"type": "object", "additionalProperties": {
        "anyOf": [{"type": "string"}, {"type": "integer"}, {"const": True}]}},
    "space": {"type": "object"},
    "binds": {"type": "object", "additionalProperties": {
        "anyOf": [{"type": "string"}, {"const": True}]}},
    "walltime": {"type": "string", "pattern": WALLTIME_PATTERN},
    "callback": {"type": ["boolean", "object"]},
    "memory": {"type": "string", "pattern": MEMORY_PATTERN},
    "split": {"anyOf": [{"const": "all"}, {"type": "array", "items": {"type": "string"}}]},
    "tune": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}},
    "thresholds": {"type": "object", "additionalProperties": _NUMBER},
    "frequency": {"anyOf": [{"const": "auto"}, {"type": "integer", "minimum": 0}]},
}

#: The free-form sections.
_FREE: Dict[str, Dict[str, Any]] = {
    "env": {"description": "Environment variables exported in the batch script (and for "
                           "each rank): NAME = \"value\"; \"$VAR\" references expand there.",
            "type": "object", "propertyNames": {"pattern": ENV_NAME_PATTERN},
            "additionalProperties": {"type": "string"}},
    "config": {"description": "The training function's config (train_loop_config): any "
                              "keys and values.",
               "type": "object"},
    "datasets": {"description": "The datasets the ranks read (split over them, unless [data] "
                                "says otherwise): name = \"file.h5:col1,col2\", "
                                "\"data/train.parquet:col1,col2\" (a Parquet file or a "
                                "directory of them) or a table of options.",
                 "type": "object", "additionalProperties": {"type": ["string", "object"]}},
}

_SECTION_DOCS = {
    "job": "The training function and its framework.",
    "scaling": "How many workers, and what each one gets (ScalingConfig).",
    "run": "The run's name and where its directory goes (RunConfig).",
    "checkpoint": "Which checkpoints are kept, and how they are committed (CheckpointConfig).",
    "failure": "Restarts, the warning before the time limit, requeues (FailureConfig).",
    "scheduler": "The batch system, the allocation request and the launcher "
                 "(SchedulerConfig).",
    "setup": "Shell set-up before training in the batch job (SetupConfig).",
    "data": "Which datasets are split over the ranks (DataConfig).",
    "callbacks": "Tracking callbacks: name = true, false or a table of options.",
    "sweep": "A hyperparameter sweep (`hpctrain sweep`): param_space overlays [config] per "
             "trial.",
}
#: What a section needs besides its keys' own schemas.
_SECTION_RULES = {
    "sweep": {"dependentRequired": {"metric": ["mode"], "mode": ["metric"]}},
}


def _scheduler_rules() -> Dict[str, Any]:
    """``[scheduler]``: each scheduler takes the shared keys and its own options only (a
    ``queue`` with ``kind = "slurm"`` is flagged); without ``kind`` (a site config may set
    it) any scheduler's are allowed."""
    return {"allOf": [
        {"if": {"required": ["kind"], "properties": {"kind": {"const": kind}}},
         "then": {"propertyNames": {"enum": list(toml_keys(scheduler_config_class(kind)))}}}
        for kind in SCHEDULERS]}


def key_schema(key: TomlKey) -> Dict[str, Any]:
    """The JSON Schema of one key: its kind's, narrowed by its choices (``enum``) or its
    own schema, and its minimum; its doc and the expected value as ``description``."""
    if key.kind not in _KINDS:  # a kind the spec knows but the schema does not
        raise KeyError(f"no JSON Schema for the value kind {key.kind!r}")
    out: Dict[str, Any] = {"description": (f"{key.doc} " if key.doc else "")
                           + f"Expected: {EXPECTED[key.kind]}."}
    out.update(json.loads(json.dumps(_KINDS[key.kind])))  # a copy
    if key.choices is not None and not (key.schema and "anyOf" in key.schema):
        out["enum"] = list(key.choices)
    out.update(key.schema or {})
    if key.minimum is not None:
        out["minimum"] = key.minimum
    return out


def _section_schema(name: str, keys: Optional[Dict[str, TomlKey]]) -> Dict[str, Any]:
    if keys is None:
        return dict(_FREE[name])
    doc = _SECTION_DOCS.get(name, f"Options of the {name} backend (when job.backend = "
                                  f"\"{name}\").")
    return {"description": doc, "type": "object",
            "properties": {key: key_schema(k) for key, k in keys.items()},
            "additionalProperties": False, **_SECTION_RULES.get(name, {}),
            **(_scheduler_rules() if name == "scheduler" else {})}


def json_schema() -> Dict[str, Any]:
    """The job file's JSON Schema (draft 2020-12), from the declarations the job spec is
    checked with: unknown sections and keys are refused (``additionalProperties: false``),
    each key has its type, allowed values, pattern or minimum, and a description."""
    properties: Dict[str, Any] = {name: key_schema(k) for name, k in TOP_LEVEL_KEYS.items()}
    properties.update({name: _section_schema(name, keys) for name, keys in KEYS.items()})
    return {
        "$schema": _DRAFT,
        "$id": SCHEMA_ID,
        "title": "hpctrain job file",
        "description": "A job file for hpctrain (`hpctrain run|validate|render|submit "
                       "job.toml`). `hpctrain validate` checks what a schema cannot: the "
                       "entry point, the site's limits, the batch script.",
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }


def schema_text() -> str:
    """:func:`json_schema` as indented JSON text (what ``hpctrain schema`` writes)."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"
