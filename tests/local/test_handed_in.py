"""A checkpoint every rank handed in is committed, however the attempt ends right after
the report: Ray commits a reported checkpoint before ``report()`` returns. Between
agreement reports a checkpoint is only staged; the supervisor publishes what every rank
staged (their marks, ``rundir/handed_in.py``) before anything is cleaned."""
import json
import os

import pytest

import workloads
from helpers import out
from hpctrain.checkpoint import METADATA_FILE
from hpctrain import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from hpctrain.errors import TrainingFailedError
from hpctrain.torch import TorchTrainer
from hpctrain.rundir.commit import verify_checkpoint


def _committed(run_path):
    d = os.path.join(run_path, "checkpoints")
    names = sorted(n for n in os.listdir(d) if n.startswith("checkpoint_"))
    for n in names:
        assert verify_checkpoint(os.path.join(d, n)) == [], n
    return {n: open(os.path.join(d, n, "i")).read() for n in names}


def _fit(storage, end, *, keep=None, max_failures=0, hang_timeout=None):
    trainer = TorchTrainer(
        workloads.handed_in_then_end, train_loop_config={"end": end},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name=f"handed-in-{end}", storage_path=storage, verbose=0,
                             checkpoint_config=CheckpointConfig(num_to_keep=keep),
                             failure_config=FailureConfig(max_failures=max_failures,
                                                          hang_timeout=hang_timeout)))
    return trainer.fit()


@pytest.mark.parametrize("end", ["raise", "kill", "hang"])
def test_every_checkpoint_handed_in_before_a_crash_is_committed(tmp_path, end):
    with pytest.raises(TrainingFailedError) as info:
        _fit(str(tmp_path), end, hang_timeout=15 if end == "hang" else None)
    result = info.value.result
    assert _committed(result.path) == {f"checkpoint_{i:06d}": str(i) for i in range(5)}
    assert result.checkpoint is not None and result.checkpoint.path.endswith("checkpoint_000004")
    record = json.load(open(os.path.join(result.checkpoint.path, METADATA_FILE)))
    assert (record["iteration"], record["metrics"]) == (10, {"i": 4, "kind": "checkpoint"})


def test_retention_applies_to_the_checkpoints_committed_after_the_crash(tmp_path):
    with pytest.raises(TrainingFailedError) as info:
        _fit(str(tmp_path), "raise", keep=3)
    assert _committed(info.value.result.path) == {
        "checkpoint_000002": "2", "checkpoint_000003": "3", "checkpoint_000004": "4"}


def test_the_restart_resumes_from_the_last_checkpoint_handed_in(tmp_path):
    result = _fit(str(tmp_path), "raise", max_failures=1)
    assert open(out(result, "resumed")).read() == "4"
