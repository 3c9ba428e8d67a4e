"""Ray Train v2's names on real runs: UserCallback (after_report sees every report of
every rank with the committed checkpoint; after_exception the exceptions of each failed
attempt, {rank: exception}), report(delete_local_checkpoint_after_upload=,
checkpoint_upload_fn=), get_preemption_info() after the scheduler's warning, and
FailureConfig(max_preemption_failures=)."""
import json
import os
import socket

import pytest

from hpctrain import (CheckpointConfig, FailureConfig, RunConfig, ScalingConfig,
                      TrainingFailedError, TrainingStoppedError, UserCallback)
from hpctrain.errors import ConfigError
from hpctrain.torch import TorchTrainer

import callback_workloads as wl  # noqa: E402


class Recorder(UserCallback):
    def __init__(self, path):
        self.path = path

    def _write(self, **event):
        with open(self.path, "a") as f:
            f.write(json.dumps(event) + "\n")

    def after_report(self, run_context, metrics, checkpoint):
        files = None
        if checkpoint is not None:
            with checkpoint.as_directory() as d, open(f"{d}/w.txt") as f:
                files = f.read()
        self._write(run=run_context.name,
                    metrics=[{k: m[k] for k in ("step", "rank") if k in m} for m in metrics],
                    checkpoint=files)

    def after_exception(self, run_context, worker_exceptions):
        self._write(exceptions={str(r): f"{type(e).__name__}: {e}"
                                for r, e in sorted(worker_exceptions.items())})


def _events(path):
    return [json.loads(line) for line in open(path)]


def test_a_user_callback_sees_every_report_of_every_rank_and_the_checkpoint(tmp_path, storage):
    record = tmp_path / "events.jsonl"
    TorchTrainer(wl.three_reports, scaling_config=ScalingConfig(num_workers=2),
                 run_config=RunConfig(name="cb", storage_path=storage, verbose=0,
                                      callbacks=[Recorder(str(record))])).fit()
    assert _events(record) == [
        {"run": "cb", "metrics": [{"step": 0, "rank": 0}, {"step": 0, "rank": 1}],
         "checkpoint": None},
        {"run": "cb", "metrics": [{"step": 1, "rank": 0}, {"step": 1, "rank": 1}],
         "checkpoint": "weights"},
        {"run": "cb", "metrics": [{"step": 2, "rank": 0}, {"step": 2, "rank": 1}],
         "checkpoint": None},
    ]


def test_a_user_callback_gets_the_exceptions_of_each_failed_attempt(tmp_path, storage):
    record = tmp_path / "events.jsonl"
    with pytest.raises(TrainingFailedError):
        TorchTrainer(wl.every_rank_fails, scaling_config=ScalingConfig(num_workers=2),
                     run_config=RunConfig(name="cb", storage_path=storage, verbose=0,
                                          failure_config=FailureConfig(max_failures=1),
                                          callbacks=[Recorder(str(record))])).fit()
    failures = [e["exceptions"] for e in _events(record) if "exceptions" in e]
    assert failures == [
        {"0": "RankError: rank 0 failed on attempt 1", "1": "RankError: rank 1 failed on attempt 1"},
        {"0": "RankError: rank 0 failed on attempt 2", "1": "RankError: rank 1 failed on attempt 2"},
    ]


def test_report_deletes_or_keeps_the_local_checkpoint_as_asked(storage):
    result = TorchTrainer(wl.delete_or_keep, scaling_config=ScalingConfig(num_workers=1),
                          run_config=RunConfig(name="del", storage_path=storage,
                                               verbose=0)).fit()
    left = json.load(open(f"{result.path}/test-out/left.json"))
    assert left.pop("upload_fn").startswith(
        "ConfigError: report(checkpoint_upload_fn=...): not supported by hpctrain; a "
        "checkpoint is committed into the run directory")
    # True: the directory is gone; False: an async report copied, the file stays; None
    # (async): the files were moved, the directory stays for reuse
    assert left == {"sync-delete": None, "async-keep": ["w.txt"], "async-default": []}
    # each was committed whole all the same, and nothing of the refused one
    names = [open(f"{c.path}/w.txt").read() for c, _ in result.best_checkpoints]
    assert names == ["sync-delete", "async-keep", "async-default"]


def test_get_preemption_info_after_the_warning_and_a_jit_checkpoint(storage):
    with pytest.raises(TrainingStoppedError) as stopped:
        TorchTrainer(wl.jit_checkpoint_on_preemption, scaling_config=ScalingConfig(num_workers=2),
                     run_config=RunConfig(name="pre", storage_path=storage, verbose=0,
                                          failure_config=FailureConfig(
                                              warning_time="60s"))).fit()
    run = stopped.value.result.path
    seen = [json.load(open(f"{run}/test-out/preempt-rank-{r}.json")) for r in (0, 1)]
    host = socket.gethostname()
    for s in seen:
        assert s["before"] is None
        assert s["nodes"] == {host: [0, 1]} and s["ranks"] == [0, 1]
        assert s["node_ids"] == [host]
        # the supervisor's deadline: warning_time - 15 s after the warning
        assert 40_000 < s["deadline_ms"] - s["now_ms"] <= 45_000
    assert seen[0]["step"] == seen[1]["step"] and seen[0]["deadline_ms"] == seen[1]["deadline_ms"]
    # the JIT checkpoint of that step is the run's latest, with both ranks' files
    ckpt, metrics = stopped.value.result.best_checkpoints[-1]
    assert metrics["step"] == seen[0]["step"]
    assert [open(f"{ckpt.path}/rank-{r}.txt").read() for r in (0, 1)] == [str(seen[0]["step"])] * 2


def test_max_preemption_failures_is_ray_s_name_for_max_requeues():
    assert FailureConfig(max_preemption_failures=3).max_requeues == 3
    with pytest.raises(ConfigError) as e:
        FailureConfig(max_preemption_failures=2, max_requeues=5)
    assert str(e.value) == ("failure: max_preemption_failures=2 and max_requeues=5 disagree\n"
                            "HINT: max_preemption_failures is Ray's name for max_requeues: "
                            "give one")
    with pytest.raises(ConfigError, match=r"^checkpoint.checkpoint_at_end=True: not a setting"):
        CheckpointConfig(checkpoint_at_end=True)
