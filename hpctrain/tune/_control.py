"""What a sweep's trials decide for themselves: schedulers (ASHA, PBT), stopping criteria
(``RunConfig(stop=...)``) and search algorithms (Optuna), with no central driver.

Files in the sweep directory (see :mod:`.schedulers` for the rules):

```
<sweep>/tune_control.pkl        the scheduler, the stopping criteria, the search algorithm
                                (cloudpickle: written by Tuner.fit, read by every trial)
<sweep>/scheduler_state.json    the scheduler's shared state (+ .lock: a FileLock)
<sweep>/search/                 the search algorithm's storage (Optuna's journal file)
<trial>/.hpctrain/tune_config.json   the trial's current config when the sweep changed it
                                (a PBT exploit, an Optuna suggestion); the worker merges it
                                over its train_loop_config
<trial>/.hpctrain/attempts/N/tune_decision.json   rank 0's decision: the supervisor stops
                                the worker group and ends the trial (stop) or starts the
                                next attempt (restart)
```
"""
from __future__ import annotations

import logging
import os
import random
import shutil
import time
from typing import Any, Dict, Optional

import cloudpickle
from filelock import FileLock

from ..common.fsutil import atomic_write_bytes, atomic_write_json, json_bytes, read_json
from ..common.log import get_logger, progress_line
from ..rundir.layout import DECISION_FILE, RunDir, checkpoint_dir_name, read_results
from ..common.trust import load_trusted_pickle
from ..checkpoint import METADATA_FILE
from ..config import check_stop  # noqa: F401 (the tune side's name for it)
from ..worker.trial import CONTROL_FILE
from .schedulers import EXPLOIT, STOP, result_value
from .stopper import Stopper
from .sweepdir import FAILED, FINISHED, SweepDir, open_manifest, trial_id, trial_index
from .sweepdir import train_loop_config as merged_config

STATE_FILE = "scheduler_state.json"
CONFIG_FILE = "tune_config.json"      # in the trial's .hpctrain/

_log = get_logger("tune")


class TrialControl:
    """What every trial of a sweep consults at its reports (pickled into the sweep)."""

    def __init__(self, *, scheduler: Any = None, stop: Any = None, search_alg: Any = None,
                 metric: Optional[str] = None, mode: Optional[str] = None,
                 shape: str = "train_loop_config"):
        self.scheduler = scheduler
        self.stop = stop
        self.search_alg = search_alg
        self.metric = metric
        self.mode = mode
        self.shape = shape

    @property
    def active(self) -> bool:
        return any(x is not None for x in (self.scheduler, self.stop, self.search_alg))

    # What a trial's worker asks of it (hpctrain.worker.trial loads this object
    # from the sweep directory; the worker never imports hpctrain.tune).
    def report_hook(self, run_path: str, trial_id: str) -> Optional["ReportHook"]:
        """Rank 0's hook, consulted after each report; None without a scheduler or stop."""
        if self.scheduler is None and self.stop is None:
            return None
        return ReportHook(os.path.dirname(os.path.abspath(run_path)), run_path, trial_id, self)

    def applied_config(self, train_loop_config: Optional[Dict[str, Any]], run_path: str
                       ) -> Optional[Dict[str, Any]]:
        """The trial's config with the sweep's override (PBT, Optuna) merged in."""
        return applied_config(train_loop_config, run_path)


def stop_met(stop: Any, trial_id: str, result: Dict[str, Any]) -> Optional[str]:
    """Why ``result`` meets the stopping criteria (Ray: any ``result[key] >= value``),
    or None."""
    if stop is None:
        return None
    if isinstance(stop, dict):
        for k, v in stop.items():
            got = result_value(result, k)
            if isinstance(got, (int, float)) and not isinstance(got, bool) and got >= v:
                return f"stop criterion {k} >= {v} (got {got})"
        return None
    if stop(trial_id, result):
        return f"stop criterion {getattr(stop, '__name__', type(stop).__name__)}"
    if isinstance(stop, Stopper) and stop.stop_all():
        return f"stop criterion {type(stop).__name__}.stop_all()"
    return None


