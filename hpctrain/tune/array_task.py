"""Inside one task of a sweep's job array: find this task's trial, make its run directory
if nothing was prepared (an array script submitted by hand), run it as any batch run
(the batch step's ``run_batch``: same recovery, requeue and max_failures), and keep the
sweep's manifest up to date. The batch step (:mod:`hpctrain.cli.batch`) calls
:func:`run_trial`.

    python -m hpctrain.cli.batch SWEEP/trial_00003 --sweep-trial 3 ... < sweep spec
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Optional

from filelock import FileLock, Timeout

from ..errors import ConfigError
from ..schedulers import BatchRequest
from hpctrain.common.fsutil import atomic_write_bytes
from hpctrain.common.log import get_logger
from hpctrain.common.registry import scheduler_class
from hpctrain.rundir.layout import RunDir
from ._control import ensure_trial_config, tell_search
from .jobfile import manifest_from_spec, trial_spec
from .sweepdir import FINISHED, RUNNING, SweepDir, stopped_by, trial_id

if TYPE_CHECKING:  # (for the hints only)
    from hpctrain.spec import JobSpec


#: How long an array task waits for the manifest's lock before it goes on without
#: updating it (a thousand tasks starting at once on a slow file system queue for it).
MANIFEST_WAIT_S = 10.0


def _log(msg: str) -> None:
    get_logger("sweep").info(msg)


def note_trial(sweep: SweepDir, index: int, **fields: Any) -> None:
    """Record the trial's status in the manifest, best effort: the trial's state.json is
    the truth, and the driver (``--follow``, ``hpctrain results``) refreshes the manifest
    from it, so a lock not had in time or a file system error only warns."""
    try:
        sweep.set_trial(index, timeout=MANIFEST_WAIT_S, **fields)
    except (Timeout, OSError) as e:
        _log(f"WARNING: {trial_id(index)}'s status was not recorded in {sweep.manifest_file} "
             f"({type(e).__name__}: {e}); its state.json has it")


def ensure_manifest(sweep: SweepDir, spec: JobSpec) -> dict:
    """The manifest, made from the spec's ``[sweep]`` when a hand-submitted array script
    starts first (its spec always carries the seed, so every task makes the same one)."""
    if sweep.exists():
        return sweep.read()
    with FileLock(os.path.join(sweep.path, ".create.lock"), timeout=120, mode=0o600):
        if sweep.exists():
            return sweep.read()
        return manifest_from_spec(sweep, spec)


def run_trial(run: RunDir, spec: JobSpec, index: int,
              run_batch: Callable[[Any, Optional[str]], int]) -> int:
    """Run trial ``index`` of the sweep that holds ``run``; ``run_batch(spec, script)`` is
    the batch step of one run."""
    sweep = SweepDir(os.path.dirname(run.path))
    try:
        manifest = ensure_manifest(sweep, spec)
        trials = manifest.get("trials", [])
        if not 0 <= index < len(trials):
            _log(f"trial {index} is not in the sweep {sweep.path} ({len(trials)} trials)")
            return 2
        one = trial_spec(spec, sweep, index, ensure_trial_config(sweep.path, index)
                         if sweep.trial_status(index, manifest) != FINISHED
                         else trials[index]["config"])
        if not os.path.exists(run.job_script):
            # the trial alone, for a resubmission after a stop (the array script would run
            # every trial again)
            run.create(one.run.share)
            script = BatchRequest(one, run.path, rerender="(a trial of the sweep "
                                  f"{sweep.path})").materialize()
            atomic_write_bytes(run.job_script, script.encode(), sync=False,
                               mode=run.script_mode)
    except ConfigError as e:
        _log(f"the sweep's spec is not valid: {e}")
        return 2
    if sweep.trial_status(index, manifest) == FINISHED:
        # (a PBS array covers lo-hi: a re-run's gaps are finished trials)
        _log(f"trial {trial_id(index)} of {sweep.path} has already finished; nothing to do")
        return 0
    # the array task's own id (Slurm's <array>_<task>, PBS's 2[1].host, LSF's 12[3])
    job_id = scheduler_class(one.scheduler.kind).job_id_from_env(os.environ) or ""
    note_trial(sweep, index, status=RUNNING, job_id=job_id)
    try:
        return run_batch(one, None)
    finally:
        status = sweep.trial_status(index)
        note_trial(sweep, index, status=status, **stopped_by(run))
        tell_search(sweep, index, status)
