"""Asynchronous checkpoint commits (``report(..., checkpoint_upload_mode="async")``) with
real worker processes, real Gloo collectives and real files: the same model as a
synchronous run, the previous checkpoint intact after a SIGKILL during the background
commit, a failed background commit reported and never published, and reports that wait
for the commit in flight."""
import json
import os
import shutil
import tempfile

import pytest

import async_workloads
from helpers import assert_same_state, fit, out, run_state
from hpctrain import CheckpointConfig, CheckpointUploadMode, TrainingFailedError
from hpctrain.rundir.commit import verify_checkpoint
from hpctrain.rundir.layout import RunDir


def _committed(path):
    return RunDir(path).list_checkpoints()


def _load(path):
    import torch

    return torch.load(os.path.join(path, "state.pt"))


def _assert_same_checkpoints(sync_path, async_path):
    a, b = _committed(sync_path), _committed(async_path)
    assert [(c.index, c.iteration) for c in a] == [(c.index, c.iteration) for c in b]
    for x, y in zip(a, b):
        assert verify_checkpoint(y.path) == []
        assert x.metrics["epoch"] == y.metrics["epoch"]
        sx, sy = _load(x.path), _load(y.path)
        assert sx["epoch"] == sy["epoch"]
        assert_same_state(sx["model"], sy["model"])
        for r in (0, 1):
            assert open(os.path.join(y.path, f"rank-{r}.txt")).read() == f"{sy['epoch']}\n"


@pytest.fixture
def other_filesystem():
    """A directory on another filesystem than the run's (/dev/shm: tmpfs)."""
    if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(
            tempfile.gettempdir()).st_dev:
        pytest.skip(reason="no /dev/shm on a filesystem of its own")
    d = tempfile.mkdtemp(prefix="hpctrain-async-test-", dir="/dev/shm")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_async_run_commits_the_same_checkpoints_and_model_as_a_sync_run(storage):
    sync = fit(async_workloads.deterministic, storage, config={"epochs": 4, "mode": "sync"},
               name="sync")
    asyn = fit(async_workloads.deterministic, storage, config={"epochs": 4, "mode": "async"},
               name="async")
    assert sync.error is None and asyn.error is None
    assert_same_state(torch_load(out(sync, "final.pt")), torch_load(out(asyn, "final.pt")))
    _assert_same_checkpoints(sync.path, asyn.path)
    assert len(_committed(asyn.path)) == 4  # the last one published at the end
    assert os.path.basename(asyn.checkpoint.path) == "checkpoint_000003"
    # nothing half-written or left in the staging area
    assert sorted(e for e in os.listdir(os.path.join(asyn.path, "checkpoints"))
                  if not e.startswith(".staging")) == [f"checkpoint_{i:06d}" for i in range(4)]


def test_async_from_another_filesystem_and_as_the_run_default(storage, other_filesystem):
    """The files of a directory on another filesystem are moved aside there (a rename)
    and copied in the background; CheckpointConfig makes async the default."""
    sync = fit(async_workloads.deterministic, storage, config={"epochs": 3, "mode": "sync"},
               name="sync")
    asyn = fit(async_workloads.deterministic, storage,
               config={"epochs": 3, "mode": None, "src_root": other_filesystem},
               name="async", ckpt=CheckpointConfig(
                   checkpoint_upload_mode=CheckpointUploadMode.ASYNC))
    assert asyn.error is None
    _assert_same_checkpoints(sync.path, asyn.path)
    # the snapshots beside the source are gone once committed
    assert sorted(os.listdir(other_filesystem)) == ["src-rank-0", "src-rank-1"]


