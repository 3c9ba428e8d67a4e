"""Batches made ahead on a background thread: ``prefetch_batches=`` of a shard's
``iter_batches``, ``iter_torch_batches`` and ``iter_tf_batches`` (Ray Data's argument).

While the training step runs, a daemon thread reads (and converts) the next batches into
a queue of at most ``prefetch_batches``; h5py, NumPy's gathers and torch's copies release
the GIL, so reading overlaps the step. The batches are the same, in the same order, as
without the thread. An exception in the thread is raised in the consumer at the batch
where it happened. When the consumer stops early (``break`` out of the loop, ``close()``
of the iterator, an exception in the loop) the thread stops and is joined.
"""
from __future__ import annotations

import queue
import threading
from typing import Iterator, TypeVar

T = TypeVar("T")

_DONE = object()


class _Raised:
    """An exception of the reading thread, handed to the consumer in the queue."""

    def __init__(self, error: BaseException):
        self.error = error


def check_prefetch(prefetch_batches: object) -> int:
    """``prefetch_batches`` as an integer >= 0, or a ValueError naming it."""
    if isinstance(prefetch_batches, bool) or not isinstance(prefetch_batches, int) or \
            prefetch_batches < 0:
        raise ValueError(f"prefetch_batches: expected an integer >= 0 (0: no background "
                         f"thread), got {prefetch_batches!r}")
    return prefetch_batches


def _fill(source: Iterator[T], out: "queue.Queue[object]", stop: threading.Event) -> None:
    """The thread: ``source``'s items into ``out``, then ``_DONE`` (or the error)."""
    try:
        for item in source:
            out.put(item)
            if stop.is_set():
                return
        out.put(_DONE)
    except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
        out.put(_Raised(e))
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


def _drain(q: "queue.Queue[object]") -> None:
    try:
        while True:
            q.get_nowait()
    except queue.Empty:
        pass


def prefetch(source: Iterator[T], prefetch_batches: int) -> Iterator[T]:
    """``source``'s items, made up to ``prefetch_batches`` ahead by a daemon thread
    (started at the first ``next``); ``prefetch_batches=0``: in this thread, no other.

    >>> list(prefetch(iter(range(5)), 2))
    [0, 1, 2, 3, 4]
    """
    if check_prefetch(prefetch_batches) == 0:
        yield from source
        return
    q: "queue.Queue[object]" = queue.Queue(maxsize=prefetch_batches)
    stop = threading.Event()
    thread = threading.Thread(target=_fill, args=(source, q, stop), daemon=True,
                              name="hpctrain-prefetch")
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield item  # type: ignore[misc]
    finally:
        # Stopped early (or done): the thread puts at most one more item after it sees
        # ``stop``; emptying the queue until it has ended unblocks that put.
        stop.set()
        while thread.is_alive():
            _drain(q)
            thread.join(0.01)
        _drain(q)
