"""``--json``: what a command shows, as one JSON document on stdout (the shapes are
documented in docs/cli.md, "JSON output"). Floats that JSON cannot hold (NaN, ±inf) are
``null``, so any JSON parser reads it; keys are never removed within a major version."""
from __future__ import annotations

import json
import math
import sys
from typing import Any


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (``null``).

    >>> _finite({"a": [1.0, float("nan")], "b": float("inf")})
    {'a': [1.0, None], 'b': None}
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def print_json(value: Any, stream=None) -> int:
    """Write ``value`` as indented JSON and a newline; returns 0 (an exit code)."""
    stream = stream or sys.stdout
    stream.write(json.dumps(_finite(value), indent=2, default=str, allow_nan=False) + "\n")
    return 0