def test_sigkill_during_the_background_commit_keeps_the_previous_checkpoint(storage):
    sync = fit(async_workloads.deterministic, storage, config={"epochs": 4, "mode": "sync"},
               name="sync")
    result = fit(async_workloads.deterministic, storage, max_failures=1, name="killed",
                 config={"epochs": 4, "mode": "async", "kill_in_commit": 2})
    assert result.error is None
    state = run_state(result.path)
    assert state["attempts"][0]["failed_rank"] == 0
    assert "signal 9" in state["attempts"][0]["error"]
    # the second attempt resumed from the checkpoint of epoch 1 (report 2), the one
    # committed before the kill; epoch 2's, half-written when rank 0 died, was dropped
    for r in (0, 1):
        resumed = json.load(open(out(result, f"resumed-attempt-2-rank-{r}")))
        assert resumed == {"checkpoint": "checkpoint_000001", "start": 2}
    # and the training ends where an uninterrupted one does, checkpoints and model
    assert_same_state(torch_load(out(sync, "final.pt")), torch_load(out(result, "final.pt")))
    _assert_same_checkpoints(sync.path, result.path)


def test_a_failed_background_commit_fails_the_run_and_publishes_nothing(storage):
    with pytest.raises(TrainingFailedError) as info:
        fit(async_workloads.fails, storage, name="fails", config={"fail_rank": 1})
    error = info.value
    assert "Input/output error (injected)" in error.worker_traceback
    assert "writing the checkpoint of report 2" in error.worker_traceback
    assert "the last committed one is untouched" in error.worker_traceback
    path = os.path.join(storage, "fails")
    committed = _committed(path)
    assert [c.iteration for c in committed] == [1]  # report 2's never published
    assert verify_checkpoint(committed[0].path) == []
    assert sorted(os.listdir(committed[0].path)) == [
        ".hpctrain_checkpoint.json", ".hpctrain_digest.rank-0.json",
        ".hpctrain_digest.rank-1.json", ".hpctrain_shard.rank-0.json",
        ".hpctrain_shard.rank-1.json", "0-a.bin", "0-b.bin", "1-a.bin", "1-b.bin"]


@pytest.mark.parametrize("staged", [False, True], ids=["own-dir", "staging-dir"])
def test_reports_return_before_the_commit_and_the_next_checkpoint_waits(storage, staged):
    result = fit(async_workloads.waits, storage, config={"staged": staged}, name="waits")
    assert result.error is None
    seen = json.load(open(out(result, "waits-rank-0")))
    # report(A) and the metrics-only report after it returned while A's commit was held
    assert seen["after_A"] == {"log": [], "committed": 0}
    assert seen["after_metrics"] == {"log": [], "committed": 0}
    # the next checkpoint report waited for A (released, not timed out)
    assert seen["after_B"]["log"][0] == "released" and "timed out" not in seen["after_B"]["log"]
    assert seen["after_B"]["A_complete"]
    assert json.load(open(out(result, "waits-rank-1")))["after_B"]["A_complete"]
    committed = _committed(result.path)
    assert [(c.iteration, c.metrics["step"]) for c in committed] == [(1, 0), (3, 2)]
    for c, step in zip(committed, (0, 2)):
        assert verify_checkpoint(c.path) == []
        for r in (0, 1):
            with open(os.path.join(c.path, f"shard-{r}.bin"), "rb") as f:
                assert f.read() == bytes([step]) * (1 << 20)


def test_upload_mode_values():
    from hpctrain import ConfigError

    assert CheckpointConfig().checkpoint_upload_mode == "sync"
    assert CheckpointConfig(checkpoint_upload_mode="ASYNC").checkpoint_upload_mode == "async"
    with pytest.raises(ConfigError, match='expected "sync" or "async"'):
        CheckpointConfig(checkpoint_upload_mode="later")


def torch_load(path):
    import torch

    return torch.load(path)


