"""Bad nodes: a node blamed for a failure is kept out of the run's next allocation.

A failed attempt whose cause is a node failure or a hang (:mod:`.budgets`) blames the
node of the rank at fault: its error record's host, else the host its heartbeat named
(a rank killed without a traceback). The node is recorded in ``state.json``'s
``bad_nodes``; at the next requeue the newest of them are excluded from the new
allocation (Slurm: the continuation is submitted with ``--exclude``; see
:meth:`hpctrain.schedulers.base.Scheduler.requeue_excluding`), within a bound: never
more than ``FailureConfig.max_excluded_nodes``, and never so many that the job's nodes
no longer fit its partition.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional

from hpctrain.common.fsutil import read_json
from hpctrain.worker.heartbeat import HEARTBEAT_FILE


def blamed_host(attempt_dir: str, rank: int, host: str = "") -> str:
    """The node of ``rank`` in an attempt: ``host`` when known, else its heartbeat's."""
    if host or rank < 0:
        return host
    beat = read_json(os.path.join(attempt_dir, HEARTBEAT_FILE.format(rank=rank))) or {}
    return str(beat.get("host") or "")


def blame(state: Dict[str, Any], host: str, cause: str, attempt: int, job_id: str) -> None:
    """Record in ``state`` (inside ``update_state``) that ``host`` failed an attempt."""
    if host:
        state.setdefault("bad_nodes", []).append(
            {"host": host, "cause": cause, "attempt": attempt, "job_id": job_id,
             "time": time.time()})


def to_exclude(state: Dict[str, Any], limit: int) -> List[str]:
    """The nodes to keep out of the next allocation: the most recently blamed distinct
    ones, at most ``limit``."""
    hosts: List[str] = []
    for rec in reversed(state.get("bad_nodes") or []):
        if len(hosts) >= max(0, limit):
            break
        if rec.get("host") and rec["host"] not in hosts:
            hosts.append(rec["host"])
    return sorted(hosts)


def exclusion_limit(max_excluded: int, partition_nodes: Optional[int], job_nodes: int) -> int:
    """How many nodes may be excluded: ``max_excluded``, and no more than the partition
    can spare for a job of ``job_nodes`` nodes (unknown partition size: ``max_excluded``).

    >>> exclusion_limit(4, 2, 1), exclusion_limit(4, 2, 2), exclusion_limit(4, None, 8)
    (1, 0, 4)
    """
    if partition_nodes is None:
        return max_excluded
    return max(0, min(max_excluded, partition_nodes - job_nodes))
