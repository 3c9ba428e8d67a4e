"""Text from a run directory, made safe to show on a terminal.

Run names, ``state.json`` (statuses, errors, notes), ``result.json`` (metric names and
values), checkpoint records and ``spec.toml`` are written by the training (or by whoever
could write the directory): shown as they are, an ESC sequence would move the cursor,
clear the screen or retitle the terminal, and ``[bold red]`` would be read as rich markup.
Everything the command line prints from a run directory goes through :func:`plain`
(``print``) or :func:`markup` (a rich console or table).
"""
from __future__ import annotations

import re
from typing import Any

__all__ = ["plain", "markup"]

#: C0 controls but TAB and LF, DEL, C1 controls (``\x9b`` is a one-byte CSI), and the
#: invisible direction marks and overrides that reorder what is shown.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(m: "re.Match[str]") -> str:
    code = ord(m.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def plain(value: Any) -> str:
    """``str(value)`` with every control character (but newline and tab) shown as its
    escape, ``\\x1b``: what ``print`` may write to a terminal.

    >>> plain("loss\\x1b[2J\\r")
    'loss\\\\x1b[2J\\\\x0d'
    >>> plain("a\\tb\\nc")
    'a\\tb\\nc'
    """
    return _CONTROL.sub(_visible, str(value))


def markup(value: Any) -> str:
    """:func:`plain`, with rich's markup escaped too (``[bold red]`` is shown as such):
    what a rich console or table may be given.

    >>> markup("[bold red]X[/]\\x1b[2J")
    '\\\\[bold red]X\\\\[/]\\\\x1b[2J'
    """
    from rich.markup import escape

    return escape(plain(value))
