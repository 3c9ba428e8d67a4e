"""Asynchronous validation (Ray Train 2.x's ValidationConfig, report(validation=...)):
real runs whose validations run in processes of their own, judged by what a user sees —
which checkpoints survive top-K, the metrics and status of each, the error of a failed
validation — and the retention rule for a checkpoint whose validation is pending."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

import validation_workloads as wl
from helpers import fit
from hpctrain import (CheckpointConfig, ConfigError, ReportedCheckpointStatus, Result,
                      TrainingFailedError, ValidationConfig, ValidationTaskConfig)
from hpctrain.rundir.layout import CheckpointRecord, RunDir, checkpoints_to_delete


def _kept(result):
    return sorted(d for d in os.listdir(os.path.join(result.path, "checkpoints"))
                  if d.startswith("checkpoint_"))


def test_the_validated_score_decides_which_checkpoint_survives_top_k(storage):
    result = fit(wl.train_four, storage, workers=1, name="validated",
                 ckpt=CheckpointConfig(num_to_keep=1, checkpoint_score_attribute="accuracy",
                                       checkpoint_score_order="max"),
                 validation_config=ValidationConfig(wl.validate_quality))
    # reported, checkpoint 0 was the best (0.9); validated, checkpoint 1 is (0.95): it
    # survives, with the latest (kept for a restart)
    assert _kept(result) == ["checkpoint_000001", "checkpoint_000003"]
    # the Result shows the validated metrics merged over the reported ones
    (best,) = result.best_checkpoints
    assert os.path.basename(best[0].path) == "checkpoint_000001"
    assert {k: best[1][k] for k in ("loss", "accuracy", "tag")} == {
        "loss": 3.0, "accuracy": 0.95, "tag": "default"}
    assert os.path.basename(result.get_best_checkpoint("accuracy", "max").path) == \
        "checkpoint_000001"
    again = Result.from_path(result.path)  # read back from the run directory alone
    assert [(os.path.basename(c.path), m["accuracy"]) for c, m in again.best_checkpoints] \
        == [("checkpoint_000001", 0.95)]
    records = RunDir(result.path).list_checkpoints()
    assert [(r.name, r.status, r.metrics["accuracy"]) for r in records] == [
        ("checkpoint_000001", "VALIDATED", 0.95), ("checkpoint_000003", "VALIDATED", 0.2)]
    # each validation ran in a process of its own, not in the rank's
    pids = {r.validation["metrics"]["pid"] for r in records}
    assert len(pids) == 2 and os.getpid() not in pids


def test_the_report_s_fn_kwargs_go_over_the_trainer_s(storage):
    result = fit(wl.train_four, storage, workers=1, name="kwargs",
                 ckpt=CheckpointConfig(num_to_keep=None),
                 validation_config=ValidationConfig(
                     wl.validate_quality, ValidationTaskConfig(fn_kwargs={"tag": "trainer"})))
    tags = [r.metrics["tag"] for r in RunDir(result.path).list_checkpoints()]
    assert tags == ["first", "trainer", "trainer", "trainer"]


def test_a_validation_that_fails_leaves_its_checkpoint_committed_with_the_error(storage):
    result = fit(wl.train_four, storage, workers=1, name="failing",
                 config={"hidden": [0.1, -1, 0.3, 0.2]},
                 ckpt=CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="accuracy",
                                       checkpoint_score_order="max"),
                 validation_config=ValidationConfig(wl.validate_quality))
    assert result.error is None  # a validation's failure is not the training's
    records = {r.name: r for r in RunDir(result.path).list_checkpoints()}
    # top 2 by accuracy: 1 (0.5 as reported: its validation failed), 2 (0.3 validated),
    # and the latest; 0 (0.9 reported, 0.1 validated) is gone
    assert sorted(records) == ["checkpoint_000001", "checkpoint_000002", "checkpoint_000003"]
    failed = RunDir(result.path).validation_file("checkpoint_000001")
    with open(failed) as f:
        error = json.load(f)["error"]
    assert error.startswith("ValueError: cannot evaluate step 1\n")
    assert "Traceback" in error
    rec = records["checkpoint_000001"]
    assert rec.status == "COMMITTED" and rec.metrics["accuracy"] == 0.5  # as reported
    assert rec.validation_error.startswith("ValueError: cannot evaluate step 1")
    assert [records[n].status for n in ("checkpoint_000002", "checkpoint_000003")] == [
        "VALIDATED", "VALIDATED"]
    log = os.path.join(result.path, "logs", "validation", "checkpoint_000001.out")
    assert "the validation failed (the checkpoint stays COMMITTED): ValueError: " \
           "cannot evaluate step 1" in open(log).read()


def test_report_validation_without_a_validation_config_is_refused(storage):
    with pytest.raises(TrainingFailedError) as e:
        fit(wl.train_validation_without_config, storage, workers=1, name="noconfig")
    assert "report(validation=...): the trainer has no validation function" in str(e.value)
    assert "HINT: pass validation_config=ValidationConfig(fn=...) to the trainer" in str(e.value)


def test_bad_validation_configs_are_refused_with_what_was_expected():
    with pytest.raises(ConfigError, match=r"ValidationConfig\(fn=...\): expected the "
                                          r"validation function"):
        ValidationConfig(None)
    with pytest.raises(ConfigError, match=r"ray_remote_kwargs=...\): num_nodes has no "
                                          r"meaning for a validation job") as e:
        ValidationConfig(wl.validate_quality, ray_remote_kwargs={"num_nodes": 2})
    assert "HINT: use num_cpus, num_gpus, memory" in str(e.value)
    with pytest.raises(ConfigError, match=r"timeout_s=...\): expected None or a number "
                                          r"of seconds >= 0, got -1"):
        ValidationTaskConfig(timeout_s=-1)
    # Ray's older names are the same thing
    v = ValidationConfig(validate_fn=wl.validate_quality,
                         validation_task_config=ValidationTaskConfig(fn_kwargs={"a": 1}))
    assert v.fn is wl.validate_quality and v.validate_fn is wl.validate_quality
    assert v.kwargs_for(ValidationTaskConfig(fn_kwargs={"b": 2})) == {"a": 1, "b": 2}


def _rec(index, score, *, validation=None, asked=True, result=None, age=0.0):
    meta = {"metrics": {"score": score}, "time": time.time() - age}
    if asked:
        meta["validation"] = {"fn_kwargs": {}, "timeout_s": validation}
    return CheckpointRecord(index, f"/r/checkpoints/checkpoint_{index:06d}", meta,
                            validation=result)


def test_retention_keeps_a_pending_checkpoint_until_its_validation_is_done_or_abandoned(
        tmp_path):
    def doomed(records):
        return [r.index for r in checkpoints_to_delete(records, 1, "score", "max")]

    # 0 is the worst by its reported score, but its validation is pending: kept
    pending = [_rec(0, 0.1), _rec(1, 0.9, asked=False), _rec(2, 0.5, asked=False)]
    assert [r.status for r in pending] == ["PENDING_VALIDATION", "COMMITTED", "COMMITTED"]
    assert doomed(pending) == []
    # a pending checkpoint takes no place among the best: its reported 0.9 does not push
    # out checkpoint 2, whose validated 0.3 keeps it in the top 2 of those scored
    mixed = [_rec(0, 0.9), _rec(1, 0.5, asked=False),
             _rec(2, 0.1, result={"metrics": {"score": 0.3}}), _rec(3, 0.2, asked=False),
             _rec(4, 0.0, asked=False)]
    assert [r.index for r in checkpoints_to_delete(mixed, 2, "score", "max")] == [3]
    # validated (a low score): deleted now; validated high: it is the one kept
    assert doomed([_rec(0, 0.1, result={"metrics": {"score": 0.2}})] + pending[1:]) == [0]
    assert doomed([_rec(0, 0.1, result={"metrics": {"score": 0.99}})] + pending[1:]) == [1]
    # failed: stays COMMITTED with its reported score, and may go
    failed = _rec(0, 0.1, result={"error": "ValueError: x"})
    assert failed.status == "COMMITTED" and doomed([failed] + pending[1:]) == [0]
    # abandoned: its timeout_s passed since the commit without a result
    late = _rec(0, 0.1, validation=5.0, age=10.0)
    assert late.status == "COMMITTED" and doomed([late] + pending[1:]) == [0]
    assert _rec(0, 0.1, validation=60.0, age=10.0).status == "PENDING_VALIDATION"
    # a local validation whose process is gone without a result: abandoned; alive: pending
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    here = socket.gethostname()
    dead = _rec(0, 0.1)
    dead.launch = {"kind": "local", "pid": gone.pid, "host": here,
                   "result": str(tmp_path / "none.json")}
    assert dead.status == "COMMITTED" and doomed([dead] + pending[1:]) == [0]
    alive = _rec(0, 0.1)
    alive.launch = {"kind": "local", "pid": os.getpid(), "host": here,
                    "result": str(tmp_path / "none.json")}
    assert alive.status == "PENDING_VALIDATION"
    assert ReportedCheckpointStatus("VALIDATED") is ReportedCheckpointStatus.VALIDATED


def test_the_training_sees_its_checkpoint_go_from_pending_to_validated(storage):
    result = fit(wl.train_sees_its_validation, storage, workers=1, name="seen",
                 validation_config=ValidationConfig(wl.validate_quality))
    assert result.metrics["seen"] == ["PENDING_VALIDATION", "VALIDATED"]
    assert result.metrics["validated_accuracy"] == 0.7
