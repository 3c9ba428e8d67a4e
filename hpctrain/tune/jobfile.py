"""A job file's ``[sweep]``: ``hpctrain sweep job.toml`` (run here, or submitted as job
arrays and followed), ``--dry-run``'s array scripts, and what an array task needs to find
its trial (the manifest a spec describes, the spec of one trial). The ``[sweep.scheduler]``
and ``[sweep.search_alg]`` tables are read by :mod:`._toml`; the Python route is
:class:`~hpctrain.tune.Tuner`.
"""
from __future__ import annotations

import copy
import os
import secrets
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ..config import default_storage_path
from ..errors import ConfigError
from ..run import Run, RunOptions
from ..schedulers.base import array_ranges
from ..spec import Ctx
from hpctrain.rundir.checks import check_shared_storage, ensure_storage_dir
from . import search
from ._control import TrialControl, ensure_trial_config, open_sweep, searching, tell_pending
from ._sweep import (at_a_time, local_concurrency, max_array_size, prepare_batch_trial,
                     removed_on_failure, render_arrays, run_local, split_arrays,
                     submit_arrays, trial_context, worker_cpus)
from ._toml import build
from .sweepdir import SweepDir, check_json, follow as follow_sweep, to_run, train_loop_config, \
    trial_id
from hpctrain.common.log import progress_line

if TYPE_CHECKING:  # (for the hints only)
    from hpctrain.spec import JobSpec

__all__ = ["space_of", "control_from_spec", "manifest_from_spec", "sweep_path_of",
           "trial_spec", "render_from_spec", "run_spec"]


def space_of(spec: JobSpec) -> Dict[str, Any]:
    ctx = Ctx(spec.source, spec.origins)
    return {"train_loop_config": search.from_tables(
        spec.sweep.get("param_space", {}), "sweep.param_space", ctx.error)}


def manifest_from_spec(sweep: SweepDir, spec: JobSpec) -> Dict[str, Any]:
    """Create (or check and open) the manifest of the sweep a spec's ``[sweep]`` describes;
    the seed it used is written into ``spec.sweep``."""
    sw = spec.sweep
    check_json(sw.get("param_space", {}), "sweep.param_space", spec.source)  # (TOML dates)
    space = space_of(spec)
    control = control_from_spec(spec, space)
    m = open_sweep(sweep, control, space=space, num_samples=sw.get("num_samples", 1),
                   seed=sw.get("seed"), settings={
                       "metric": sw.get("metric"), "mode": sw.get("mode"),
                       "max_concurrent_trials": sw.get("max_concurrent_trials")},
                   where="sweep.param_space", file=spec.source)
    spec.sweep["seed"] = m["seed"]
    return m


def control_from_spec(spec: JobSpec, space: Dict[str, Any]) -> TrialControl:
    """The scheduler, search algorithm and stopping criteria of a job file's ``[sweep]``."""
    sw = spec.sweep

    def error(key: str, message: str, hint: Optional[str] = None) -> Exception:
        return ConfigError(f"{key}: {message}", file=spec.source, hint=hint)

    scheduler = build(sw["scheduler"], "sweep.scheduler", error) if sw.get("scheduler") \
        else None
    search_alg = build(sw["search_alg"], "sweep.search_alg", error) \
        if sw.get("search_alg") else None
    try:
        if scheduler is not None:
            scheduler.set_search_properties(sw.get("metric"), sw.get("mode"))
        if search_alg is not None:
            search_alg.set_search_properties(sw.get("metric"), sw.get("mode"), space)
    except ConfigError as e:
        raise ConfigError(e.message.replace("tune_config.", "sweep."), file=spec.source,
                          hint=(e.hint or "").replace("TuneConfig", "[sweep]")) from None
    return TrialControl(scheduler=scheduler, stop=sw.get("stop") or None,
                        search_alg=search_alg, metric=sw.get("metric"), mode=sw.get("mode"),
                        shape="train_loop_config")


def sweep_path_of(spec: JobSpec) -> str:
    """``<storage_path>/<run.name>`` (a fresh timestamped name when none is given)."""
    storage = os.path.expandvars(os.path.expanduser(spec.run.storage_path or
                                                    default_storage_path()))
    if spec.run.name is None:
        spec.run.name = f"sweep_{time.strftime('%Y-%m-%d_%H-%M-%S')}_{os.getpid() % 10000:04d}"
    return os.path.join(os.path.abspath(storage), spec.run.name)


