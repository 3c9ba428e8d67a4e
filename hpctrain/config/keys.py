"""How a config class declares the keys of its job-file section: :class:`TomlKey`, set on a
dataclass field with :func:`toml` (or :func:`python_only` for a field no job file sets),
read back with :func:`toml_keys`. :mod:`hpctrain.spec` checks job files with these
declarations and :mod:`hpctrain.schema` exports them as JSON Schema.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple


@dataclass(frozen=True)
class TomlKey:
    """How one key of a job file's section is read; declared once, next to the field it
    sets (``field(metadata=toml("int", ...))``). :mod:`hpctrain.spec` checks job files
    with it and :mod:`hpctrain.schema` exports it as JSON Schema.

    * ``kind``: the value kind (``"int"``, ``"str"``, ``"walltime"``…; the list is
      ``hpctrain.spec.EXPECTED``).
    * ``doc``: one line for people (the schema's description, editor tooltips).
    * ``choices``: the allowed values; ``minimum``: the smallest integer.
    * ``own_check``: the class checks ``choices``/``minimum`` itself, with its own
      message (and perhaps more spellings); the job spec does not check them first.
    * ``schema``: more JSON Schema for the key (a ``pattern`` the class checks too), or
      what replaces the ``enum`` of ``choices`` (a value the class accepts in more
      spellings than ``choices`` lists).
    * ``aka``: what other batch systems call this option (Slurm's ``partition`` is PBS's
      and LSF's ``queue``): a ``queue`` given to Slurm is refused with "Slurm calls it
      partition" (:func:`hpctrain.config.scheduler.check_scheduler_keys`).
    """

    kind: str
    doc: str = ""
    choices: Optional[Sequence[Any]] = None
    minimum: Optional[int] = None
    own_check: bool = False
    schema: Optional[Mapping[str, Any]] = None
    aka: Tuple[str, ...] = ()


def toml(kind: str, doc: str = "", **options: Any) -> Dict[str, Any]:
    """A field's metadata: the TOML key of the same name, of ``kind`` (:class:`TomlKey`)."""
    return {"toml": TomlKey(kind, doc, **options)}


def python_only(why: str) -> Dict[str, Any]:
    """A field's metadata: not a key of the field's section in a job file (``why``: where
    it comes from instead)."""
    return {"toml": None, "python_only": why}


def toml_keys(cls: Any) -> Dict[str, TomlKey]:
    """The TOML keys of a config class, in field order: a dataclass's fields (each must
    declare :func:`toml` or :func:`python_only`), or a plain class's ``TOML_KEYS``.
    TypeError for a field that declares neither, so that a new field cannot be
    forgotten by the job file."""
    if not is_dataclass(cls):
        return dict(cls.TOML_KEYS)
    out: Dict[str, TomlKey] = {}
    for f in fields(cls):
        if "toml" not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name} declares no TOML key: give it "
                            "field(metadata=toml(kind, doc)) or python_only(why)")
        if f.metadata["toml"] is not None:
            out[f.name] = f.metadata["toml"]
    return out