def test_state_dict_checkpoint_is_a_host_copy_written_in_the_background(storage):
    sync = fit(async_workloads.deterministic, storage, config={"epochs": 3, "mode": "sync"},
               name="sync")
    asyn = fit(async_workloads.torch_state, storage, config={"epochs": 3, "how": "state"},
               name="state")
    assert asyn.error is None
    a, b = _committed(sync.path), _committed(asyn.path)
    assert [c.iteration for c in a] == [c.iteration for c in b]
    for x, y in zip(a, b):
        assert verify_checkpoint(y.path) == []
        assert sorted(f for f in os.listdir(y.path) if not f.startswith(".")) == ["state.pt"]
        sx, sy = _load(x.path), _load(y.path)
        assert sx["epoch"] == sy["epoch"]
        assert_same_state(sx["model"], sy["model"])
    assert_same_state(torch_load(out(sync, "final.pt")), torch_load(out(asyn, "final.pt")))


def test_dcp_async_save_is_committed_as_one_sharded_checkpoint(storage):
    import torch.distributed.checkpoint as dcp

    sync = fit(async_workloads.deterministic, storage, config={"epochs": 3, "mode": "sync"},
               name="sync")
    asyn = fit(async_workloads.torch_state, storage, config={"epochs": 3, "how": "dcp"},
               name="dcp")
    assert asyn.error is None
    a, b = _committed(sync.path), _committed(asyn.path)
    assert [c.iteration for c in a] == [c.iteration for c in b]
    for x, y in zip(a, b):
        assert verify_checkpoint(y.path) == []
        assert ".metadata" in os.listdir(y.path)
        expected = _load(x.path)["model"]
        loaded = {"model": {k: v.clone().zero_() for k, v in expected.items()}}
        dcp.load(loaded, checkpoint_id=y.path, no_dist=True)
        assert_same_state(expected, loaded["model"])


def test_a_stop_waits_for_the_commit_in_flight_and_resumes_where_it_stopped(storage):
    from hpctrain import TrainingStoppedError
    from hpctrain.torch import TorchTrainer

    sync = fit(async_workloads.deterministic, storage, config={"epochs": 5, "mode": "sync"},
               name="sync")
    with pytest.raises(TrainingStoppedError) as info:
        fit(async_workloads.stopped, storage, name="stopped",
            config={"epochs": 5, "stop_at": 2})
    path = info.value.result.path
    # the stop was agreed at report 3 (epoch 2): epoch 1's commit, in flight then, and
    # epoch 2's own checkpoint are committed there; the stop itself takes the next
    # report's checkpoint (epoch 3, handed in once every rank was told), then ends
    assert [c.iteration for c in _committed(path)] == [1, 2, 3, 4]
    assert all(verify_checkpoint(c.path) == [] for c in _committed(path))
    attempt = os.path.join(path, ".hpctrain", "attempt-001")
    stops = [json.load(open(os.path.join(attempt, f"stopped.rank-{r}.json"))) for r in (0, 1)]
    assert [rec["iteration"] for rec in stops] == [4, 4]
    assert stops[0]["checkpoint"] == "checkpoint_000003"  # rank 0 published it
    result = TorchTrainer.restore(path).fit()
    assert result.status == "FINISHED"
    for r in (0, 1):
        assert json.load(open(out(result, f"resumed-attempt-2-rank-{r}"))) == {
            "checkpoint": "checkpoint_000003", "start": 4}
    assert_same_state(torch_load(out(sync, "final.pt")), torch_load(out(result, "final.pt")))
    _assert_same_checkpoints(sync.path, result.path)


def test_a_committed_checkpoint_handed_back_is_copied_and_links_are_followed(storage):
    result = fit(async_workloads.hands_back, storage, name="back")
    assert result.error is None
    first, second = _committed(result.path)
    assert (first.iteration, second.iteration) == (1, 3)
    for c in (first, second):
        assert verify_checkpoint(c.path) == []
        names = sorted(f for f in os.listdir(c.path) if not f.startswith("."))
        assert names == ["0.bin", "1.bin", "link-0.txt", "link-1.txt"]
        for r in (0, 1):
            assert not os.path.islink(os.path.join(c.path, f"link-{r}.txt"))
            assert open(os.path.join(c.path, f"link-{r}.txt")).read() == "pointed at\n"
            assert open(os.path.join(c.path, f"{r}.bin"), "rb").read() == bytes([r]) * 5000
