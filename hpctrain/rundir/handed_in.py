"""Checkpoints every rank handed in, committed even when the attempt ends before the
ranks agreed on them.

Between agreement reports (``worker/session.py``) a checkpoint handed in is only
*staged* (``checkpoints/.tmp_checkpoint_i<i>/``); rank 0 publishes it at the next agreement.
Ray commits a reported checkpoint before ``report()`` returns, so a crash, a ``kill -9`` or a
hang right after a report must not lose it. Each rank therefore keeps a mark of its
progress in ``<attempt>/reported.rank-R``: 24 bytes mapped into memory (one store per
report, no system call), which the kernel keeps when the process dies:

* the last report whose staging this rank finished (``report()`` got past it),
* the lowest report whose commit this rank still runs in the background (asynchronous
  checkpoints, the node-local tier), or :data:`NOTHING_IN_FLIGHT`, and
* the attempt's world size (which marks must all be there).

When an attempt ends, the supervisor (only it, while no rank runs) reads every rank's
mark: a staged report that every rank got past, with no background commit of it or an
earlier one unfinished, has all its shards (:func:`complete_through`), and is published as
rank 0 would have published it (:func:`finish_handed_in`). Anything less stays staged
and is removed as before (``RunDir.clean_incomplete``). A missing or unreadable mark
(a rank that never started, a filesystem that did not carry the page of a rank on another
node yet) publishes nothing: the rule errs towards the previous checkpoint, never towards
an incomplete one.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from hpctrain.common.fsutil import json_default, read_json
from hpctrain.common.log import get_logger
from hpctrain.rundir.commit import REPORT_KEY, publish, staged_iterations
from hpctrain.rundir.layout import SHARD_MANIFEST, RunDir
from hpctrain.config import CheckpointConfig

_log = get_logger("commit")

MARK_FILE = "reported.rank-{rank}"
#: "no background commit" in a mark (the session's agreement uses the same value)
NOTHING_IN_FLIGHT = 2**31 - 1
#: (last report staged, lowest report still committing in the background, world size)
_FORMAT = "<qqq"
_SIZE = struct.calcsize(_FORMAT)


class ReportMark:
    """A rank's mark (see the module's docstring), written by its training thread."""

    def __init__(self, attempt_dir: str, rank: int, *, world_size: int, start_iteration: int,
                 mode: int):
        path = os.path.join(attempt_dir, MARK_FILE.format(rank=rank))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)
        try:
            os.ftruncate(fd, _SIZE)
            self._map: Optional[mmap.mmap] = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)  # the mapping keeps the file
        self._view = memoryview(self._map).cast("q")
        self._view[2] = world_size
        self.set(start_iteration, NOTHING_IN_FLIGHT)

    def set(self, staged_through: int, in_flight: int) -> None:
        view = self._view
        view[1] = in_flight  # the lower bound first: a reader never sees too much done
        view[0] = staged_through

    def close(self) -> None:
        if self._map is not None:
            self._view.release()
            self._map.close()
            self._map = None


def read_marks(attempt_dir: str) -> Optional[List[Tuple[int, int]]]:
    """Every rank's (staged through, in flight), by rank; None when one is missing or
    damaged, or the ranks disagree about the world size."""
    marks: List[Tuple[int, int]] = []
    world_size = None
    rank = 0
    while world_size is None or rank < world_size:
        try:
            with open(os.path.join(attempt_dir, MARK_FILE.format(rank=rank)), "rb") as f:
                data = f.read(_SIZE)
        except OSError:
            return None
        if len(data) != _SIZE:
            return None
        staged, in_flight, size = struct.unpack(_FORMAT, data)
        if size < 1 or (world_size is not None and size != world_size):
            return None
        world_size = size
        marks.append((staged, in_flight))
        rank += 1
    return marks


def complete_through(marks: Sequence[Tuple[int, int]],
                     shard_done: Callable[[int, int], bool]) -> int:
    """The last report every shard of which is staged: every rank got past it and no rank
    still had a background commit of it (or of an earlier report) running.
    ``shard_done(iteration, rank)``: that rank's shard of that report is staged (a
    background commit that finished after the rank's last report)."""
    through = min(staged for staged, _ in marks)
    for rank, (_, in_flight) in enumerate(marks):
        if in_flight != NOTHING_IN_FLIGHT and not shard_done(in_flight, rank):
            through = min(through, in_flight - 1)
    return through


def report_record(metrics: Dict[str, Any], started: float,
                  data_epochs: Optional[Dict[str, Any]],
                  validation: Optional[Dict[str, Any]],
                  metadata: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """What rank 0 puts in its shard manifest: what it would pass to ``publish``."""
    return {"metrics": json.loads(json.dumps(metrics, default=json_default)), "started": started,
            "data_epochs": data_epochs, "validation": validation, "metadata": metadata}


def _shard(run: RunDir, iteration: int, rank: int) -> Optional[Dict[str, Any]]:
    return read_json(os.path.join(run.staging_tmp(iteration), SHARD_MANIFEST.format(rank=rank)))


def finish_handed_in(run: RunDir, attempt: int, config: CheckpointConfig, *,
                     first_index: int = 0) -> List[str]:
    """The supervisor, after an attempt ended (no rank runs): publish, in report order,
    the staged checkpoints every rank handed in completely (see the module's docstring).
    Returns the names committed."""
    marks = read_marks(run.attempt_dir(attempt))
    if marks is None:
        return []
    world_size = len(marks)
    through = complete_through(marks, lambda it, r: _shard(run, it, r) is not None)
    committed: List[str] = []
    for it in staged_iterations(run, up_to=through):
        record = (_shard(run, it, 0) or {}).get(REPORT_KEY)
        if not isinstance(record, dict):
            # rank 0 handed in nothing at this report: its metrics and the loaders' resume
            # positions are unknown here, so it is not published (removed as before)
            continue
        # (no commit_seconds: from the report's start to now is not what a commit costs,
        # and the warning's lead time is measured from it, lead.py)
        name, dropped = publish(
            run, it, first_index, metrics=record.get("metrics") or {},
            world_size=world_size, config=config, started=None,
            metadata=record.get("metadata"), data_epochs=record.get("data_epochs"),
            validation=record.get("validation"))
        for path in dropped:
            run.storage.delete(path)
        if name:
            committed.append(name)
            _log.info("committed %s: the checkpoint every rank handed in at report %d, "
                      "which the attempt ended before publishing", name, it)
    return committed


__all__ = ["ReportMark", "read_marks", "complete_through", "finish_handed_in",
           "report_record", "NOTHING_IN_FLIGHT", "MARK_FILE", "REPORT_KEY"]
