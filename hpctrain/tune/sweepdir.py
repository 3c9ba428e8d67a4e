"""The sweep directory: its layout, its manifest, its trials' statuses, and following its
jobs. This is the public face of a sweep on disk: the CLI (``hpctrain sweep``, ``results``,
``status``, ``list``) and everything outside :mod:`hpctrain.tune` reads sweeps through it.

```
<storage_path>/<sweep name>/
  sweep.json             the manifest: seed, search space, tune settings, and per trial its
                         id, config and status; the arrays submitted (written atomically,
                         under sweep.json.lock)
  arrays/array-S-C.sh    the array scripts of submission S (C: one per array after a split)
  trial_00000/ …         one normal run directory per trial (spec.toml, state.json,
                         result.json, checkpoints/, logs/, job.sh: the trial alone)
```
Each trial's ``state.json`` is the truth about it; the manifest's statuses are refreshed
from them (by the driver, and by each array task when it starts and ends).
"""
from __future__ import annotations

import contextlib
import os
import secrets
import time
from typing import Any, Dict, Iterator, List, Optional

from filelock import FileLock

from .._version import __version__
from ..errors import ConfigError
from ..schedulers import get_scheduler
from hpctrain.common.fsutil import atomic_write_json, read_json
from hpctrain.rundir.layout import RunDir
from hpctrain.common.trust import make_private_dir, modes_of, share_of
from . import search
from .search import deep_update
from hpctrain.common.log import progress_line

MANIFEST = "sweep.json"
FINISHED, FAILED, RUNNING, PENDING, INTERRUPTED = (
    "FINISHED", "FAILED", "RUNNING", "PENDING", "INTERRUPTED")

__all__ = ["SweepDir", "MANIFEST", "FINISHED", "FAILED", "RUNNING", "PENDING", "INTERRUPTED",
           "trial_id", "trial_index", "open_manifest", "check_json", "to_run",
           "train_loop_config", "stopped_by", "array_active", "own_job", "active", "follow"]


def trial_id(index: int) -> str:
    """``trial_00007``: the run directory of trial 7 under the sweep directory."""
    return f"trial_{index:05d}"


def trial_index(trial_id: str) -> int:
    """``trial_00007`` → 7."""
    return int(trial_id.rsplit("_", 1)[-1])


class SweepDir:
    """Paths and manifest of one sweep directory."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.path.abspath(os.fspath(path))

    name = property(lambda self: os.path.basename(self.path))
    manifest_file = property(lambda self: os.path.join(self.path, MANIFEST))
    #: the modes of what a sweep writes: those of its directory's share (private or group)
    file_mode = property(lambda self: modes_of(self.path)[1])
    script_mode = property(lambda self: modes_of(self.path)[2])

    @staticmethod
    def is_sweep(path: str | os.PathLike) -> bool:
        return os.path.isfile(os.path.join(os.fspath(path), MANIFEST))

    def exists(self) -> bool:
        return os.path.isfile(self.manifest_file)

    def trial_path(self, index: int) -> str:
        return os.path.join(self.path, trial_id(index))

    def read(self) -> Dict[str, Any]:
        return read_json(self.manifest_file, default={}) or {}

    @contextlib.contextmanager
    def update(self, timeout: float = 60) -> Iterator[Dict[str, Any]]:
        """Read, modify, write the manifest atomically under ``sweep.json.lock`` (waiting
        at most ``timeout`` s for it: :class:`filelock.Timeout`)."""
        # (checked every time: someone else's, or one others can write, is refused)
        make_private_dir(self.path, share=share_of(self.path), what="sweep directory")
        with FileLock(self.manifest_file + ".lock", timeout=timeout, mode=0o600):
            data = self.read()
            yield data
            data["updated"] = time.time()
            atomic_write_json(self.manifest_file, data, mode=self.file_mode)

    def set_trial(self, index: int, timeout: float = 60, **fields: Any) -> None:
        with self.update(timeout) as m:
            m["trials"][index].update(fields)

    def trial_status(self, index: int, manifest: Optional[Dict[str, Any]] = None) -> str:
        """The trial's status from its state.json, else what the manifest says."""
        run = RunDir(self.trial_path(index))
        if run.exists():
            status = run.read_state().get("status")
            if status:
                return status
        m = manifest if manifest is not None else self.read()
        return m["trials"][index].get("status", PENDING)

    def refresh(self) -> Dict[int, str]:
        """Every trial's status, written back to the manifest where it changed."""
        m = self.read()
        statuses = {t["index"]: self.trial_status(t["index"], m) for t in m.get("trials", [])}
        if any(m["trials"][i].get("status") != s for i, s in statuses.items()):
            with self.update() as fresh:
                for i, s in statuses.items():
                    fresh["trials"][i]["status"] = s
        return statuses

    def trial_paths(self, manifest: Optional[Dict[str, Any]] = None) -> List[str]:
        """Every trial's run directory, in trial order (also those not created yet)."""
        m = manifest if manifest is not None else self.read()
        return [self.trial_path(t["index"]) for t in m.get("trials", [])]


