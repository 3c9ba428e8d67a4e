"""Which training session this process is in: the one piece of worker state the rest of
hpctrain reads (the device lookup, the data adapters, the framework callbacks), kept apart
from :mod:`hpctrain.worker.session` so that reading it does not import the worker.

Also the interface the backends implement for the session's agreement across ranks
(:class:`Coordinator`), and :class:`Posted`, an agreement in flight.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable, List, Optional, Sequence

#: bytes per integer of :meth:`Coordinator.broadcast_bytes`'s generic form (non-negative
#: in an int64)
_CHUNK = 7


class Posted:
    """An element-wise max in flight (:meth:`Coordinator.allreduce_max_async`):
    :meth:`wait` blocks until every rank has posted its values and returns the result
    (the same on every rank), or raises the collective's error. Waiting again returns
    the same values."""

    __slots__ = ("_finish", "_values")

    def __init__(self, finish: Callable[[], List[int]]):
        self._finish: Optional[Callable[[], List[int]]] = finish
        self._values: List[int] = []

    def wait(self) -> List[int]:
        if self._finish is not None:
            finish, self._finish = self._finish, None
            self._values = finish()
        return self._values


class _Box:
    """One job of :class:`_PostingThread`: its result or its error, once done."""

    __slots__ = ("done", "values", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.values: List[int] = []
        self.error: Optional[BaseException] = None

    def result(self) -> List[int]:
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.values


class _PostingThread(threading.Thread):
    """Runs a coordinator's blocking ``allreduce_max`` calls in order, off the caller's
    thread (the generic :meth:`Coordinator.allreduce_max_async`)."""

    def __init__(self, reduce: Callable[[Sequence[int]], List[int]]):
        super().__init__(name="hpctrain-agreement", daemon=True)
        self._reduce = reduce
        self.jobs: "queue.SimpleQueue[Any]" = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            values, box = self.jobs.get()
            try:
                box.values = self._reduce(values)
            except BaseException as e:  # handed to the waiter
                box.error = e
            box.done.set()


class Coordinator:
    """Agreement across ranks: an element-wise max of a few small integers. Also what
    ``hpctrain.train.collective`` needs, built on it (a backend may do them faster).

    :meth:`allreduce_max_async` posts one without waiting. Every rank posts the same
    sequence of operations; a caller waits for a posted one before its next blocking
    operation on the same coordinator (the generic form runs the blocking one on a
    thread of its own, and the two must not overlap)."""

    _poster: Optional[_PostingThread] = None

    def allreduce_max(self, values: Sequence[int]) -> List[int]:  # pragma: no cover
        raise NotImplementedError

    def allreduce_max_async(self, values: Sequence[int]) -> Posted:
        """:meth:`allreduce_max` without waiting for the other ranks: the result comes
        from the returned :class:`Posted`. Generic form: a thread of this coordinator
        runs the blocking call (a backend with a non-blocking collective overrides it)."""
        if self._poster is None:
            self._poster = _PostingThread(self.allreduce_max)
            self._poster.start()
        box = _Box()
        self._poster.jobs.put(([int(v) for v in values], box))
        return Posted(box.result)

    def barrier(self) -> None:
        """Return once every rank has called it."""
        self.allreduce_max([0])

    def broadcast_bytes(self, data: Optional[bytes]) -> bytes:
        """Rank 0's ``data`` on every rank (the other ranks pass None): its length, then
        its bytes as integers, each an element-wise max where the other ranks give 0."""
        (size,) = self.allreduce_max([len(data) if data is not None else 0])
        count = -(-size // _CHUNK)
        if data is not None:
            padded = data.ljust(count * _CHUNK, b"\0")
            values = [int.from_bytes(padded[i:i + _CHUNK], "big")
                      for i in range(0, len(padded), _CHUNK)]
        else:
            values = [0] * count
        out = self.allreduce_max(values) if count else []
        return b"".join(int(v).to_bytes(_CHUNK, "big") for v in out)[:size]


class SingleProcessCoordinator(Coordinator):
    def allreduce_max(self, values: Sequence[int]) -> List[int]:
        return list(values)

    def broadcast_bytes(self, data: Optional[bytes]) -> bytes:
        return data or b""


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
