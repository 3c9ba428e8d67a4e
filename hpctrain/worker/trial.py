"""A sweep's trial, seen from its worker: the sweep's control object (scheduler, stopping
criteria, search algorithm), pickled by :mod:`hpctrain.tune` into the sweep directory
(``tune_control.pkl``).

Also the names of a run's trial (:func:`trial_names`), a sweep's or a plain run's.

The worker only loads it and calls two methods, so it never imports ``hpctrain.tune``:

* ``control.report_hook(run_path, trial_id)`` → an object whose ``on_report(row)`` returns
  None (go on) or a decision dict (``{"action": "stop" | "restart", ...}``), or None;
* ``control.applied_config(train_loop_config, run_path)`` → the trial's config with the
  sweep's override (PBT's exploit, Optuna's suggestion) merged in.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, Optional

from hpctrain.errors import UnsafePathError
from hpctrain.common.log import get_logger
from hpctrain.common.trust import load_trusted_pickle

#: In the sweep directory (hpctrain.tune writes it).
CONTROL_FILE = "tune_control.pkl"

_log = get_logger("tune")


def trial_control(run_path: str, trial: Optional[Dict[str, Any]]) -> Optional[Any]:
    """The control object of the sweep this run is a trial of, or None (not a sweep's
    trial, or a sweep without scheduler/stop/search algorithm). A damaged file is logged
    and ignored: the trial runs without its scheduler rather than failing."""
    if not trial or not str(trial.get("trial_id", "")).startswith("trial_"):
        return None
    path = os.path.join(os.path.dirname(os.path.abspath(run_path)), CONTROL_FILE)
    try:
        return load_trusted_pickle(path, what="the sweep's control file")
    except FileNotFoundError:
        return None
    except UnsafePathError:
        raise  # someone else's file: never run it
    except Exception as e:  # noqa: BLE001 - a damaged file must not fail the trial
        _log.warning(f"WARNING: {path} could not be read ({type(e).__name__}: {e}); no "
                     f"scheduler for this trial")
        return None


def trial_names(run_name: str, run_path: str, trial: Optional[Dict[str, str]] = None
                ) -> Dict[str, str]:
    """``experiment_name``, ``trial_id`` and ``trial_name`` of a run: a sweep's trial
    brings its own; a plain run gets Ray's forms, the id derived from the run directory.

    >>> t = trial_names("exp", "/runs/exp", {"trainer": "TorchTrainer"})
    >>> t["experiment_name"], t["trial_id"], t["trial_name"]
    ('exp', '6dbbb_00000', 'TorchTrainer_6dbbb_00000')
    """

    trial = dict(trial or {})
    trainer = trial.pop("trainer", None) or "Trainer"
    if "trial_id" not in trial:
        digest = hashlib.sha1(os.path.abspath(run_path).encode()).hexdigest()[:5]
        trial["trial_id"] = f"{digest}_00000"
        trial.setdefault("trial_name", f"{trainer}_{trial['trial_id']}")
    trial.setdefault("trial_name", trial["trial_id"])
    trial.setdefault("experiment_name", run_name)
    return trial
