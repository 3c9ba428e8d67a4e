"""Continuing a run whose spec changed: what changed, and whether it matters.

Running a job again under the name of an unfinished run continues it from its latest
committed checkpoint. Some changes are routine on the way (a longer walltime, another
partition or account, more retries, other modules or variables); others make the
continuation a different training than the one its checkpoints came from: the scale
(``[scaling]``: the world size, GPUs), the backend, the datasets and the training
function's own ``[config]``. Those are refused unless the user says ``--force``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from hpctrain.rundir.layout import read_run_spec
from hpctrain.errors import ConfigError

#: Sections (or ``section.key``) whose change makes the continuation another training.
GUARDED = ("job.backend", "scaling", "config", "datasets")


def _flat(data: Any, prefix: str = "") -> Dict[str, Any]:
    if isinstance(data, dict):
        out: Dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: data}


def _guarded(key: str) -> bool:
    return any(key == g or key.startswith(g + ".") for g in GUARDED)


def _comparable(value: Any) -> bool:
    """False for what the spec can only hold as a repr (a Python object of the Python
    API's train_loop_config): its text changes from one process to the next."""
    return not (isinstance(value, str) and " at 0x" in value)


def spec_changes(old: Dict[str, Any], new: Dict[str, Any]) -> List[Tuple[str, Any, Any]]:
    """``(key, before, after)`` for each guarded value that differs (absent: None)."""
    a, b = _flat(old), _flat(new)
    out = []
    for key in sorted(set(a) | set(b)):
        if not _guarded(key):
            continue
        before, after = a.get(key), b.get(key)
        if before != after and _comparable(before) and _comparable(after):
            out.append((key, before, after))
    return out


def _show(value: Any) -> str:
    return "(unset)" if value is None else repr(value)


def check_resume(run_path: str, spec_file: str, new: Dict[str, Any], run_name: str) -> None:
    """Refuse to continue the run at ``run_path`` with a changed scale, backend, datasets
    or ``[config]``; the error lists each change. Without a ``spec_file`` there is nothing
    to compare with; a damaged one (truncated, not TOML) is an error naming it, with a
    HINT — never a silent pass: it would turn this guard off."""

    old = read_run_spec(spec_file)
    if old is None:
        return
    changes = spec_changes(old, new)
    if not changes:
        return
    listed = "; ".join(f"{k}: {_show(a)} → {_show(b)}" for k, a, b in changes)
    raise ConfigError(
        f"run.name: the run {run_name!r} at {run_path} would continue from its checkpoints "
        f"with a different spec ({listed})",
        hint="add --force to continue it so all the same (Python: Trainer.restore(path, "
             "train_loop_config=...)), or pick another run.name for a fresh run. Changes "
             "that need no --force: [scheduler], [failure], [setup], [env], [callbacks], "
             "[checkpoint], run.verbose and the entry point")
