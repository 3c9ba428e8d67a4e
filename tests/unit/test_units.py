"""Tests for hpctrain.units: walltime and memory parsing, Slurm/PBS rendering (each
scheduler's own formatters), round trips."""
from __future__ import annotations

import doctest
from typing import Optional

import pytest

import hpctrain.units as units_module
from hpctrain.schedulers.pbs import format_pbs_memory, format_pbs_walltime
from hpctrain.schedulers.slurm import format_slurm_memory, format_slurm_walltime
from hpctrain.units import (
    UnitError,
    format_walltime,
    parse_memory,
    parse_walltime,
)

# --------------------------------------------------------------------------- walltime parsing

WALLTIME_ACCEPTED = [
    # HH:MM:SS
    ("01:00:00", 3600, "hms-one-hour"),
    ("1:2:3", 3723, "hms-single-digits"),
    ("00:00:01", 1, "hms-one-second"),
    ("23:59:59", 86399, "hms-just-under-a-day"),
    ("24:00:00", 86400, "hms-24h"),
    ("26:03:04", 93784, "hms-over-24h"),
    ("100:00:00", 360000, "hms-100h"),
    ("1000:00:00", 3600000, "hms-1000h"),
    # MM:SS
    ("05:30", 330, "ms"),
    ("59:59", 3599, "ms-max"),
    ("0:01", 1, "ms-one-second"),
    # Slurm day forms
    ("1-00", 86400, "d-hh-one-day"),
    ("1-12", 129600, "d-hh"),
    ("2-00:30", 174600, "d-hh-mm"),
    ("1-02:03:04", 93784, "d-hh-mm-ss"),
    ("0-01:00:00", 3600, "d-hh-mm-ss-zero-days"),
    ("10-23:59:59", 950399, "d-hh-mm-ss-ten-days"),
    # unit forms
    ("90m", 5400, "units-minutes"),
    ("2h", 7200, "units-hours"),
    ("1d12h", 129600, "units-day-hours"),
    ("1h30m", 5400, "units-hours-minutes"),
    ("45s", 45, "units-seconds"),
    ("1d", 86400, "units-day"),
    ("1d2h3m4s", 93784, "units-all"),
    ("1d30s", 86430, "units-day-seconds"),
    ("100h", 360000, "units-100h"),
    ("2H", 7200, "units-uppercase"),
    # surrounding whitespace is ignored
    ("  01:00:00\n", 3600, "outer-whitespace"),
]


@pytest.mark.parametrize(
    "text, seconds", [(t, s) for t, s, _ in WALLTIME_ACCEPTED], ids=[i for _, _, i in WALLTIME_ACCEPTED]
)
def test_parse_walltime_accepts(text: str, seconds: int) -> None:
    assert parse_walltime(text) == seconds


