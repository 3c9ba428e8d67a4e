"""Reading TOML files hpctrain is given (job specs, site configs, the user config), and
the words its errors use for what was found.

One reader, one set of error messages: every file is named, a syntax error gives its line
and column, and a value is shown as it would appear in TOML.
"""
from __future__ import annotations

import datetime as _dt
import difflib
import json
import re
import sys
from typing import Any, Dict, Optional, Sequence

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from hpctrain.errors import ConfigError

_KIND_NAMES = [
    (bool, "boolean"), (int, "integer"), (float, "float"), (str, "string"),
    (list, "array"), (dict, "table"), (_dt.datetime, "datetime"), (_dt.date, "date"),
    (_dt.time, "time"),
]


def kind_name(value: Any) -> str:
    """TOML-ish name of a value's type: ``"two"`` → ``string``."""
    for typ, name in _KIND_NAMES:
        if isinstance(value, typ):
            return name
    return type(value).__name__


def show_value(value: Any) -> str:
    """Render a found value as it would appear in TOML (``"two"``, ``true``, ``2.5``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def did_you_mean(name: str, valid: Sequence[str]) -> Optional[str]:
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


#: How deep arrays and tables may nest in a file hpctrain reads (a job spec needs a few
#: levels; Python's parser and everything after it recurse once per level).
MAX_NESTING = 64


def nesting_problem(value: Any, limit: int = MAX_NESTING) -> Optional[str]:
    """Why ``value`` (parsed TOML) nests too deeply, or None. Iterative: it never
    recurses itself.

    >>> nesting_problem({"a": [[1]]}) is None
    True
    >>> nesting_problem({"a": [[1]]}, limit=1)
    'arrays and tables nest 2 levels deep (at a); at most 1 are read'
    """
    stack = [(value, 0, "")]
    while stack:
        node, depth, where = stack.pop()
        if isinstance(node, dict):
            children = [(v, f"{where}.{k}" if where else str(k)) for k, v in node.items()]
        elif isinstance(node, list):
            children = [(v, where) for v in node]
        else:
            continue
        if depth > limit:
            return (f"arrays and tables nest {depth} levels deep (at {where or 'the top'}); "
                    f"at most {limit} are read")
        stack.extend((v, depth + 1, w) for v, w in children)
    return None


def loads_toml(text: str, *, file: Optional[str] = None) -> Dict[str, Any]:
    """``tomllib.loads`` with nesting too deep for Python's parser (a RecursionError) or
    for hpctrain (:data:`MAX_NESTING`) as a :class:`ConfigError` naming ``file``; other
    syntax errors stay ``tomllib.TOMLDecodeError``."""
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise ConfigError(f"invalid TOML: arrays or tables nest too deeply (more than "
                          f"{MAX_NESTING} levels)", file=file) from None
    problem = nesting_problem(data)
    if problem is not None:
        raise ConfigError(f"invalid TOML: {problem}", file=file)
    return data


def read_toml(path: str) -> Dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError("job spec file not found", file=path) from None
    except IsADirectoryError:
        raise ConfigError("expected a TOML file, got a directory", file=path) from None
    except PermissionError:
        raise ConfigError("cannot read the job spec: permission denied", file=path) from None
    except OSError as e:
        raise ConfigError(f"cannot read the job spec: {e.strerror or e}", file=path) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"invalid TOML: not UTF-8 text ({e.reason} at byte {e.start})",
                          file=path) from None
    except tomllib.TOMLDecodeError as e:
        m = re.match(r"^(.*) \(at line (\d+), column (\d+)\)$", str(e))
        msg = (f"invalid TOML at line {m.group(2)}, column {m.group(3)}: {m.group(1)}" if m
               else f"invalid TOML: {e}")
        raise ConfigError(msg, file=path) from None
    except RecursionError:
        raise ConfigError(f"invalid TOML: arrays or tables nest too deeply (more than "
                          f"{MAX_NESTING} levels)", file=path, hint=_DEEP_HINT) from None
    problem = nesting_problem(data)
    if problem is not None:
        raise ConfigError(f"invalid TOML: {problem}", file=path, hint=_DEEP_HINT)
    return data


_DEEP_HINT = "job specs and configs need a few levels; is this the right file?"
