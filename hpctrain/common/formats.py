"""Format versions of the run directory's metadata, and reading that metadata when it is
damaged.

``state.json``, each checkpoint's commit record (``.hpctrain_checkpoint.json``) and
``spec.toml`` carry ``format``, an integer: 1 today. A file without it reads as format 1
(a run of an earlier hpctrain keeps working); a higher one than this hpctrain knows is
refused ("written by a newer hpctrain"): reading it as an older format could misread it,
and writing it back would lose what the newer version recorded.

A file that does not parse (truncated by a full disk or a crash of a copy, edited by
hand) is *damaged*. What that means depends on the file:

* a commit record: the checkpoint is not committed. Readers skip it; the supervisor moves
  its directory aside (``.damaged_checkpoint_<index>_<time>``, never deleted, never read
  as a checkpoint) with a warning, and the run resumes from the last good checkpoint;
* ``state.json`` and ``spec.toml``: an error naming the file, with a HINT saying what
  to do, instead of a traceback (:func:`damaged_state` and :func:`damaged_spec`).

A module of its own, below both :mod:`hpctrain.checkpoint` and the run directory's
modules, which both read commit records (docs/architecture.md).
"""
from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from hpctrain._version import __version__
from hpctrain.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: The key that holds the format version, in each of the three files.
FORMAT_KEY = "format"
#: The format of a checkpoint's commit record (``.hpctrain_checkpoint.json``) this hpctrain
#: writes, and the highest it reads (``hpctrain.checkpoint`` exports it too).
COMMIT_FORMAT = 1
#: The format of ``state.json`` this hpctrain writes (and the highest it reads).
STATE_FORMAT = 1
#: The format of a run directory's ``spec.toml`` (its top-level ``format`` key).
SPEC_FORMAT = 1
__all__ = ["COMMIT_FORMAT", "FORMAT_KEY", "SPEC_FORMAT", "STATE_FORMAT", "Damaged",
           "check_format", "damaged_spec", "damaged_state", "newer_format",
           "read_commit_record", "read_json_record", "read_toml_record", "versioned_spec"]


class Damaged(Exception):
    """A metadata file that cannot be read; ``str()`` says why (internal)."""


def newer_format(path: str, found: int, known: int, what: str) -> ConfigError:
    """The error for ``what`` at ``path`` written in a format this hpctrain predates."""

    return ConfigError(
        f"{what} is format {found}: written by a newer hpctrain (this one, {__version__}, "
        f"reads formats up to {known})",
        file=path,
        hint="upgrade hpctrain (pip install -U hpctrain, or your center's newer module) to "
             "read or continue this run; this version leaves the run directory untouched")


