"""The ranks' tracebacks on the driver's console, each shown once.

When every rank fails the same way (a typo in the training function), each prints the same
traceback; echoed as they come (``(rank R) …``), 64 ranks would show 64 copies. A
:class:`TracebackFolder` sits between the ranks' output and the console: the first rank to
print a traceback shows it whole; a rank that prints the very same traceback afterwards
shows its last line only, with the rank whose copy was shown. Every other line passes
through as it came. The rank logs (``logs/<job>/rank-R.out``) keep every copy.
"""
from __future__ import annotations

import threading
from typing import Callable, Dict, List

TRACEBACK_HEAD = "Traceback (most recent call last):"
MAX_BLOCK_LINES = 5000  # a block longer than this is shown as it came


class TracebackFolder:
    """``line(rank, text)`` from any thread; ``emit(rank, text)`` gets what to show."""

    def __init__(self, emit: Callable[[int, str], None]):
        self._emit = emit
        self._open: Dict[int, List[str]] = {}   # rank -> the lines of its traceback so far
        self._shown: Dict[str, int] = {}        # a traceback's text -> the rank that showed it
        self._lock = threading.Lock()

    def line(self, rank: int, text: str) -> None:
        with self._lock:
            block = self._open.get(rank)
            if block is None:
                if text.rstrip() == TRACEBACK_HEAD:
                    self._open[rank] = [text]
                else:
                    self._emit(rank, text)
                return
            block.append(text)
            if text.strip() and text[:1] not in (" ", "\t"):  # the exception's line ends it
                del self._open[rank]
                self._finish(rank, block)
            elif len(block) > MAX_BLOCK_LINES:
                del self._open[rank]
                for t in block:
                    self._emit(rank, t)

    def _finish(self, rank: int, block: List[str]) -> None:
        key = "\n".join(t.rstrip() for t in block)
        first = self._shown.get(key)
        if first is None:
            self._shown[key] = rank
            for t in block:
                self._emit(rank, t)
        else:
            self._emit(rank, f"{block[-1].rstrip()}  [the same traceback as rank {first}; "
                             "whole in this rank's log]")

    def flush(self) -> None:
        """Show what a rank left unfinished (its process ended mid-traceback)."""
        with self._lock:
            open_blocks, self._open = self._open, {}
            for rank, block in sorted(open_blocks.items()):
                for t in block:
                    self._emit(rank, t)
