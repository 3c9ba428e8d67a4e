"""hpctrain's own messages go through :mod:`logging`, under the ``hpctrain`` logger.

As a library hpctrain configures nothing (the logging HOWTO's rule for libraries): its
INFO notes (a restart of the worker group, a requeue, a submitted array) stay quiet
unless the application configures logging, and its warnings reach stderr through
Python's last-resort handler. The command line (``hpctrain …``) and the batch step in
the job attach one handler that writes ``[hpctrain] message`` to stderr, at INFO by
default, WARNING with ``--quiet``, DEBUG with ``-v``. A training's own progress lines
(``iter 3 | 1.2s | loss=…``) follow ``RunConfig.verbose``, as in Ray Train.

    >>> import logging; logging.getLogger("hpctrain").setLevel(logging.INFO)  # in your app
"""
from __future__ import annotations

import logging
import sys
from typing import Optional, TextIO

ROOT = "hpctrain"
_HANDLER_MARK = "_hpctrain_cli_handler"


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
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter("[hpctrain] %(message)s"))
    handler.setLevel(level)
    setattr(handler, _HANDLER_MARK, True)
    logger.addHandler(handler)
    logger.propagate = False  # not twice when the application logs to stderr too