# (value, words the message must contain, words the hint must contain or None for "no check")
WALLTIME_REJECTED = [
    # bare numbers: ambiguous between Slurm (minutes) and PBS (seconds)
    (60, ["bare number", "ambiguous", "minutes", "seconds"], ['"01:00:00"', '"60m"', "one hour"], "int-60"),
    ("60", ["bare number", "ambiguous"], ['"01:00:00"', '"60m"'], "digit-string-60"),
    (" 60 ", ["bare number"], ['"01:00:00"', '"60m"'], "digit-string-padded"),
    (90, ["bare number"], ['"01:30:00"', '"90m"'], "int-90"),
    (1, ["bare number"], ['"00:01:00"', '"1m"'], "int-1"),
    (6000, ["bare number"], ['"100:00:00"', '"6000m"'], "int-6000-over-100h"),
    (60.0, ["bare number"], ['"01:00:00"', '"60m"'], "float-integral"),
    (1.5, ["bare number"], ['"01:30:00"', '"90m"'], "float-fraction"),
    ("1.5", ["bare number"], ['"01:30:00"', '"90m"'], "decimal-string"),
    (-5, ["bare number"], ['"01:30:00"'], "negative-int"),
    # wrong types
    (True, ["must be a string", "True"], ['"01:30:00"'], "bool-true"),
    (False, ["must be a string", "False"], None, "bool-false"),
    (None, ["must be a string", "None"], None, "none"),
    ([1, 0, 0], ["must be a string", "list"], None, "list"),
    (b"01:00:00", ["must be a string", "bytes"], None, "bytes"),
    # empty / negative / malformed
    ("", ["empty", "HH:MM:SS"], None, "empty"),
    ("   ", ["empty"], None, "blank"),
    ("-1:00:00", ["negative", "positive"], None, "negative-hms"),
    ("-90m", ["negative"], None, "negative-units"),
    ("1:2:3:4", ["not understood", "HH:MM:SS"], None, "four-fields"),
    ("1:60:00", ["minutes must be less than 60", "60"], None, "minutes-60"),
    ("1:00:60", ["seconds must be less than 60"], None, "seconds-60"),
    ("60:00", ["minutes must be less than 60"], None, "ms-minutes-60"),
    ("00:60", ["seconds must be less than 60"], None, "ms-seconds-60"),
    ("abc", ["not understood"], None, "letters"),
    ("1-25", ["hours must be less than 24"], None, "day-hours-25"),
    ("1-24:00:00", ["hours must be less than 24"], None, "day-hours-24"),
    ("1-00:60", ["minutes must be less than 60"], None, "day-minutes-60"),
    ("1-", ["not understood"], None, "day-dash-only"),
    ("1h 30m", ["not understood"], None, "inner-whitespace"),
    ("30m1h", ["not understood"], None, "units-wrong-order"),
    ("1h1h", ["not understood"], None, "units-repeated"),
    ("1w", ["not understood"], None, "units-unknown"),
    ("h", ["not understood"], None, "unit-without-number"),
    ("1.5h", ["not understood"], None, "units-fraction"),
    ("01:00:00:", ["not understood"], None, "trailing-colon"),
    (":30", ["not understood"], None, "leading-colon"),
    ("0:00:00", ["must be positive"], None, "zero-hms"),
    ("0-00", ["must be positive"], None, "zero-days"),
    ("0m", ["must be positive"], None, "zero-units"),
    ("00:00", ["must be positive"], None, "zero-ms"),
]


@pytest.mark.parametrize(
    "value, message_parts, hint_parts",
    [(v, m, h) for v, m, h, _ in WALLTIME_REJECTED],
    ids=[i for *_, i in WALLTIME_REJECTED],
)
def test_parse_walltime_rejects(value: object, message_parts: list, hint_parts: Optional[list]) -> None:
    with pytest.raises(UnitError) as info:
        parse_walltime(value)
    error = info.value
    assert isinstance(error, ValueError)
    assert str(error) == error.message
    for part in message_parts:
        assert part in error.message, (part, error.message)
    assert error.hint, "every walltime error carries a hint"
    assert "\n" not in error.hint, "the hint is one line"
    for part in hint_parts or []:
        assert part in error.hint, (part, error.hint)


def test_bare_number_hint_exact_wording() -> None:
    with pytest.raises(UnitError) as info:
        parse_walltime(60)
    assert info.value.hint == 'write "01:00:00" for one hour, or "60m"'


def test_unit_error_defaults() -> None:
    error = UnitError("expected something")
    assert error.hint is None and error.message == "expected something"
    assert isinstance(error, ValueError)


# --------------------------------------------------------------------------- walltime rendering

WALLTIME_RENDERINGS = [
    # seconds, slurm, pbs, human, id
    (1, "00:00:01", "00:00:01", "1s", "one-second"),
    (45, "00:00:45", "00:00:45", "45s", "seconds-only"),
    (59, "00:00:59", "00:00:59", "59s", "59s"),
    (60, "00:01:00", "00:01:00", "1m", "one-minute"),
    (90, "00:01:30", "00:01:30", "1m 30s", "90s"),
    (3599, "00:59:59", "00:59:59", "59m 59s", "just-under-an-hour"),
    (3600, "01:00:00", "01:00:00", "1h", "one-hour"),
    (5400, "01:30:00", "01:30:00", "1h 30m", "ninety-minutes"),
    (86399, "23:59:59", "23:59:59", "23h 59m 59s", "just-under-a-day"),
    (86400, "1-00:00:00", "24:00:00", "1d", "one-day-exact"),
    (86401, "1-00:00:01", "24:00:01", "1d 1s", "one-day-one-second"),
    (90061, "1-01:01:01", "25:01:01", "1d 1h 1m 1s", "over-24h"),
    (93784, "1-02:03:04", "26:03:04", "1d 2h 3m 4s", "over-24h-mixed"),
    (359999, "4-03:59:59", "99:59:59", "4d 3h 59m 59s", "just-under-100h"),
    (360000, "4-04:00:00", "100:00:00", "4d 4h", "100h"),
    (3600000, "41-16:00:00", "1000:00:00", "41d 16h", "1000h"),
]


