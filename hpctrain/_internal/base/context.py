"""Which training session this process is in: the one piece of worker state the rest of
hpctrain reads (the device lookup, the data adapters, the framework callbacks), kept apart
from :mod:`hpctrain._internal.worker.session` so that reading it does not import the worker.

Also the interface the backends implement for the session's agreement across ranks
(:class:`Coordinator`).
"""
from __future__ import annotations

import threading
from typing import Any, List, Optional, Sequence

class Coordinator:
    """Agreement across ranks: an element-wise max of a few small integers."""

    def allreduce_max(self, values: Sequence[int]) -> List[int]:  # pragma: no cover
        raise NotImplementedError


class SingleProcessCoordinator(Coordinator):
    def allreduce_max(self, values: Sequence[int]) -> List[int]:
        return list(values)


#: A stop requested before this process's session exists (a signal during start-up).
_PENDING_STOP = threading.Event()


def stop_pending() -> bool:
    """Whether a stop was requested in this process (before or after its session)."""
    return _PENDING_STOP.is_set()


def request_stop() -> None:
    """Ask for a coordinated stop (signal-handler safe: only sets flags). The request
    travels to every rank with the next agreement."""
    _PENDING_STOP.set()
    if _SESSION is not None:
        _SESSION.request_stop()


_SESSION: Optional[Any] = None  # a worker.session.Session


def set_session(session: Optional[Any]) -> None:
    global _SESSION
    _SESSION = session
    if session is not None and _PENDING_STOP.is_set():  # came while it was being made
        session.request_stop()


def get_session(caller: str = "this function") -> Any:
    if _SESSION is None:
        raise RuntimeError(
            f"hpctrain.{caller} must be called inside a training function started by a "
            "trainer (TorchTrainer(...).fit(), `hpctrain run job.toml`).\n"
            "HINT: pass your function to a trainer instead of calling it directly."
        )
    return _SESSION


def current_session() -> Optional[Any]:
    return _SESSION