# --------------------------------------------------------------------------- files
def write_control(sweep_path: str, control: TrialControl) -> None:
    atomic_write_bytes(os.path.join(sweep_path, CONTROL_FILE), cloudpickle.dumps(control),
                       mode=0o600)


_CACHE: Dict[str, Any] = {}


def load_control(sweep_path: str) -> Optional[TrialControl]:
    path = os.path.join(sweep_path, CONTROL_FILE)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    key = (path, st.st_mtime_ns, st.st_size)
    if key not in _CACHE:
        _CACHE[key] = load_trusted_pickle(path, what="the sweep's control file")
    return _CACHE[key]


def config_override(run_path: str) -> Optional[Dict[str, Any]]:
    """The trial's current config written by the sweep (``{"shape":…, "config":…}``)."""
    return read_json(os.path.join(run_path, ".hpctrain", CONFIG_FILE))


def write_config_override(run_path: str, config: Dict[str, Any], shape: str) -> None:
    run = RunDir(run_path)
    run.create()  # (before the trial runs: private, or as the directory already is)
    atomic_write_json(os.path.join(run.internal_dir, CONFIG_FILE),
                      {"shape": shape, "config": config, "time": time.time()},
                      mode=run.file_mode)


def applied_config(train_loop_config: Optional[Dict[str, Any]], run_path: str
                   ) -> Optional[Dict[str, Any]]:
    """The worker's config: ``train_loop_config`` with the sweep's override merged in."""
    o = config_override(run_path)
    if not o:
        return train_loop_config
    return merged_config(train_loop_config, o["config"], o.get("shape", "train_loop_config"))


