"""Walltimes and memory sizes as written in job specs: parsing and rendering.

Pure functions, no I/O. Walltimes are handled in whole seconds, memory sizes in
whole MiB. Bare numbers are refused on purpose: Slurm reads ``--time=60`` as
minutes while PBS reads ``walltime=60`` as seconds, and a memory size without a
unit means different things to different batch systems.

    >>> parse_walltime("1-02:03:04")
    93784
    >>> parse_memory("1.5G")
    1536
    >>> format_walltime(93784)
    '1d 2h 3m 4s'

Each scheduler renders them in its own format (``format_slurm_walltime`` in
:mod:`hpctrain.schedulers.slurm`, ``format_pbs_walltime`` in :mod:`.pbs`, LSF's in
:mod:`.lsf`) from the helpers here (:func:`clock`, :func:`check_seconds`,
:func:`check_mib`).
"""
from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Optional

__all__ = [
    "UnitError",
    "parse_walltime",
    "format_walltime",
    "clock",
    "check_seconds",
    "check_mib",
    "DAY",
    "parse_memory",
    "WALLTIME_PATTERN",
    "MEMORY_PATTERN",
]

_MINUTE = 60
_HOUR = 3600
_DAY = 86400
#: Seconds in a day (the schedulers' walltime formats).
DAY = _DAY

_WALLTIME_FORMS = '"HH:MM:SS", "MM:SS", "D-HH[:MM[:SS]]" or units such as "90m", "2h", "1d12h"'
_WALLTIME_EXAMPLE_HINT = 'write a walltime such as "01:30:00", "1-12:00:00" or "90m"'
_MEMORY_FORMS = 'a number with a unit K, M, G or T (optionally followed by "B" or "iB"), e.g. "512M", "4G", "1.5GiB"'
_MEMORY_HINT = 'add a unit, e.g. "4G"'