# --------------------------------------------------------------------------- the manifest
def open_manifest(sweep: SweepDir, *, space: Dict[str, Any], num_samples: int,
                  seed: Optional[int], settings: Dict[str, Any], shape: str, searched: bool,
                  where: str = "param_space", file: Optional[str] = None) -> Dict[str, Any]:
    """The sweep's manifest: created with every trial's config (``space`` sampled
    ``num_samples`` times with ``seed``, a fresh one recorded when None; with a search
    algorithm (``searched``) the configs are empty, asked for as each trial starts), or the
    existing one, whose trials are kept as they are (a re-run sees the same configs). A
    different search space in an existing sweep directory is refused, and so is a value
    JSON cannot hold (sweep.json records every config: a function or an object would come
    back as its repr). ``settings``: the tune settings it records (metric, mode…)."""
    space_tables = search.to_tables(space)
    check_json(space_tables, where, file)
    fingerprint = search.fingerprint(space, num_samples)
    if sweep.exists():
        m = sweep.read()
        if m.get("fingerprint") != fingerprint or (seed is not None and m.get("seed") != seed):
            raise ConfigError(
                f"{where}: the sweep {sweep.name!r} at {sweep.path} was made with another "
                f"search space, num_samples or seed", file=file,
                hint="pick another name for this sweep, or run the same space again to "
                     "finish the trials that did not finish")
        return m
    seed = secrets.randbelow(2 ** 31) if seed is None else seed
    configs = ([{} for _ in range(search.count(space, num_samples))] if searched
               else search.expand(space, num_samples, seed))
    asked = {"suggested": False} if searched else {}  # (their configs: as they start)
    with sweep.update() as m:
        m.update({"name": sweep.name, "created": time.time(), "hpctrain_version": __version__,
                  "seed": seed, "num_samples": num_samples, "fingerprint": fingerprint,
                  "param_space": space_tables, "config_shape": shape, **settings,
                  "trials": [{"index": i, "trial_id": trial_id(i), "config": c,
                              "status": PENDING, **asked} for i, c in enumerate(configs)],
                  "arrays": []})
    return sweep.read()  # as every later run sees it (tuples are lists in JSON)


