"""The run's figures for operators, as a Prometheus text file.

Ray Train exports its controller's state, the time its worker groups took to start and
the time each worker spent blocked in ``report()`` to Prometheus. hpctrain has no metrics
server; the supervisor writes the same figures, under Ray's metric and label names, to
``<run dir>/metrics.prom`` in the text exposition format that node exporter's textfile
collector reads — and, when ``$HPCTRAIN_PROMETHEUS_DIR`` names a directory (the
collector's), to ``hpctrain_<run name>_<8 hex>.prom`` there too. Each file is replaced
atomically (written beside it, then renamed), every few seconds while the run's ranks
run and once more at the end, so a scrape never reads half a file.

The figures come from files the run already writes: ``state.json`` (the status, the
attempts) and each attempt's rank heartbeats (``ready_at``: when the rank's process
group formed; ``report_blocked_s``: its time in ``report()``).
"""
from __future__ import annotations

import glob
import hashlib
import os
import re
import time
from typing import Any, Dict, List, Tuple

from hpctrain.common.fsutil import atomic_write_bytes, read_json
from hpctrain.rundir.layout import RunDir

#: The run's own file, and the variable naming a textfile collector's directory.
METRICS_FILE = "metrics.prom"
ENV_DIR = "HPCTRAIN_PROMETHEUS_DIR"
#: How often the supervisor's poll rewrites the file (seconds).
WRITE_EVERY_S = 5.0
#: Ray's controller states that a batch run goes through, and hpctrain's REQUEUED (a
#: clean stop that continues in a new allocation).
STATES = ("INITIALIZING", "RUNNING", "RESTARTING", "REQUEUED", "FINISHED", "ERRORED",
          "ABORTED")
_STATUS = {"FINISHED": "FINISHED", "FAILED": "ERRORED", "STOPPED": "ABORTED",
           "INTERRUPTED": "ABORTED", "REQUEUED": "REQUEUED", "PREEMPTED": "REQUEUED"}
_HEARTBEAT = re.compile(r"heartbeat\.rank-(\d+)\.json$")


def controller_state(state: Dict[str, Any], ready: int, num_workers: int) -> str:
    """Ray's ``TrainControllerStateType`` of a run: from its ``state.json`` and how
    many ranks of the current attempt are ready."""
    status = state.get("status")
    if status in _STATUS:
        return _STATUS[status]
    attempts = state.get("attempts") or []
    if status == "RUNNING" and attempts:
        if ready >= max(num_workers, 1):
            return "RUNNING"
        return "RESTARTING" if len(attempts) > 1 else "INITIALIZING"
    return "INITIALIZING"


def _heartbeats(run: RunDir, attempt: int) -> Dict[int, Dict[str, Any]]:
    out = {}
    for path in glob.glob(os.path.join(run.attempt_dir(attempt), "heartbeat.rank-*.json")):
        m = _HEARTBEAT.search(path)
        record = read_json(path) if m else None
        if isinstance(record, dict):
            out[int(m.group(1))] = record
    return out


def figures(run: RunDir, num_workers: int) -> Tuple[str, float, Dict[int, float]]:
    """(controller state, worker groups' total start time, each rank's total time
    blocked in report()), over every attempt of the run so far."""
    state = run.read_state()
    start_total = 0.0
    blocked: Dict[int, float] = {}
    ready_now = 0
    attempts = state.get("attempts") or []
    for i, a in enumerate(attempts):
        beats = _heartbeats(run, int(a.get("attempt", i + 1)))
        ready = [b["ready_at"] for b in beats.values() if b.get("ready_at")]
        if ready and len(ready) >= max(num_workers, 1) and a.get("started"):
            start_total += max(0.0, max(ready) - float(a["started"]))
        for rank, b in beats.items():
            blocked[rank] = blocked.get(rank, 0.0) + float(b.get("report_blocked_s") or 0.0)
        if i == len(attempts) - 1:
            ready_now = len(ready)
    return controller_state(state, ready_now, num_workers), start_total, blocked


def _labels(labels: Dict[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return "{" + ",".join(f'{k}="{esc(str(v))}"' for k, v in labels.items()) + "}"


def render(run: RunDir, num_workers: int) -> str:
    """The metrics file's text (Prometheus text exposition format 0.0.4)."""
    state, start_total, blocked = figures(run, num_workers)
    base = {"ray_train_run_name": run.name, "ray_train_run_id": run.path}
    lines: List[str] = [
        "# HELP train_controller_state Current state of the run's controller (hpctrain: "
        "its supervisor); 1 for the current state, 0 for the others.",
        "# TYPE train_controller_state gauge"]
    for s in STATES:
        lines.append(f"train_controller_state{_labels({**base, 'ray_train_controller_state': s})}"
                     f" {1 if s == state else 0}")
    lines += ["# HELP train_worker_group_start_total_time_s Total time taken to start the "
              "worker group (every attempt: from its start to its last rank's process group).",
              "# TYPE train_worker_group_start_total_time_s gauge",
              f"train_worker_group_start_total_time_s{_labels(base)} {start_total:.6f}",
              "# HELP train_report_total_blocked_time_s Cumulative time in seconds a worker "
              "spent in report() (every attempt).",
              "# TYPE train_report_total_blocked_time_s gauge"]
    for rank in sorted(blocked):
        lines.append(f"train_report_total_blocked_time_s"
                     f"{_labels({**base, 'ray_train_worker_world_rank': str(rank)})} "
                     f"{blocked[rank]:.6f}")
    return "\n".join(lines) + "\n"


def collector_path(run: RunDir, directory: str) -> str:
    """The run's file in a textfile collector's ``directory``: its name, and a hash of
    its path (two runs of one name never share a file)."""
    digest = hashlib.sha256(run.path.encode()).hexdigest()[:8]
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", run.name)
    return os.path.join(directory, f"hpctrain_{safe}_{digest}.prom")


class MetricsFile:
    """Rewrites the run's metrics file with the supervisor's poll (every
    :data:`WRITE_EVERY_S`) and at the end (:meth:`write`)."""

    def __init__(self, run: RunDir, num_workers: int):
        self.run, self.num_workers = run, num_workers
        self._last = 0.0
        self.paths = [os.path.join(run.path, METRICS_FILE)]
        directory = os.environ.get(ENV_DIR)
        if directory:
            self.paths.append(collector_path(run, directory))

    def tick(self) -> None:
        if time.monotonic() - self._last >= WRITE_EVERY_S:
            self.write()

    def write(self) -> None:
        self._last = time.monotonic()
        try:
            text = render(self.run, self.num_workers).encode()
        except (OSError, ValueError):
            return  # state.json being replaced, or unreadable: the next tick
        for i, path in enumerate(self.paths):
            # the run's own file is private as the run is; a collector's is world-readable
            # (it holds no secret: names, states, seconds) for the exporter's user
            try:
                atomic_write_bytes(path, text, sync=False,
                                   mode=self.run.file_mode if i == 0 else 0o644)
            except OSError:
                pass  # a full disk or a vanished collector directory: never the run's end


__all__ = ["MetricsFile", "METRICS_FILE", "ENV_DIR", "STATES", "render", "figures",
           "controller_state", "collector_path"]

