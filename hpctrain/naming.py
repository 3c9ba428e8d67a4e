"""Checks for names that become paths or job names (run names, experiment names)."""
from __future__ import annotations

import re

from .errors import ConfigError

#: A run name (a directory and a job name), as a JSON Schema ``pattern`` too.
RUN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,199}$"
_SAFE_NAME = re.compile(RUN_NAME_PATTERN[1:-1])


def check_run_name(name: object, key: str = "run.name", file: str | None = None) -> str:
    """Accept ``exp-1.lr_0.01``; refuse ``../x``, ``a/b``, ``a;b``, ``""``, ``.hidden``.

    A run name becomes a directory under the storage path and a scheduler job name,
    so it may hold only letters, digits and ``. _ + -``, and may not start with a dot.
    """
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigError(
            f"{key}: expected a name of letters, digits and . _ + - (not starting with a dot,"
            f" at most 200 characters), got {name!r}",
            file=file,
            hint="the run name becomes a directory and a job name; pick e.g. \"mnist-lr0.01\"",
        )
    return name