def check_json(value: Any, key: str, file: Optional[str] = None) -> None:
    """Refuse what JSON cannot hold as it is: only None, booleans, numbers, strings, lists
    (tuples) and tables with string keys.

    >>> check_json({"lr": [0.1, 0.2], "opt": "adam"}, "param_space")
    >>> check_json({"act": {"grid_search": [max]}}, "param_space")
    Traceback (most recent call last):
    ...
    hpctrain.errors.ConfigError: param_space.act.grid_search[0]: expected a JSON value ...
    HINT: ...
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_json(v, f"{key}[{i}]", file)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigError(f"{key}: expected string keys (JSON), got {k!r}", file=file,
                                  hint="sweep.json records every trial's config as JSON")
            check_json(v, f"{key}.{k}", file)
        return
    raise ConfigError(
        f"{key}: expected a JSON value (number, string, boolean, list or table of those), "
        f"got {type(value).__name__} {value!r}", file=file,
        hint="sweep.json records every trial's config, and a re-run or Tuner.restore reads "
             "it back: search over names or numbers and look the object up in the training "
             "function (e.g. tune.choice([\"adam\", \"sgd\"]))")


def to_run(sweep: SweepDir, manifest: Dict[str, Any], retry_failed: bool = False) -> List[int]:
    """The trials that did not finish (FAILED ones only with ``retry_failed``)."""
    skip = {FINISHED} if retry_failed else {FINISHED, FAILED}
    return [t["index"] for t in manifest["trials"]
            if sweep.trial_status(t["index"], manifest) not in skip]


def train_loop_config(base: Optional[Dict[str, Any]], config: Dict[str, Any], shape: str
                      ) -> Dict[str, Any]:
    """A trial's train_loop_config: its sampled config merged over the trainer's."""
    update = config.get("train_loop_config", {}) if shape == "train_loop_config" else config
    return deep_update(base or {}, update)


def stopped_by(run: RunDir) -> Dict[str, Any]:
    """``{"stopped_by": why}`` for a trial its scheduler or a stopping criterion ended
    early (what sweep.json records beside its status), else {}."""
    why = run.read_state().get("stopped_by") if run.exists() else None
    return {"stopped_by": why} if why else {}


# --------------------------------------------------------------------------- following
def array_active(kind: str, job_id: str) -> bool:
    """True while any task of the array (or the job) is queued or running."""
    return get_scheduler(kind).array_active(job_id)


def own_job(sweep: SweepDir, index: int) -> Optional[Dict[str, Any]]:
    """The latest submission of trial ``index`` when it is a job of the trial's own (a
    resubmission after a stop: PBS), not an array task; else None."""
    subs = RunDir(sweep.trial_path(index)).read_state().get("submissions") or []
    return subs[-1] if subs and "array" not in subs[-1] else None


def active(sweep: SweepDir, manifest: Dict[str, Any], statuses: Dict[int, str]) -> bool:
    """True while the sweep's latest arrays, or a trial's own resubmitted job, are queued
    or running."""
    arrays = manifest.get("arrays", [])
    latest = max((a.get("submission", 0) for a in arrays), default=None)
    if any(array_active(a["scheduler"], a["job_id"]) for a in arrays
           if a.get("submission", 0) == latest):
        return True
    for i, status in statuses.items():
        if status in (FINISHED, FAILED, "STOPPED"):
            continue
        job = own_job(sweep, i)  # (REQUEUED, or RUNNING in it)
        if job and array_active(job["scheduler"], job["job_id"]):
            return True
    return False


def follow(sweep: SweepDir, *, verbose: int = 1, poll_s: float = 2.0,
           requeue_wait_s: float = 180.0) -> Dict[int, str]:
    """Show each trial's status changes until no job of the sweep is queued or running;
    return the statuses then. Ctrl-C detaches (the jobs run on) and re-raises."""
    seen: Dict[int, str] = {}
    waited = 0.0
    try:
        while True:
            statuses = sweep.refresh()
            for i, s in sorted(statuses.items()):
                if seen.get(i) != s and verbose >= 1 and (i in seen or s != PENDING):
                    progress_line(f"[hpctrain] {trial_id(i)}: {s}")
                seen[i] = s
            if not active(sweep, sweep.read(), statuses):
                # a task that requeued itself: its next instance shows up soon
                if any(s == "REQUEUED" for s in statuses.values()) and waited < requeue_wait_s:
                    waited += poll_s
                    time.sleep(poll_s)
                    continue
                break
            waited = 0.0
            time.sleep(poll_s)
    except KeyboardInterrupt:
        progress_line(f"\n[hpctrain] detached; the sweep's jobs keep running (nothing was "
                      f"cancelled).\n  its results so far:  hpctrain results {sweep.path}")
        raise
    return sweep.refresh()