@pytest.mark.parametrize(
    "seconds, slurm, pbs, human",
    [r[:4] for r in WALLTIME_RENDERINGS],
    ids=[r[4] for r in WALLTIME_RENDERINGS],
)
def test_walltime_renderings(seconds: int, slurm: str, pbs: str, human: str) -> None:
    assert format_slurm_walltime(seconds) == slurm
    assert format_pbs_walltime(seconds) == pbs
    assert format_walltime(seconds) == human


WALLTIME_FORMATTERS = [format_slurm_walltime, format_pbs_walltime, format_walltime]


@pytest.mark.parametrize("formatter", WALLTIME_FORMATTERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "bad, expected",
    [(0, "must be positive"), (-1, "must be positive"), (1.5, "whole number"), (True, "whole number"),
     ("60", "whole number"), (None, "whole number")],
    ids=["zero", "negative", "float", "bool", "string", "none"],
)
def test_walltime_formatters_reject(formatter, bad: object, expected: str) -> None:
    with pytest.raises(UnitError, match=expected):
        formatter(bad)


# --------------------------------------------------------------------------- walltime round trips

ROUND_TRIP_SECONDS = [1, 59, 60, 61, 90, 3599, 3600, 3601, 86399, 86400, 86401, 90061, 93784,
                      359999, 360000, 3600000]


@pytest.mark.parametrize("seconds", ROUND_TRIP_SECONDS, ids=[f"{s}s" for s in ROUND_TRIP_SECONDS])
@pytest.mark.parametrize("formatter", [format_slurm_walltime, format_pbs_walltime],
                         ids=["slurm", "pbs"])
def test_walltime_round_trip_seconds(formatter, seconds: int) -> None:
    assert parse_walltime(formatter(seconds)) == seconds


@pytest.mark.parametrize(
    "text", [t for t, _, _ in WALLTIME_ACCEPTED], ids=[i for _, _, i in WALLTIME_ACCEPTED]
)
def test_walltime_round_trip_accepted_strings(text: str) -> None:
    seconds = parse_walltime(text)
    assert parse_walltime(format_slurm_walltime(seconds)) == seconds
    assert parse_walltime(format_pbs_walltime(seconds)) == seconds
    # the human form with spaces removed is a valid unit form too
    assert parse_walltime(format_walltime(seconds).replace(" ", "")) == seconds


# --------------------------------------------------------------------------- memory parsing

MEMORY_ACCEPTED = [
    ("512M", 512, "M"),
    ("512MB", 512, "MB"),
    ("512MiB", 512, "MiB"),
    ("512m", 512, "m-lowercase"),
    ("512mb", 512, "mb-lowercase"),
    ("4G", 4096, "G"),
    ("4GB", 4096, "GB"),
    ("4GiB", 4096, "GiB"),
    ("4g", 4096, "g-lowercase"),
    ("4gb", 4096, "gb-lowercase"),
    ("4gib", 4096, "gib-lowercase"),
    ("1.5G", 1536, "decimal-G"),
    ("0.5G", 512, "half-G"),
    (".5G", 512, "leading-dot"),
    ("2T", 2097152, "T"),
    ("2TB", 2097152, "TB"),
    ("1024K", 1, "K-exact-MiB"),
    ("1024KiB", 1, "KiB"),
    ("2048k", 2, "k-lowercase"),
    ("1K", 1, "K-rounds-up"),
    ("1500K", 2, "K-rounds-up-partial"),
    ("1.1M", 2, "M-fraction-rounds-up"),
    ("1M", 1, "one-MiB"),
    ("  8G ", 8192, "outer-whitespace"),
]


@pytest.mark.parametrize(
    "text, mib", [(t, m) for t, m, _ in MEMORY_ACCEPTED], ids=[i for _, _, i in MEMORY_ACCEPTED]
)
def test_parse_memory_accepts(text: str, mib: int) -> None:
    assert parse_memory(text) == mib