# --------------------------------------------------------------------------- rank 0
class ReportHook:
    """Rank 0 of a sweep's trial: consulted after each report (see :mod:`.schedulers`).
    ``on_report`` returns None (go on) or the decision it wrote (the caller ends)."""

    def __init__(self, sweep_path: str, run_path: str, trial_id: str, control: TrialControl):
        self.sweep_path = sweep_path
        self.run_path = run_path
        self.trial_id = trial_id
        self.control = control
        self.started = time.time()
        self._memo: Dict[str, Any] = {}  # what the scheduler's due() needs (ASHA's rungs)

    def on_report(self, row: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        result = dict(row)
        result.setdefault("training_iteration", row.get("_training_iteration"))
        result.setdefault("time_total_s", time.time() - self.started)
        result.setdefault("trial_id", self.trial_id)
        c = self.control
        why = stop_met(c.stop, self.trial_id, result)
        if why:
            return {"action": "stop", "reason": why,
                    "iteration": result["training_iteration"]}
        if c.scheduler is None or not c.scheduler.due(result, self._memo):
            return None
        path = os.path.join(self.sweep_path, STATE_FILE)
        # (seeded by the sweep, trial and report: a decision taken again after a restart
        # is the same one)
        rng = random.Random(f"{os.path.basename(self.sweep_path)}:{self.trial_id}:"
                            f"{result['training_iteration']}")
        with FileLock(path + ".lock", timeout=120, mode=0o600):
            state = read_json(path, default={}) or {}
            action, info = c.scheduler.on_result(state, self.trial_id, result, rng)
            atomic_write_json(path, state, sync=False, mode=0o600)
        c.scheduler.remember(state, self.trial_id, self._memo)
        if action == STOP:
            return {"action": "stop", "reason": f"{type(c.scheduler).__name__}: "
                                                f"{info.get('reason', '')}",
                    "iteration": result["training_iteration"]}
        if action == EXPLOIT:
            return self._exploit(info, result, rng)
        return None

    def _exploit(self, info: Dict[str, Any], result: Dict[str, Any], rng: random.Random
                 ) -> Optional[Dict[str, Any]]:
        """Copy a top trial's latest committed checkpoint in as this trial's newest,
        perturb the config, record the step; None when no candidate has a checkpoint."""
        sweep = SweepDir(self.sweep_path)
        me = RunDir(self.run_path)
        candidates = list(info["candidates"])
        rng.shuffle(candidates)
        for source in candidates:
            src = RunDir(sweep.trial_path(trial_index(source)))
            record = src.latest_checkpoint()
            if record is None:
                continue
            index = me.next_checkpoint_index()
            tmp = os.path.join(os.path.dirname(me.staging_tmp(0)),
                               f".tmp_checkpoint_pbt-{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                src.storage.copy_out(record.path, tmp)
            except (OSError, shutil.Error):  # retention deleted it meanwhile
                shutil.rmtree(tmp, ignore_errors=True)
                continue
            meta = read_json(os.path.join(tmp, METADATA_FILE)) or {}
            meta.update(index=index, exploited_from={
                "trial": source, "checkpoint": os.path.basename(record.path)})
            os.unlink(os.path.join(tmp, METADATA_FILE))  # written last, by the publish
            name = checkpoint_dir_name(index)
            me.storage.publish(tmp, me.storage.join(me.checkpoints_dir, name), METADATA_FILE,
                               json_bytes(meta), sync=True, mode=me.file_mode)
            m = sweep.read()
            me_i, src_i = trial_index(self.trial_id), trial_index(source)
            old = m["trials"][me_i]["config"]
            # (as Ray: the source trial's config, perturbed)
            new = self.control.scheduler.explore(m["trials"][src_i]["config"], rng)
            write_config_override(self.run_path, new, self.control.shape)
            step = {"trial": self.trial_id, "step": result["training_iteration"],
                    "time_attr": self.control.scheduler.time_attr, "at": info.get("time"),
                    "source": source, "source_checkpoint": os.path.basename(record.path),
                    "source_iteration": record.iteration, "checkpoint": name,
                    "source_config": m["trials"][src_i]["config"],
                    "old_config": old, "new_config": new, "time": time.time()}
            with sweep.update() as fresh:
                fresh.setdefault("exploits", []).append(step)
                fresh["trials"][me_i]["config"] = new
            _log.info(f"{self.trial_id}: PBT exploit of {source} "
                      f"({os.path.basename(record.path)}); new config {new}")
            return {"action": "restart", "reason": f"PBT: exploit {source}",
                    "iteration": result["training_iteration"]}
        return None


def read_decision(attempt_dir: str) -> Optional[Dict[str, Any]]:
    return read_json(os.path.join(attempt_dir, DECISION_FILE))


# --------------------------------------------------------------------------- search
def ensure_trial_config(sweep_path: str, index: int) -> Dict[str, Any]:
    """The trial's config; with a search algorithm, asked for now if it has none yet
    (and written as the trial's config override, which its workers merge in)."""
    sweep = SweepDir(sweep_path)
    trial = sweep.read()["trials"][index]
    control = load_control(sweep_path)
    if control is None or control.search_alg is None or trial.get("suggested", True):
        return trial["config"]
    with FileLock(os.path.join(sweep_path, "search.lock"), timeout=300, mode=0o600):
        trial = sweep.read()["trials"][index]
        if trial.get("suggested", True):
            return trial["config"]
        retry = bool(trial.get("search_asking"))
        if not retry:
            sweep.set_trial(index, search_asking=True)  # (a kill from here on: see retry)
        config, info = control.search_alg.suggest_for(sweep_path, trial["trial_id"],
                                                      retry=retry)
        with sweep.update() as m:
            m["trials"][index].update(config=config, suggested=True, search=info)
    write_config_override(sweep.trial_path(index), config, control.shape)
    return config


def trial_ended(sweep_path: str, index: int, status: str) -> None:
    """A trial ended (FINISHED or FAILED): the scheduler's state records it (PBT ranks
    only the trials still running), and the search algorithm is told how it did."""
    if status not in (FINISHED, FAILED):
        return
    control = load_control(sweep_path)
    if control is not None and control.scheduler is not None:
        path = os.path.join(sweep_path, STATE_FILE)
        with FileLock(path + ".lock", timeout=120, mode=0o600):
            state = read_json(path, default={}) or {}
            control.scheduler.on_trial_end(state, trial_id(index))
            atomic_write_json(path, state, sync=False, mode=0o600)
    if control is None or control.search_alg is None:
        return
    sweep = SweepDir(sweep_path)
    with FileLock(os.path.join(sweep_path, "search.lock"), timeout=300, mode=0o600):
        trial = sweep.read()["trials"][index]
        if not trial.get("suggested") or trial.get("search_told"):
            return
        rows = read_results(RunDir(sweep.trial_path(index)).result_file)
        control.search_alg.on_trial_complete_for(sweep_path, trial, rows[-1] if rows else None,
                                                 error=status == FAILED)
        sweep.set_trial(index, search_told=True)


def tell_pending(sweep_path: str) -> None:
    """Tell the search algorithm about trials that ended while no one could (a driver
    killed between a trial's end and its tell)."""
    if not searching(sweep_path):
        return
    control = load_control(sweep_path)
    with FileLock(os.path.join(sweep_path, "search.lock"), timeout=300, mode=0o600):
        if hasattr(control.search_alg, "clean_up_for"):
            control.search_alg.clean_up_for(sweep_path)
    sweep = SweepDir(sweep_path)
    m = sweep.read()
    for t in m.get("trials", []):
        if t.get("suggested") and not t.get("search_told"):
            status = sweep.trial_status(t["index"], m)
            if status in (FINISHED, FAILED):
                tell_search(sweep, t["index"], status)


def tell_search(sweep: SweepDir, index: int, status: str) -> None:
    """A trial ended: its search algorithm (if any) learns how it did."""
    try:
        trial_ended(sweep.path, index, status)
    except Exception as e:  # noqa: BLE001 - the trial's own result stands
        progress_line(f"[hpctrain] WARNING: {trial_id(index)}'s result was not told to the "
                      f"search algorithm ({type(e).__name__}: {e})", level=logging.WARNING)


def searching(sweep_path: str) -> bool:
    control = load_control(sweep_path)
    return control is not None and control.search_alg is not None


# --------------------------------------------------------------------------- the manifest
def open_sweep(sweep: SweepDir, control: TrialControl, *, space: Dict[str, Any],
               num_samples: int, seed: Optional[int], settings: Dict[str, Any],
               where: str = "param_space", file: Optional[str] = None) -> Dict[str, Any]:
    """The sweep's manifest (:func:`~hpctrain.tune.sweepdir.open_manifest`: created, or the
    existing one checked), recording ``settings`` (metric, mode, max_concurrent_trials) and
    what ``control`` holds; the control file is written for a new sweep, or when this run
    gives a scheduler, stopping criteria or a search algorithm (a re-run with none keeps
    the sweep's). The one route of the Tuner and of a job file's ``[sweep]``."""
    settings = dict(settings)
    if control.scheduler is not None:
        settings["scheduler"] = control.scheduler.describe()
    if control.search_alg is not None:
        settings["search_alg"] = type(control.search_alg).__name__
    if isinstance(control.stop, dict):
        settings["stop"] = control.stop
    fresh = not sweep.exists()
    m = open_manifest(sweep, space=space, num_samples=num_samples, seed=seed,
                      settings=settings, shape=control.shape,
                      searched=control.search_alg is not None, where=where, file=file)
    if fresh or control.active:
        write_control(sweep.path, control)
    return m


__all__ = ["TrialControl", "ReportHook", "check_stop", "ensure_trial_config", "trial_ended",
           "tell_search", "open_sweep"]
