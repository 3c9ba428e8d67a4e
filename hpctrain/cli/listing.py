"""``hpctrain list [STORAGE_PATH]``: the runs and sweeps under a storage path.

One row per run directory (``state.json``) or sweep directory (``sweep.json``) directly
under the storage path, newest first: name, kind, status (a sweep's: its trials'
statuses counted), the last reported iteration, when it last changed and its path. Reads
only: nothing is locked or written, so it is safe beside running jobs.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import List, Optional

from hpctrain.errors import ConfigError
from hpctrain.rundir.layout import RunDir
from hpctrain.common.terminal import markup, plain as plain_text
from hpctrain.storage import storage_for
from hpctrain.tune.sweepdir import SweepDir, trial_id


@dataclass
class Entry:
    name: str
    kind: str          # "run" or "sweep"
    status: str
    iteration: str     # the last reported training iteration ("-" if none)
    updated: float     # mtime of state.json / sweep.json
    path: str


def _last_iteration(run: RunDir) -> str:
    """``_training_iteration`` of result.json's last line, reading only its end."""
    try:
        with open(run.result_file, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = [l for l in f.read().splitlines() if l.strip()]
        return str(json.loads(lines[-1]).get("_training_iteration", "-")) if lines else "-"
    except (OSError, ValueError, IndexError):
        return "-"


def _run_entry(path: str) -> Entry:
    run = RunDir(path)
    try:
        status = run.read_state().get("status", "UNKNOWN")
    except (OSError, ValueError):
        status = "UNREADABLE"
    return Entry(run.name, "run", status, _last_iteration(run),
                 os.path.getmtime(run.state_file), run.path if run.storage.local else path)


def _sweep_entry(path: str) -> Entry:
    sweep = SweepDir(path)
    manifest = sweep.read()
    trials = manifest.get("trials", [])
    counts = Counter(sweep.trial_status(t["index"], manifest) for t in trials)
    status = f"{len(trials)} trials: " + ", ".join(
        f"{n} {s.lower()}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return Entry(sweep.name, "sweep", status, "-", os.path.getmtime(sweep.manifest_file),
                 sweep.path)


def _trial_entries(path: str) -> List[Entry]:
    """A sweep's trials in trial order, each named ``SWEEP/trial_NNNNN`` (the name the
    other commands take); one not started yet: its status in the manifest."""
    sweep = SweepDir(path)
    manifest = sweep.read()
    out = []
    for t in manifest.get("trials", []):
        trial = sweep.trial_path(t["index"])
        if RunDir(trial).exists():
            entry = _run_entry(trial)
        else:
            entry = Entry(trial_id(t["index"]), "trial", sweep.trial_status(t["index"], manifest),
                          "-", os.path.getmtime(sweep.manifest_file), trial)
        entry.name, entry.kind = f"{sweep.name}/{entry.name}", "trial"
        out.append(entry)
    return out


def list_storage(storage_path: str, trials: bool = False) -> List[Entry]:
    """The runs and sweeps directly under ``storage_path``, newest first; with
    ``trials``, each sweep followed by its trials."""
    storage = storage_for(storage_path, "hpctrain list")
    names = set(storage.listdir(storage_path))
    if not storage.local:  # a run with no checkpoint yet: only its control directory
        control = storage.control_dir(storage_path)
        names |= set(os.listdir(control)) if os.path.isdir(control) else set()
    if not names and not storage.isdir(storage_path):
        raise ConfigError(f"{storage_path}: no such directory",
                          hint="give a storage path (run.storage_path of your jobs); "
                               "`hpctrain sites` shows the default one")
    out: List[Entry] = []
    for name in sorted(names):
        path = storage.run_location(storage_path, name)
        if SweepDir.is_sweep(path):
            out.append(_sweep_entry(path))
        elif RunDir(path).exists():  # (state.json: in the run's control directory)
            out.append(_run_entry(path))
    out.sort(key=lambda e: e.updated, reverse=True)
    if trials:
        out = [e for entry in out
               for e in [entry] + (_trial_entries(entry.path) if entry.kind == "sweep" else [])]
    return out


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def listing_data(storage_path: str, trials: bool = False) -> dict:
    """``hpctrain list --json``: the entries in the table's order (``iteration`` a number
    or null, ``updated`` in seconds since the epoch; a sweep's ``counts``: its trials per
    status)."""
    def counts(e: Entry) -> Optional[dict]:
        if e.kind != "sweep":
            return None
        sweep = SweepDir(e.path)
        manifest = sweep.read()
        return dict(Counter(sweep.trial_status(t["index"], manifest)
                            for t in manifest.get("trials", [])))

    return {"storage_path": storage_path, "entries": [
        {"name": e.name, "kind": e.kind, "status": e.status,
         "iteration": int(e.iteration) if e.iteration.isdigit() else None,
         "updated": e.updated, "path": e.path, "counts": counts(e)}
        for e in list_storage(storage_path, trials)]}


def print_listing(storage_path: str, stream=None, plain: Optional[bool] = None,
                  trials: bool = False) -> int:
    """A rich table on a terminal (a sweep's trials indented under it); tab-separated
    lines without a header when piped (``hpctrain list | grep RUNNING``)."""
    stream = stream or sys.stdout
    entries = list_storage(storage_path, trials)
    if plain is None:
        plain = not stream.isatty()
    if plain:
        for e in entries:
            stream.write("\t".join(plain_text(v).replace("\t", " ").replace("\n", " ")
                                    for v in [e.name, e.kind, e.status, e.iteration,
                                              _when(e.updated), e.path]) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    styles = {"FINISHED": "green", "FAILED": "red", "RUNNING": "cyan", "PENDING": "yellow"}
    t = Table()  # the heading is a line of its own: a table title wraps at the table's width
    for col in ("name", "kind", "status", "iteration", "updated"):
        t.add_column(col, justify="right" if col == "iteration" else "left")
    for e in entries:
        style = styles.get(e.status)
        name = "  " + e.name.rsplit("/", 1)[-1] if e.kind == "trial" else e.name
        t.add_row(markup(name), e.kind,
                  f"[{style}]{e.status}[/{style}]" if style else markup(e.status),
                  markup(e.iteration), _when(e.updated))
    console = Console(file=stream)
    console.print(f"{markup(storage_path)}: "
                  f"{sum(e.kind != 'trial' for e in entries)} runs and sweeps", style="italic",
                  highlight=False, soft_wrap=True)
    console.print(t)
    return 0