MEMORY_REJECTED = [
    (4096, ["no unit"], '"4G"', "int"),
    ("4096", ["no unit"], '"4G"', "digit-string"),
    ("1.5", ["no unit"], '"4G"', "decimal-string"),
    (4.0, ["no unit"], '"4G"', "float"),
    (True, ["must be a string", "True"], '"4G"', "bool"),
    (None, ["must be a string", "None"], '"4G"', "none"),
    ({"mem": "4G"}, ["must be a string", "dict"], '"4G"', "dict"),
    ("", ["empty"], '"4G"', "empty"),
    ("0G", ["must be positive"], '"4G"', "zero"),
    ("0.0M", ["must be positive"], '"4G"', "zero-decimal"),
    ("-4G", ["negative", "positive"], '"4G"', "negative"),
    ("4X", ["not understood", "K, M, G or T"], '"4G"', "unknown-unit"),
    ("4B", ["not understood"], '"4G"', "bytes-unit"),
    ("G", ["not understood"], '"4G"', "unit-only"),
    ("4 G", ["not understood"], '"4G"', "inner-whitespace"),
    ("4GG", ["not understood"], '"4G"', "double-unit"),
    ("4Gb2", ["not understood"], '"4G"', "trailing-garbage"),
    ("1e3M", ["not understood"], '"4G"', "exponent"),
    ("four G", ["not understood"], '"4G"', "words"),
]


@pytest.mark.parametrize(
    "value, message_parts, hint_part",
    [(v, m, h) for v, m, h, _ in MEMORY_REJECTED],
    ids=[i for *_, i in MEMORY_REJECTED],
)
def test_parse_memory_rejects(value: object, message_parts: list, hint_part: str) -> None:
    with pytest.raises(UnitError) as info:
        parse_memory(value)
    error = info.value
    for part in message_parts:
        assert part in error.message, (part, error.message)
    assert error.hint is not None and hint_part in error.hint


def test_bare_memory_hint_exact_wording() -> None:
    with pytest.raises(UnitError) as info:
        parse_memory("4096")
    assert info.value.hint == 'add a unit, e.g. "4G"'


# --------------------------------------------------------------------------- memory rendering

MEMORY_RENDERINGS = [
    (1, "1M", "1mb", "one-MiB"),
    (512, "512M", "512mb", "512M"),
    (1023, "1023M", "1023mb", "just-under-1G"),
    (1024, "1G", "1gb", "1G"),
    (1536, "1536M", "1536mb", "1.5G"),
    (4096, "4G", "4gb", "4G"),
    (2097152, "2048G", "2048gb", "2T"),
]


@pytest.mark.parametrize(
    "mib, slurm, pbs", [r[:3] for r in MEMORY_RENDERINGS], ids=[r[3] for r in MEMORY_RENDERINGS]
)
def test_memory_renderings(mib: int, slurm: str, pbs: str) -> None:
    assert format_slurm_memory(mib) == slurm
    assert format_pbs_memory(mib) == pbs


@pytest.mark.parametrize("formatter", [format_slurm_memory, format_pbs_memory], ids=["slurm", "pbs"])
@pytest.mark.parametrize(
    "bad, expected",
    [(0, "must be positive"), (-1024, "must be positive"), (1.5, "whole number"), (True, "whole number"),
     ("4G", "whole number")],
    ids=["zero", "negative", "float", "bool", "string"],
)
def test_memory_formatters_reject(formatter, bad: object, expected: str) -> None:
    with pytest.raises(UnitError, match=expected):
        formatter(bad)


@pytest.mark.parametrize(
    "text", [t for t, _, _ in MEMORY_ACCEPTED], ids=[i for _, _, i in MEMORY_ACCEPTED]
)
def test_memory_round_trip_accepted_strings(text: str) -> None:
    mib = parse_memory(text)
    assert parse_memory(format_slurm_memory(mib)) == mib
    assert parse_memory(format_pbs_memory(mib)) == mib


ROUND_TRIP_MIB = [1, 2, 512, 1000, 1023, 1024, 1025, 1536, 4096, 65536, 1048576, 2097152 + 1]


@pytest.mark.parametrize("mib", ROUND_TRIP_MIB, ids=[f"{m}MiB" for m in ROUND_TRIP_MIB])
@pytest.mark.parametrize("formatter", [format_slurm_memory, format_pbs_memory], ids=["slurm", "pbs"])
def test_memory_round_trip_mib(formatter, mib: int) -> None:
    assert parse_memory(formatter(mib)) == mib


# --------------------------------------------------------------------------- docstring examples

def test_module_doctests() -> None:
    result = doctest.testmod(units_module, raise_on_error=False, verbose=False)
    assert result.failed == 0
