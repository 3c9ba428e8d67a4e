"""The node-local checkpoint tier (``CheckpointConfig(local_dir=...)``) with real worker
processes and real files: a restart in the allocation restores from the local copy (the
shared copy's payload was overwritten after the drain, and the restored state is still
right), a damaged local copy falls back to the shared copy, and bad settings."""
import glob
import json
import os
import stat

import pytest

import tier_workloads
from helpers import fit, run_state
from helpers import hpctrain_log_to
from hpctrain import CheckpointConfig
from hpctrain.errors import ConfigError


def _restore_records(run_path, attempt, ranks=2):
    return [json.load(open(os.path.join(run_path, ".hpctrain", f"attempt-{attempt:03d}",
                                        f"restore.rank-{r}.json"))) for r in range(ranks)]


def _restored(run_path, attempt, rank):
    return json.load(open(os.path.join(run_path, "test-out",
                                       f"restored-{attempt}-rank-{rank}.json")))


@pytest.fixture
def local_dir(tmp_path, monkeypatch):
    """A node-local directory named through an environment variable, expanded by the
    ranks (as "$TMPDIR" would be)."""
    d = tmp_path / "node-local"
    d.mkdir()
    monkeypatch.setenv("HPCTRAIN_TEST_LOCAL", str(d))
    return str(d)


def _fit(storage, name, local_dir, **config):
    return fit(tier_workloads.counter, storage, name=name, max_failures=1,
               config=dict({"steps": 5, "fail_at": 2,
                            "local_glob": os.path.join(local_dir, "hpctrain-*", "*")}, **config),
               ckpt=CheckpointConfig(local_dir="$HPCTRAIN_TEST_LOCAL", num_to_keep=2))


def test_a_restart_restores_from_the_local_copy_without_reading_the_shared_one(
        storage, local_dir):
    result = _fit(storage, "fromlocal", local_dir, damage="shared")
    assert result.error is None
    records = _restore_records(result.path, 2)
    for r, rec in enumerate(records):
        assert rec["source"] == "local", rec
        assert rec["shared_bytes_read"] == 0 and rec["files_on_shared_copy"] == []
        assert rec["local_bytes"] == tier_workloads.SIZE
        restored = _restored(result.path, 2, r)
        # the shared copy's model.bin is all "X" now: the step read back proves the bytes
        # came from the local copy
        assert restored["step"] == 2
        assert restored["path"].startswith(local_dir)
    # the attempt's record in state.json says so too
    assert run_state(result.path)["attempts"][1]["restored"] == {
        "local": [0, 1], "shared": [], "shared_bytes_read": 0}
    damaged = os.path.join(result.path, "checkpoints", records[0]["checkpoint"], "model.bin")
    if os.path.exists(damaged):  # (retention may have dropped it since)
        assert open(damaged, "rb").read(4) == b"XXXX"
    assert tier_workloads.step_of(result.checkpoint.path) == 4
    # the training ended: the ranks' local copies are gone, the tier's own directory
    # (private) stays
    own = glob.glob(os.path.join(local_dir, "hpctrain-*"))
    assert len(own) == 1 and stat.S_IMODE(os.stat(own[0]).st_mode) == 0o700
    assert os.listdir(own[0]) == []


def test_a_damaged_local_copy_falls_back_to_the_shared_copy(storage, local_dir):
    result = _fit(storage, "damaged", local_dir, damage="local")
    assert result.error is None
    rank0, rank1 = _restore_records(result.path, 2)
    assert rank0["source"] == "shared"
    assert rank0["local_problems"] == [
        "model.bin: the local copy's content digest does not match its manifest"]
    assert rank0["shared_bytes_read"] == tier_workloads.SIZE
    assert rank1["source"] == "local"
    assert run_state(result.path)["attempts"][1]["restored"] == {
        "local": [1], "shared": [0], "shared_bytes_read": tier_workloads.SIZE}
    assert _restored(result.path, 2, 0)["path"].startswith(result.path)
    assert [_restored(result.path, 2, r)["step"] for r in (0, 1)] == [2, 2]
    assert tier_workloads.step_of(result.checkpoint.path) == 4


def test_a_torch_state_checkpoint_is_written_into_the_local_tier_then_drained(
        storage, local_dir):
    import torch

    result = fit(tier_workloads.torch_state, storage, name="torchstate", workers=1,
                 config={"local_glob": os.path.join(local_dir, "hpctrain-*", "*")},
                 ckpt=CheckpointConfig(local_dir="$HPCTRAIN_TEST_LOCAL"))
    assert result.error is None
    manifests = json.load(open(os.path.join(result.path, "test-out", "local-manifests.json")))
    assert [sorted(m) for m in manifests] == [["state.pt"]] * 3
    assert torch.equal(torch.load(os.path.join(result.checkpoint.path, "state.pt"))["w"],
                       torch.full((4,), 2))


def test_local_dir_must_be_a_path():
    with pytest.raises(ConfigError, match=r"checkpoint.local_dir: expected a directory "
                                          r"path \(string\), got 5"):
        CheckpointConfig(local_dir=5)


def _run(tmp_path):
    from hpctrain.rundir.layout import RunDir

    run = RunDir(str(tmp_path / "runs" / "r"))
    run.create()
    return run


def test_an_unusable_local_dir_warns_and_writes_to_the_run_directory_only(
        tmp_path, monkeypatch, caplog):
    from hpctrain.rundir.local_tier import LocalTier

    # caplog sees the hpctrain logger's records whatever an earlier test configured
    hpctrain_log_to(caplog, monkeypatch)
    monkeypatch.delenv("HPCTRAIN_TEST_UNSET", raising=False)
    run = _run(tmp_path)
    for setting, why in [("$HPCTRAIN_TEST_UNSET/x", "an environment variable in it is not "
                                                    "set here"),
                         (str(tmp_path / "missing"), "it is not a directory here")]:
        caplog.clear()
        assert LocalTier.open(setting, run, rank=3, node="n7", job_id="1") is None
        assert (f"checkpoint.local_dir={setting!r} on node n7: {why}; rank 3 writes its "
                "checkpoints to the run directory only") in caplog.text


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make a directory another "
                                             "user's")
def test_a_local_tier_directory_of_another_user_is_refused(tmp_path, monkeypatch, caplog):
    hpctrain_log_to(caplog, monkeypatch)
    from hpctrain.rundir.local_tier import LocalTier

    run = _run(tmp_path)
    root = tmp_path / "shared-tmp"
    root.mkdir()
    planted = root / f"hpctrain-{os.getuid()}"  # made first by someone else
    planted.mkdir(mode=0o777)
    os.chown(planted, 4321, 4321)
    assert LocalTier.open(str(root), run, rank=0, node="n1", job_id="1") is None
    assert f"refusing the local checkpoint tier {planted}: it is not a directory of yours" \
        in caplog.text
    assert os.listdir(planted) == []