def spec_trial(spec: JobSpec, sweep: SweepDir, index: int, config: Dict[str, Any],
                local: bool) -> Run:
    """Trial ``index``'s :class:`~hpctrain.run.Run` of a job file's sweep."""
    one = trial_spec(spec, sweep, index, config)
    one.run.verbose = 0
    return Run.from_spec(one, RunOptions(path=sweep.trial_path(index), local_only=local,
                                         trial=trial_context(sweep, index)))


def render_from_spec(spec: JobSpec, rerender: str) -> List[str]:
    """``hpctrain sweep --dry-run``: the array scripts a submission would submit (every
    trial of a new sweep, or the unfinished ones of an existing one); writes nothing."""
    sweep = SweepDir(sweep_path_of(spec))
    if sweep.exists():
        m = sweep.read()
        spec.sweep["seed"] = m["seed"]
        indices = to_run(sweep, m)
    else:
        if spec.sweep.get("seed") is None:
            spec.sweep["seed"] = secrets.randbelow(2 ** 31)
        indices = list(range(search.count(space_of(spec), spec.sweep.get("num_samples", 1))))
    return render_arrays(spec, sweep, split_arrays(indices, max_array_size(spec)),
                         max_concurrent=spec.sweep.get("max_concurrent_trials"),
                         rerender=rerender)


def run_spec(spec: JobSpec, *, rerender: str, local: bool, follow: bool = True,
             retry_failed: bool = False, verbose: int = 1) -> Tuple[SweepDir, bool]:
    """``hpctrain sweep job.toml``: run the spec's sweep here (``local``) or submit it as job
    arrays (and follow it with ``follow``). Returns the sweep directory, and True when
    the local trials were stopped by the warning signal."""
    sweep = SweepDir(sweep_path_of(spec))
    if not (local or spec.scheduler.kind == "local"):
        check_shared_storage(spec, sweep.path)  # every trial's run directory is under it
    ensure_storage_dir(os.path.dirname(sweep.path), spec)
    fresh = not os.path.exists(sweep.path)
    m = manifest_from_spec(sweep, spec)
    tell_pending(sweep.path)
    configs = {t["index"]: t["config"] for t in m["trials"]}
    indices = to_run(sweep, m, retry_failed=retry_failed)
    if local or spec.scheduler.kind == "local":
        config_of = (lambda i: ensure_trial_config(sweep.path, i)) if searching(sweep.path) \
            else configs.__getitem__
        s = spec.scaling
        n = local_concurrency(s.num_workers, worker_cpus(s),
                              spec.sweep.get("max_concurrent_trials"), s.gpus_each)
        if verbose:
            progress_line(f"[hpctrain] sweep {sweep.name}: {len(indices)} of {len(configs)} "
                          f"trials to run here, {at_a_time(n, s.gpus_each)} ({sweep.path})",
                          stdout=True)
        stopped = run_local(sweep, indices,
                            lambda i: spec_trial(spec, sweep, i, config_of(i), True),
                            concurrency=n, verbose=verbose,
                            warning_signal=spec.run.failure_config.warning_signal)
        return sweep, stopped
    if not indices:
        if verbose:
            progress_line(f"[hpctrain] sweep {sweep.name}: every trial has finished; nothing "
                          "to submit", stdout=True)
        return sweep, False

    def prepare(i: int) -> None:
        prepare_batch_trial(spec_trial(spec, sweep, i, configs[i], False), sweep)

    with removed_on_failure(sweep, fresh):
        arrays = submit_arrays(sweep, spec, indices, prepare_trial=prepare,
                               max_concurrent=spec.sweep.get("max_concurrent_trials"),
                               rerender=rerender)
    for a in arrays:
        print(f"submitted {a['scheduler']} job array {a['job_id']} (trials "
              f"{array_ranges_of(a)})")
    print(f"sweep directory: {sweep.path}")
    print(f"  hpctrain results {sweep.path}")
    if follow:
        follow_sweep(sweep, verbose=verbose)
    return sweep, False


def array_ranges_of(record: Dict[str, Any]) -> str:
    """The trials of a submitted array's record, as ranges (``0-3,5``)."""
    return array_ranges(record["trials"])


def trial_spec(spec: JobSpec, sweep: SweepDir, index: int, config: dict) -> Any:
    """The spec of trial ``index``: the sweep's, with the trial's config merged into
    ``[config]``, no ``[sweep]``, and the trial's run directory."""
    out = copy.deepcopy(spec)
    out.sweep = {}
    out.config = train_loop_config(spec.config, config, "train_loop_config")
    out.run.name = trial_id(index)
    out.run.storage_path = sweep.path
    return out
