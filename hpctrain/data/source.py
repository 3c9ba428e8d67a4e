"""What the file-backed datasets (:class:`~hpctrain.data.HDF5Dataset`,
:class:`~hpctrain.data.ParquetDataset`) share: their sharding options and their checks,
paths as written in a job file, the table form and the short text form.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple

from ..errors import ConfigError
from . import plan

#: A rank holds about this much of its share in memory at once (one window).
DEFAULT_WINDOW_MB = 64
#: The sharding options and their defaults (what the text form leaves out).
DEFAULTS: Dict[str, Any] = {"shuffle": True, "seed": None, "remainder": None,
                            "window_mb": DEFAULT_WINDOW_MB}


def check_options(where: str, shuffle: Any, seed: Any, remainder: Any, window_mb: Any) -> None:
    """A ConfigError naming ``where`` and the option, for a value of the wrong kind.

    >>> check_options("HDF5Dataset", True, None, "pad", 64)
    Traceback (most recent call last):
    ...
    hpctrain.errors.ConfigError: HDF5Dataset: remainder: expected "drop" or "uneven", got 'pad'
    HINT: "drop": equal shards (training); "uneven": every row exactly once (evaluation)
    """
    if not isinstance(shuffle, bool):
        raise ConfigError(f"{where}: shuffle: expected true or false, got {shuffle!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ConfigError(f"{where}: seed: expected an integer >= 0, got {seed!r}")
    if remainder is not None and remainder not in plan.REMAINDERS:
        raise ConfigError(f"{where}: remainder: expected \"drop\" or \"uneven\", got "
                          f"{remainder!r}",
                          hint="\"drop\": equal shards (training); \"uneven\": every row "
                               "exactly once (evaluation)")
    if isinstance(window_mb, bool) or not isinstance(window_mb, int) or window_mb < 1:
        raise ConfigError(f"{where}: window_mb: expected an integer >= 1, got {window_mb!r}")


def resolve_path(path: Any, base_dir: Optional[str]) -> Any:
    """A path as a job file writes it: ``~`` and ``$VAR`` expanded, relative to
    ``base_dir`` (the job file's directory) when given; anything not a string unchanged.

    >>> resolve_path("data/train.h5", "/home/me/job"), resolve_path("/d/x.h5", "/job")
    ('/home/me/job/data/train.h5', '/d/x.h5')
    """
    if not isinstance(path, str):
        return path
    path = os.path.expandvars(os.path.expanduser(path))
    if base_dir is not None and not os.path.isabs(path):
        path = os.path.join(base_dir, path)
    return path


def split_table(table: Dict[str, Any], allowed: Tuple[str, ...], what_path: str
                ) -> Tuple[Any, Dict[str, Any]]:
    """``(path, the other options)`` of a dataset's table form; a ConfigError for an
    unknown option or a missing ``path`` (``what_path`` says what it should be)."""
    unknown = [k for k in table if k not in allowed]
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown option; expected one of "
                          f"{', '.join(allowed)}")
    if "path" not in table:
        raise ConfigError(f"path: missing; expected {what_path}")
    options = dict(table)
    return options.pop("path"), options


def changed_options(source: Any) -> Dict[str, Any]:
    """The sharding options of ``source`` that differ from :data:`DEFAULTS`."""
    return {k: getattr(source, k) for k, v in DEFAULTS.items() if getattr(source, k) != v}


__all__ = ["DEFAULT_WINDOW_MB", "DEFAULTS", "check_options", "resolve_path", "split_table",
           "changed_options"]
