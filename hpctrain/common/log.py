"""hpctrain's own messages go through :mod:`logging`, under the ``hpctrain`` logger.

As a library hpctrain configures nothing (the logging HOWTO's rule for libraries): its
INFO notes (a restart of the worker group, a requeue, a submitted array) stay quiet
unless the application configures logging, and its warnings reach stderr through
Python's last-resort handler. The command line (``hpctrain …``) and the batch step in
the job attach one handler that writes ``[hpctrain] message`` to stderr, at INFO by
default, WARNING with ``--quiet``, DEBUG with ``-v``. A training's own progress lines
(``iter 3 | 1.2s | loss=…``) follow ``RunConfig.verbose``, as in Ray Train.

The lines a user sees by default, as ``print()`` showed them (a sweep's trials, a submitted
job, a detach, a requeue), go through :func:`progress_line` to the ``hpctrain.progress``
logger. It has a handler of its own that writes each message as it is to the
``sys.stderr`` (or ``sys.stdout``) of the moment, and does not propagate: the lines look
the same whatever the application's logging, and an application routes them
(``logging.getLogger("hpctrain.progress").handlers[:] = [its own]``) or silences them
(``.setLevel(logging.WARNING)``, which keeps the warnings among them) there.

    >>> import logging; logging.getLogger("hpctrain").setLevel(logging.INFO)  # in your app
"""
from __future__ import annotations

import logging
import sys
from typing import Optional, TextIO

ROOT = "hpctrain"
PROGRESS = f"{ROOT}.progress"
_HANDLER_MARK = "_hpctrain_cli_handler"


class _ProgressHandler(logging.Handler):
    """The message alone, to ``sys.stderr`` as it is when the record comes (a redirect
    or a test's capture applies), or ``sys.stdout`` for a record marked ``stdout``."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stdout if getattr(record, "stdout", False) else sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's own rule: report, never raise
            self.handleError(record)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler on ``sys.stderr`` as it is when each record comes, not as it was
    when configured (a later redirect or a test's capture applies; a closed one is not
    kept)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass  # always sys.stderr


_progress = logging.getLogger(PROGRESS)
if not any(isinstance(h, _ProgressHandler) for h in _progress.handlers):
    _progress.addHandler(_ProgressHandler())
    _progress.setLevel(logging.INFO)
    _progress.propagate = False  # once, whatever the application logs to


def progress_line(message: str, *, stdout: bool = False, level: int = logging.INFO) -> None:
    """A line the user sees by default (see the module docstring): ``message`` as it is,
    on stderr (``stdout=True``: stdout), through the ``hpctrain.progress`` logger."""
    _progress.log(level, message, extra={"stdout": stdout})


def get_logger(name: str) -> logging.Logger:
    """``hpctrain.<name>``."""
    return logging.getLogger(f"{ROOT}.{name}")


def configure(level: int = logging.INFO, stream: Optional[TextIO] = None) -> None:
    """Send hpctrain's messages to ``stream`` (stderr) as ``[hpctrain] message`` at
    ``level`` and above; once per process (a second call only changes the level)."""
    logger = logging.getLogger(ROOT)
    logger.setLevel(level)
    for h in logger.handlers:
        if getattr(h, _HANDLER_MARK, False):
            h.setLevel(level)
            return
    handler = (logging.StreamHandler(stream) if stream is not None else _StderrHandler())
    handler.setFormatter(logging.Formatter("[hpctrain] %(message)s"))
    handler.setLevel(level)
    setattr(handler, _HANDLER_MARK, True)
    logger.addHandler(handler)
    logger.propagate = False  # not twice when the application logs to stderr too
