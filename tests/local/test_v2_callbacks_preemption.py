"""Ray Train v2's UserCallback (RunConfig(callbacks=[...])): after_report sees every
report of every rank, with the committed checkpoint; after_exception the exceptions of
each failed attempt, {rank: exception}. Real 2-rank runs."""
import json

import pytest

from hpctrain import FailureConfig, RunConfig, ScalingConfig, TrainingFailedError
from hpctrain.callbacks import UserCallback
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