def check_format(data: Mapping[str, Any], path: str, known: int, what: str) -> int:
    """``data``'s format: 1 when it has none; :class:`Damaged` when it is no positive
    integer; :func:`newer_format`'s error when it is higher than ``known``.

    >>> check_format({}, "f", 1, "x"), check_format({"format": 1}, "f", 1, "x")
    (1, 1)
    >>> check_format({"format": 2}, "/r/state.json", 1, "the run's state")
    Traceback (most recent call last):
    ...
    hpctrain.errors.ConfigError: /r/state.json: the run's state is format 2: written by a newer ...
    HINT: upgrade hpctrain ...
    """
    value = data.get(FORMAT_KEY, 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Damaged(f"its {FORMAT_KEY!r} is {value!r}, not a format version (1, 2…)")
    if value > known:
        raise newer_format(path, value, known, what)
    return value


def _decode_problem(e: ValueError, data: bytes) -> str:
    if not data.strip():
        return "it is empty"
    if isinstance(e, UnicodeDecodeError):
        return f"it is not UTF-8 text ({e.reason} at byte {e.start})"
    if isinstance(e, json.JSONDecodeError):
        end = " (cut short?)" if e.pos >= len(data.rstrip()) else ""
        return f"it is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}{end}"
    return str(e)


def read_file_bytes(path: str) -> bytes:
    """The file's bytes; FileNotFoundError when it is missing, :class:`Damaged` when it is
    not a file; any other OSError (an I/O error, a stale NFS handle: perhaps transient)
    as it is, so that nothing is taken for damaged that may read fine next time. Opened
    with ``O_NONBLOCK``: a FIFO in its place cannot make the reader wait."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except IsADirectoryError:
        raise Damaged("it is a directory") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Damaged("it is not a regular file")
        os.set_blocking(fd, True)
        return f.read()


def read_json_record(path: str, data: Optional[bytes] = None) -> Dict[str, Any]:
    """The JSON object in ``path`` (or its bytes ``data``, read already):
    FileNotFoundError when it is missing, :class:`Damaged` when it is unreadable, not
    JSON, or not an object."""
    if data is None:
        data = read_file_bytes(path)
    try:
        obj = json.loads(data.decode())
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise Damaged(_decode_problem(e, data)) from None
    if not isinstance(obj, dict):
        raise Damaged(f"it holds {type(obj).__name__} {json.dumps(obj)[:40]}, "
                      "not a JSON object")
    return obj


def read_toml_record(path: str, data: Optional[bytes] = None) -> Dict[str, Any]:
    """The TOML document in ``path`` (or its bytes ``data``, read already):
    FileNotFoundError when it is missing, :class:`Damaged` when it does not parse."""
    if data is None:
        data = read_file_bytes(path)
    if not data.strip():
        raise Damaged("it is empty")
    try:
        return tomllib.loads(data.decode())
    except UnicodeDecodeError as e:
        raise Damaged(_decode_problem(e, data)) from None
    except tomllib.TOMLDecodeError as e:
        raise Damaged(f"it is not valid TOML: {e}") from None
    except RecursionError:
        raise Damaged("it is not valid TOML: nested too deep") from None


def read_commit_record(path: str, read: Optional[Callable[[str], bytes]] = None
                       ) -> Tuple[Optional[Dict[str, Any]], str]:
    """``(record, "")`` for the commit record at ``path`` (a checkpoint directory's
    ``.hpctrain_checkpoint.json``); ``(None, why)`` when the checkpoint is not committed:
    no commit record, or one that cannot be read. A record of a newer format raises
    :func:`newer_format`'s error: it is not damaged, only not ours to read; an I/O error
    (perhaps transient) is raised as it is. ``read``: how to read the file's bytes (a
    storage kind's :meth:`~hpctrain.storage.base.Storage.read_small`); default, here."""
    try:
        record = read_json_record(path, read(path) if read is not None else None)
        check_format(record, path, COMMIT_FORMAT, "the checkpoint's commit record")
    except FileNotFoundError:
        return None, f"it has no commit record ({os.path.basename(path)})"
    except NotADirectoryError:
        return None, "it is not a directory"
    except Damaged as e:
        return None, f"its commit record {path} is unreadable: {e}"
    return record, ""


def damaged_state(path: str, why: str) -> ConfigError:
    """The error for an unreadable ``state.json`` (``why``: what is wrong with it)."""
    return ConfigError(
        f"the run's state record is damaged: {why}", file=path,
        hint=f"hpctrain keeps the run's status and attempts there; its checkpoints are "
             f"untouched. Keep a copy and start the record afresh (mv {path} {path}.damaged "
             f"&& echo '{{}}' > {path}), then restore the run (Trainer.restore(path), or "
             "run it again under the same name): it resumes from its latest checkpoint, "
             "with a new attempt history")


def damaged_spec(path: str, why: str) -> ConfigError:
    """The error for an unreadable ``spec.toml`` of a run directory."""
    return ConfigError(
        f"the run's resolved spec is damaged: {why}", file=path,
        hint=f"hpctrain wrote it when the run started, to compare with the spec of a run "
             f"that continues; the run's checkpoints are untouched. Move it aside (mv {path} "
             f"{path}.damaged) and run again: the run continues from its latest checkpoint "
             "and gets a new spec.toml (nothing is compared then: keep the scale, backend, "
             "datasets and [config] the run had)")


def versioned_spec(text: str) -> str:
    """The text of a resolved spec (``JobSpec.to_toml()``) with ``format = N`` first
    (after its leading comment lines: a top-level key goes before every table).

    >>> print(versioned_spec("# resolved hpctrain job spec\\n[job]\\nbackend = \\"torch\\"\\n"))
    # resolved hpctrain job spec
    format = 1
    [job]
    backend = "torch"
    <BLANKLINE>
    """
    lines = text.splitlines(keepends=True)
    at = 0
    while at < len(lines) and lines[at].lstrip().startswith("#"):
        at += 1
    return "".join(lines[:at] + [f"{FORMAT_KEY} = {SPEC_FORMAT}\n"] + lines[at:])
