"""Metric dicts as reported: flattening nested keys (Ray's ``a/b`` column names)."""
from __future__ import annotations

from typing import Any, Dict


def flatten(d: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a/b": 1}`` (Ray's flattening for CSV columns)."""
    out: Dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "/"))
        else:
            out[key] = v
    return out
