"""Goodput measured from a run's own records: where its wall time went, per attempt and
for the whole run, queue wait included.

The records: ``state.json``'s submissions (when each job was submitted) and attempts
(started, ended, outcome, the supervisor's ``first_progress``, ``hang``, ``pace``,
``straggler``), and ``result.json``'s rows (rank 0's reports: ``_timestamp``,
``_time_this_iter_s``, ``checkpoint_dir_name``), and the committed checkpoints' records
(``commit_seconds``, ``time``). Row times are whole seconds: where the supervisor saw no
heartbeat (a training shorter than the heartbeat's period), the start-up's end is known
to about a second. The run's wall time runs from its first
submission (or its creation, for a run started here) to the end of its last attempt,
and is cut into parts that add up to it:

* **queue**: before each allocation's first attempt: from the submission (the first
  allocation) or the end of the previous allocation's last attempt (the batch step's own
  start is in it);
* **start-up**: from an attempt's start (or the previous attempt's end in the same
  allocation) to its first progress: the ranks' start, the process group, the restore;
* **checkpoint**: how long reports with a checkpoint blocked the training: each committed
  checkpoint's ``commit_seconds`` (from its report's start to its commit); for one that
  retention deleted since, the mean of the attempt's (or the run's) kept ones;
* **hang**: the watchdog's limit in an attempt it ended;
* **lost**: work done after an attempt's last committed checkpoint that a failure threw
  away (redone by the next attempt), and the stop after the warning;
* **straggler**: in an attempt with a straggler warning, the share of its training time
  the slowest rank cost (1 − 1/ratio, an estimate);
* **productive**: the rest.
"""
from __future__ import annotations

import statistics
from typing import Any, Dict, List, Optional

PARTS = ("queue", "startup", "checkpoint", "hang", "lost", "straggler", "productive")


def _rows_in(rows: List[Dict[str, Any]], start: float, end: float) -> List[Dict[str, Any]]:
    # _timestamp is whole seconds (Ray's): a row of this attempt is within a second of it
    return [r for r in rows if isinstance(r.get("_timestamp"), (int, float))
            and start - 1 <= r["_timestamp"] <= end + 1]


def _attempt(a: Dict[str, Any], begin: float, rows: List[Dict[str, Any]],
             checkpoints: Dict[str, Dict[str, Any]]) -> Dict[str, float]:
    """The parts of one attempt, from ``begin`` (its start, or the previous attempt's end
    in the same allocation) to its end."""
    end = float(a.get("ended") or a.get("started") or begin)
    total = max(0.0, end - begin)
    first = a.get("first_progress")
    mine = _rows_in(rows, float(a.get("started") or begin), end)
    if first is None and mine:  # no heartbeat records: the first report's start
        first = mine[0]["_timestamp"] - float(mine[0].get("_time_this_iter_s") or 0.0)
    train_from = min(end, max(begin, float(first))) if first is not None else end
    parts = dict.fromkeys(PARTS[1:], 0.0)
    parts["startup"] = train_from - begin
    training = end - train_from
    names = [r["checkpoint_dir_name"] for r in mine if r.get("checkpoint_dir_name")]
    known = [float(checkpoints[n]["commit_seconds"]) for n in names
             if "commit_seconds" in checkpoints.get(n, {})]
    everywhere = [float(m["commit_seconds"]) for m in checkpoints.values()
                  if "commit_seconds" in m]
    mean = statistics.mean(known or everywhere) if known or everywhere else 0.0
    parts["checkpoint"] = min(training, sum(
        float(checkpoints.get(n, {}).get("commit_seconds", mean)) for n in names))
    if a.get("outcome") != "FINISHED":
        saved = [float(checkpoints.get(r["checkpoint_dir_name"], {}).get("time")
                       or r["_timestamp"]) for r in mine if r.get("checkpoint_dir_name")]
        since = max(train_from, saved[-1]) if saved else train_from
        tail = max(0.0, min(end - since, training - parts["checkpoint"]))
        if a.get("hang"):
            parts["hang"] = min(tail, float(a["hang"].get("limit_s") or 0.0))
        parts["lost"] = tail - parts["hang"]
    rest = training - parts["checkpoint"] - parts["hang"] - parts["lost"]
    ratio = float((a.get("pace") or {}).get("ratio") or 1.0)
    if a.get("straggler") and ratio > 1:
        parts["straggler"] = rest * (1 - 1 / ratio)
    parts["productive"] = rest - parts["straggler"]
    parts["wall"] = total
    return parts


def goodput(state: Dict[str, Any], rows: List[Dict[str, Any]],
            checkpoints: Optional[Dict[str, Dict[str, Any]]] = None
            ) -> Optional[Dict[str, Any]]:
    """``{"attempts": [{"attempt", "job_id", "queue", "startup", …, "wall"}], "total":
    {part: seconds, "wall": …}, "goodput": productive / wall}``; None before an attempt
    ended. ``checkpoints``: the committed ones' records by name."""
    attempts = [a for a in state.get("attempts") or [] if a.get("started")]
    if not attempts or not attempts[0].get("ended"):
        return None
    submitted = [float(s["time"]) for s in state.get("submissions") or [] if s.get("time")]
    origin = min([float(state.get("created") or attempts[0]["started"])] + submitted)
    out: List[Dict[str, Any]] = []
    previous: Optional[Dict[str, Any]] = None
    for a in attempts:
        if a.get("outcome") == "RUNNING" or not a.get("ended"):
            break
        started = float(a["started"])
        new_allocation = previous is None or previous.get("job_id") != a.get("job_id")
        gap_from = origin if previous is None else float(previous["ended"])
        queue = max(0.0, started - gap_from) if new_allocation else 0.0
        parts = _attempt(a, started if new_allocation else gap_from, rows, checkpoints or {})
        parts["queue"] = queue
        parts["wall"] += queue
        out.append({"attempt": a.get("attempt"), "job_id": a.get("job_id"),
                    "outcome": a.get("outcome"),
                    **{k: round(parts[k], 3) for k in PARTS + ("wall",)}})
        previous = a
    total = {k: round(sum(p[k] for p in out), 3) for k in PARTS + ("wall",)}
    return {"attempts": out, "total": total,
            "goodput": round(total["productive"] / total["wall"], 4) if total["wall"] else None}


def describe(report: Optional[Dict[str, Any]]) -> List[str]:
    """Lines for ``hpctrain results``: the whole run, then each attempt."""
    if not report:
        return []

    def parts(p: Dict[str, Any]) -> str:
        return ", ".join(f"{k} {p[k]:.1f}" for k in PARTS if p[k] >= 0.05)

    t = report["total"]
    lines = [f"goodput {report['goodput']:.1%} of {t['wall']:.1f} s wall time (s): {parts(t)}"]
    for a in report["attempts"]:
        lines.append(f"  attempt {a['attempt']} ({a['outcome']}, job {a['job_id']}, "
                     f"{a['wall']:.1f} s): {parts(a)}")
    return lines