class UnitError(ValueError):
    """A walltime or memory value could not be understood.

    ``str(error)`` (and ``.message``) says what was expected; ``.hint`` is an
    optional one-line suggestion to show the user, or ``None``.

        >>> e = UnitError("walltime must be positive", hint='write e.g. "01:00:00"')
        >>> str(e), e.hint
        ('walltime must be positive', 'write e.g. "01:00:00"')
    """

    def __init__(self, message: str, hint: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


# --------------------------------------------------------------------------- walltime

# "HH:MM:SS" (hours unbounded) or "MM:SS".
_HMS_RE = re.compile(r"(\d+):(\d{1,2}):(\d{1,2})")
_MS_RE = re.compile(r"(\d{1,2}):(\d{1,2})")
# Slurm's day forms: "D-HH", "D-HH:MM", "D-HH:MM:SS".
_DAY_RE = re.compile(r"(\d+)-(\d{1,2})(?::(\d{1,2})(?::(\d{1,2}))?)?")
# Unit forms: d, h, m, s in that order, each at most once, at least one present.
_UNITS_RE = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", re.IGNORECASE)
_DIGITS_RE = re.compile(r"[+-]?\d+(?:\.\d*)?|[+-]?\.\d+")

#: The walltime forms above as one JSON Schema ``pattern`` (ECMA-262 and Python alike):
#: what an editor can check while typing (a zero total, only zeros, is refused too).
WALLTIME_PATTERN = (
    r"^\s*(?![0:dDhHmMsS-]+\s*$)"                                  # not all zeros
    r"(?:\d+:[0-5]?\d:[0-5]?\d"                                     # HH:MM:SS
    r"|[0-5]?\d:[0-5]?\d"                                          # MM:SS
    r"|\d+-(?:[01]?\d|2[0-3])(?::[0-5]?\d(?::[0-5]?\d)?)?"          # D-HH[:MM[:SS]]
    r"|(?=\d)(?:\d+[dD])?(?:\d+[hH])?(?:\d+[mM])?(?:\d+[sS])?"      # 1d12h, 90m
    r")\s*$")


def clock(seconds: int) -> str:
    """``3723`` -> ``"01:02:03"``; hours are zero-padded to 2 and never wrapped."""
    hours, rest = divmod(seconds, _HOUR)
    minutes, secs = divmod(rest, _MINUTE)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def _bare_number_walltime_error(number: object) -> UnitError:
    """The error for a walltime given as a bare number such as ``60`` or ``"60"``."""
    message = (
        f"walltime {number!r} is a bare number, which is ambiguous "
        "(Slurm reads it as minutes, PBS as seconds); expected " + _WALLTIME_FORMS
    )
    minutes: Optional[int] = None
    try:
        as_decimal = Decimal(str(number).strip())
        if as_decimal == as_decimal.to_integral_value() and as_decimal > 0:
            minutes = int(as_decimal)
    except (InvalidOperation, ValueError):
        minutes = None
    if minutes is not None:
        hint = f'write "{clock(minutes * _MINUTE)}" for {_describe_minutes(minutes)}, or "{minutes}m"'
    else:
        hint = _WALLTIME_EXAMPLE_HINT
    return UnitError(message, hint=hint)


def _describe_minutes(minutes: int) -> str:
    """``60`` -> ``"one hour"``, ``1`` -> ``"one minute"``, ``90`` -> ``"1h 30m"``."""
    if minutes == 60:
        return "one hour"
    if minutes == 1:
        return "one minute"
    return format_walltime(minutes * _MINUTE)


def _check_field(value: str, name: str, limit: int, original: object) -> int:
    number = int(value)
    if number >= limit:
        raise UnitError(
            f"walltime {original!r}: {name} must be less than {limit}, got {number}; expected {_WALLTIME_FORMS}",
            hint=_WALLTIME_EXAMPLE_HINT,
        )
    return number


def parse_walltime(value: object) -> int:
    """Parse a walltime string into a positive number of seconds.

    Accepted forms (strings only; surrounding whitespace is ignored, inner
    whitespace is not allowed):

    * ``"HH:MM:SS"`` — hours may exceed 24: ``"01:30:00"`` -> ``5400``,
      ``"100:00:00"`` -> ``360000``
    * ``"MM:SS"`` — ``"05:30"`` -> ``330``
    * Slurm's day forms ``"D-HH"``, ``"D-HH:MM"``, ``"D-HH:MM:SS"`` —
      ``"1-12"`` -> ``129600``, ``"2-00:30"`` -> ``174600``,
      ``"1-02:03:04"`` -> ``93784``
    * unit forms with ``d``, ``h``, ``m``, ``s`` combined in that order —
      ``"90m"`` -> ``5400``, ``"2h"`` -> ``7200``, ``"1d12h"`` -> ``129600``,
      ``"1h30m"`` -> ``5400``, ``"45s"`` -> ``45``, ``"1d"`` -> ``86400``

    Minutes and seconds fields of the colon forms must be below 60; hours
    must be below 24 only in the day forms (``"1-25"`` is refused).

    Raises :class:`UnitError` for:

    * bare numbers — ``60``, ``1.5``, ``"60"`` — because Slurm reads them as
      minutes and PBS as seconds; for ``60`` the hint is
      ``write "01:00:00" for one hour, or "60m"``
    * ``bool``, ``None`` and other non-string types
    * empty, negative or malformed strings — ``""``, ``"-1:00:00"``,
      ``"1:2:3:4"``, ``"1:60:00"``, ``"abc"``, ``"1-25"``
    * a zero total — ``"0:00:00"`` -> "walltime must be positive"
    """
    text = _walltime_text(value)
    total = _walltime_total(text, value)
    if total is None:
        raise UnitError(
            f"walltime {value!r} is not understood; expected {_WALLTIME_FORMS}",
            hint=_WALLTIME_EXAMPLE_HINT,
        )
    if total <= 0:
        raise UnitError(f"walltime {value!r} must be positive", hint=_WALLTIME_EXAMPLE_HINT)
    return total


def _walltime_text(value: object) -> str:
    """The stripped walltime string, or the error for a non-string, empty, bare or negative one."""
    if isinstance(value, bool) or value is None:
        raise UnitError(
            f"walltime must be a string such as \"01:00:00\", got {value!r}; expected {_WALLTIME_FORMS}",
            hint=_WALLTIME_EXAMPLE_HINT,
        )
    if isinstance(value, (int, float)):
        raise _bare_number_walltime_error(value)
    if not isinstance(value, str):
        raise UnitError(
            f"walltime must be a string, got {type(value).__name__} {value!r}; expected {_WALLTIME_FORMS}",
            hint=_WALLTIME_EXAMPLE_HINT,
        )

    text = value.strip()
    if not text:
        raise UnitError(f"walltime is empty; expected {_WALLTIME_FORMS}", hint=_WALLTIME_EXAMPLE_HINT)
    if _DIGITS_RE.fullmatch(text):
        raise _bare_number_walltime_error(text)
    if text.startswith("-"):
        raise UnitError(
            f"walltime {value!r} is negative; a walltime must be positive, expected {_WALLTIME_FORMS}",
            hint=_WALLTIME_EXAMPLE_HINT,
        )
    return text


def _hms_seconds(match: "re.Match[str]", value: object) -> int:
    """Seconds of a ``"HH:MM:SS"`` match (hours unbounded)."""
    hours = int(match.group(1))
    minutes = _check_field(match.group(2), "minutes", 60, value)
    seconds = _check_field(match.group(3), "seconds", 60, value)
    return hours * _HOUR + minutes * _MINUTE + seconds


def _ms_seconds(match: "re.Match[str]", value: object) -> int:
    """Seconds of a ``"MM:SS"`` match."""
    minutes = _check_field(match.group(1), "minutes", 60, value)
    seconds = _check_field(match.group(2), "seconds", 60, value)
    return minutes * _MINUTE + seconds


def _day_seconds(match: "re.Match[str]", value: object) -> int:
    """Seconds of a Slurm ``"D-HH[:MM[:SS]]"`` match (hours below 24)."""
    days = int(match.group(1))
    hours = _check_field(match.group(2), "hours", 24, value)
    minutes = _check_field(match.group(3), "minutes", 60, value) if match.group(3) else 0
    seconds = _check_field(match.group(4), "seconds", 60, value) if match.group(4) else 0
    return days * _DAY + hours * _HOUR + minutes * _MINUTE + seconds


def _unit_seconds(match: "re.Match[str]", value: object) -> Optional[int]:
    """Seconds of a ``"1d12h30m"`` match, or ``None`` when no unit is present."""
    if not any(match.groups()):
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return days * _DAY + hours * _HOUR + minutes * _MINUTE + seconds


#: The walltime forms, tried in this order: the first that matches decides.
_WALLTIME_PARSERS = (
    (_HMS_RE, _hms_seconds),
    (_MS_RE, _ms_seconds),
    (_DAY_RE, _day_seconds),
    (_UNITS_RE, _unit_seconds),
)


def _walltime_total(text: str, value: object) -> Optional[int]:
    """Seconds of ``text`` in the first form that matches it, or ``None`` if none does."""
    for pattern, seconds_of in _WALLTIME_PARSERS:
        match = pattern.fullmatch(text)
        if match:
            return seconds_of(match, value)
    return None


def check_seconds(seconds: object) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise UnitError(f"walltime must be a whole number of seconds, got {seconds!r}")
    if seconds <= 0:
        raise UnitError(f"walltime must be positive, got {seconds} seconds")
    return seconds


def format_walltime(seconds: int) -> str:
    """Render seconds for people, omitting zero parts.

    ``93784`` -> ``"1d 2h 3m 4s"``, ``3600`` -> ``"1h"``, ``5400`` -> ``"1h 30m"``,
    ``45`` -> ``"45s"``, ``86400`` -> ``"1d"``.
    Raises :class:`UnitError` for non-integers and values below 1.
    """
    seconds = check_seconds(seconds)
    days, rest = divmod(seconds, _DAY)
    hours, rest = divmod(rest, _HOUR)
    minutes, secs = divmod(rest, _MINUTE)
    parts = [f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")) if n]
    return " ".join(parts)


# --------------------------------------------------------------------------- memory

_MEMORY_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([KMGT])(B|iB)?", re.IGNORECASE)
#: The memory sizes :func:`parse_memory` accepts, as a JSON Schema ``pattern`` (not zero).
MEMORY_PATTERN = r"^\s*(?![0.]+[KMGTkmgt])(?:\d+(?:\.\d*)?|\.\d+)[KMGTkmgt](?:[bB]|[iI][bB])?\s*$"
# Size of one unit, in KiB (so that K needs no fractions).
_UNIT_KIB = {"K": 1, "M": 1024, "G": 1024 ** 2, "T": 1024 ** 3}


def parse_memory(value: object) -> int:
    """Parse a memory size into a positive whole number of MiB, rounding up.

    A number (decimals allowed) followed by ``K``, ``M``, ``G`` or ``T``,
    case-insensitive, optionally followed by ``B`` or ``iB``; every unit is a
    binary multiple (``1G`` = 1024 MiB). Surrounding whitespace is ignored.

    ``"512M"`` -> ``512``, ``"512MB"`` -> ``512``, ``"4G"`` / ``"4GB"`` /
    ``"4GiB"`` / ``"4gb"`` -> ``4096``, ``"1.5G"`` -> ``1536``,
    ``"2T"`` -> ``2097152``, ``"1024K"`` -> ``1``, ``"1500K"`` -> ``2`` (rounded up).

    Raises :class:`UnitError` for bare numbers (``4096``, ``"4096"``; hint
    ``add a unit, e.g. "4G"``), ``bool``, ``None`` and other non-string
    types, zero (``"0G"`` -> "must be positive"), negative values and
    malformed strings (``"4X"``, ``"G"``, ``"4 G"``).
    """
    if isinstance(value, bool) or value is None:
        raise UnitError(f"memory must be a string such as \"4G\", got {value!r}; expected {_MEMORY_FORMS}",
                        hint=_MEMORY_HINT)
    if isinstance(value, (int, float)):
        raise UnitError(f"memory {value!r} has no unit; expected {_MEMORY_FORMS}", hint=_MEMORY_HINT)
    if not isinstance(value, str):
        raise UnitError(
            f"memory must be a string, got {type(value).__name__} {value!r}; expected {_MEMORY_FORMS}",
            hint=_MEMORY_HINT,
        )

    text = value.strip()
    if not text:
        raise UnitError(f"memory is empty; expected {_MEMORY_FORMS}", hint=_MEMORY_HINT)
    if _DIGITS_RE.fullmatch(text):
        raise UnitError(f"memory {value!r} has no unit; expected {_MEMORY_FORMS}", hint=_MEMORY_HINT)
    if text.startswith("-"):
        raise UnitError(f"memory {value!r} is negative; memory must be positive, expected {_MEMORY_FORMS}",
                        hint=_MEMORY_HINT)
    match = _MEMORY_RE.fullmatch(text)
    if not match:
        raise UnitError(f"memory {value!r} is not understood; expected {_MEMORY_FORMS}", hint=_MEMORY_HINT)

    kib = Decimal(match.group(1)) * _UNIT_KIB[match.group(2).upper()]
    if kib <= 0:
        raise UnitError(f"memory {value!r} must be positive", hint=_MEMORY_HINT)
    return int(math.ceil(kib / 1024))


def check_mib(mib: object) -> int:
    if isinstance(mib, bool) or not isinstance(mib, int):
        raise UnitError(f"memory must be a whole number of MiB, got {mib!r}")
    if mib <= 0:
        raise UnitError(f"memory must be positive, got {mib} MiB")
    return mib
