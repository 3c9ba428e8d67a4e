"""Asynchronous validation inside the run directory: what a validation process does.

A report with ``validation=`` records the request in its checkpoint's commit record
(``"validation": {"fn_kwargs", "timeout_s"}``, :func:`.commit.publish`): from its commit
on the checkpoint is PENDING_VALIDATION and retention keeps it
(:func:`.layout.checkpoints_to_delete`). The run's supervisor then starts one validation
per request — a process here, or a batch job of its own
(:mod:`hpctrain.allocation.validation`) — which runs :func:`validate`:

1. call the trainer's ``ValidationConfig.fn(checkpoint, **fn_kwargs)``;
2. write its result, ``.hpctrain/validation/<checkpoint>.result.json`` — ``{"metrics":
   {...}}`` or ``{"error": "..."}`` — atomically, once: the checkpoint is VALIDATED (its
   metrics merged into the checkpoint's, so into its score) or stays COMMITTED;
3. apply top-K retention again, with the validated score.
"""
from __future__ import annotations

import json
import math
import os
import time
import traceback
from typing import Any, Dict, Optional

from filelock import FileLock

from hpctrain.common.fsutil import atomic_write_json, json_default
from hpctrain.common.log import get_logger
from hpctrain.rundir.layout import CheckpointRecord, RunDir, checkpoints_to_delete
from hpctrain.rundir.payload import WorkerPayload

_log = get_logger("validation")


def pending_request(run: RunDir, name: str) -> Optional[CheckpointRecord]:
    """The committed checkpoint ``name`` when a validation was asked for it."""
    for rec in run.list_checkpoints():
        if rec.name == name and rec.metadata.get("validation") is not None:
            return rec
    return None


def validate(run: RunDir, name: str) -> int:
    """Validate checkpoint ``name`` of ``run`` (steps 1–3 above); the process's exit
    code: 0 validated, 1 the validation failed (recorded), 2 nothing to validate."""
    rec = pending_request(run, name)
    if rec is None:
        _log.error(f"{run.path}: no checkpoint {name} with a validation asked "
                   "(deleted, or never committed)")
        return 2
    if rec.validation is not None:
        _log.info(f"{name}: validated already")
        return 0
    started = time.time()
    payload = None
    try:
        payload = WorkerPayload.load(run)
        config = payload.validation
        if config is None:
            raise RuntimeError("the run's trainer has no ValidationConfig")
        metrics = config.fn(rec.checkpoint(), **rec.metadata["validation"].get("fn_kwargs", {}))
        if not isinstance(metrics, dict):
            raise TypeError("the validation function must return a dict of metrics, "
                            f"got {type(metrics).__name__}")
        result: Dict[str, Any] = {"metrics": _plain(metrics)}
        code = 0
    except Exception as e:  # noqa: BLE001 - the user's function: recorded, not raised
        lines = traceback.format_exc().rstrip().splitlines()
        result = {"error": f"{type(e).__name__}: {e}\n" + "\n".join(lines)}
        code = 1
    result.update(time=time.time(), seconds=round(time.time() - started, 3),
                  host=os.uname().nodename, pid=os.getpid())
    # the result and the retention after it under one lock: of two validations ending
    # together, the second sees the first's result (else each could see the other
    # pending, and neither delete what the scores now drop)
    lock = FileLock(os.path.join(os.path.dirname(run.validation_file(name)), "retention.lock"))
    with lock:
        atomic_write_json(run.validation_file(name), result, mode=run.file_mode)
        if payload is not None:
            apply_retention(run, payload.checkpoint_config)
    if code:
        _log.error(f"{name}: the validation failed (the checkpoint stays COMMITTED): "
                   f"{result['error'].splitlines()[0]}")
    else:
        _log.info(f"{name}: VALIDATED {result['metrics']}")
    return code


def apply_retention(run: RunDir, config: Any) -> None:
    """Top-K retention with the scores as they are now (a validation may have changed
    one); rank 0's publish may be doing the same: a checkpoint it removed first is
    skipped."""
    storage = run.storage
    for rec in checkpoints_to_delete(run.list_checkpoints(), config.num_to_keep,
                                     config.checkpoint_score_attribute,
                                     config.checkpoint_score_order):
        try:
            doomed = storage.retire(rec.path)
        except FileNotFoundError:
            continue
        if doomed:
            storage.delete(doomed)


def _plain(metrics: Dict[str, Any]) -> Dict[str, Any]:
    """The metrics as JSON would hold them (numpy and torch scalars as numbers; NaN
    kept: it ranks below every number)."""
    return json.loads(json.dumps(metrics, default=json_default),
                      parse_constant=lambda c: {"NaN": math.nan, "Infinity": math.inf,
                                                "-Infinity": -math.inf}[c])


__all__ = ["validate", "apply_retention", "pending_request"]
