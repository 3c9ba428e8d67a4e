"""A sweep's trial, seen from its worker: the sweep's control object (scheduler, stopping
criteria, search algorithm), pickled by :mod:`hpctrain.tune` into the sweep directory
(``tune_control.pkl``).

The worker only loads it and calls two methods, so it never imports ``hpctrain.tune``:

* ``control.report_hook(run_path, trial_id)`` → an object whose ``on_report(row)`` returns
  None (go on) or a decision dict (``{"action": "stop" | "restart", ...}``), or None;
* ``control.applied_config(train_loop_config, run_path)`` → the trial's config with the
  sweep's override (PBT's exploit, Optuna's suggestion) merged in.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional

from hpctrain.errors import UnsafePathError
from hpctrain._internal.base.log import get_logger
from hpctrain._internal.base.trust import load_trusted_pickle

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
