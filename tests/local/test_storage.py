"""Run-directory pieces on their own: retention, result files, checkpoint verification."""
import os

import pytest

from hpctrain import Checkpoint, CheckpointConfig
from hpctrain.rundir.commit import publish, stage_shard, verify_checkpoint
from hpctrain.errors import CheckpointError
from hpctrain.rundir.layout import (CheckpointRecord, ResultTail, RunDir,
                                        checkpoints_to_delete, flatten, read_results)


def recs(scores):
    return [CheckpointRecord(i, f"c{i}", {"metrics": {} if s is None else {"loss": s}})
            for i, s in enumerate(scores)]


@pytest.mark.parametrize("scores, k, attr, order, deleted", [
    pytest.param([3, 1, 2, 5], 1, "loss", "min", [0, 2], id="best-min-and-latest"),
    pytest.param([3, 1, 2, 5], 1, "loss", "max", [0, 1, 2], id="latest-is-best-max"),
    pytest.param([3, 1, 2, 5], 2, None, "max", [0, 1], id="most-recent"),
    pytest.param([3, 1, 2, 5], None, "loss", "min", [], id="keep-all"),
    pytest.param([3, 1, 2], 5, "loss", "min", [], id="fewer-than-k"),
    pytest.param([None, 1, None, 4], 1, "loss", "min", [0, 2], id="unscored-rank-last"),
    pytest.param([2, 2, 2, 2], 2, "loss", "min", [0, 1], id="ties-prefer-newer"),
    pytest.param([1, float("nan"), 3, 2], 2, "loss", "min", [1, 2], id="nan-deleted-first-min"),
    pytest.param([1, float("nan"), 3, 2], 2, "loss", "max", [0, 1], id="nan-deleted-first-max"),
    pytest.param([float("nan"), float("-inf"), 2], 2, "loss", "max", [0],
                 id="nan-below-minus-inf"),
    pytest.param([None, float("nan"), 2], 2, "loss", "max", [0], id="unscored-below-nan"),
])
def test_retention(scores, k, attr, order, deleted):
    assert [r.index for r in checkpoints_to_delete(recs(scores), k, attr, order)] == deleted


def test_result_tail_ignores_a_torn_last_line(tmp_path):
    path = tmp_path / "result.json"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": ')
    tail = ResultTail(str(path))
    assert tail.poll() == [{"a": 1}, {"a": 2}]
    with open(path, "a") as f:
        f.write('3}\n')
    assert tail.poll() == [{"a": 3}]
    assert read_results(str(path)) == [{"a": 1}, {"a": 2}, {"a": 3}]


def test_flatten_for_csv():
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a/b": 1, "a/c/d": 2, "e": 3}


def test_verify_checkpoint_finds_corruption(tmp_path):
    from hpctrain import Checkpoint, CheckpointConfig
    from hpctrain.rundir.commit import digest_shard, publish, stage_shard

    run = RunDir(tmp_path / "run")
    run.create()
    src = tmp_path / "src"
    src.mkdir()
    (src / "w.bin").write_bytes(b"x" * 1000)
    (src / "sub").mkdir()
    (src / "sub" / "v.bin").write_bytes(b"y" * 10)
    manifest = stage_shard(run, 1, 0, Checkpoint(str(src)), sync=True)
    name, _ = publish(run, 1, 0, metrics={"m": 1}, world_size=1,
                      config=CheckpointConfig(), started=0)
    digest_shard(run, 1, 0, list(manifest["files"]))  # finds it under its committed name
    path = os.path.join(run.checkpoints_dir, name)
    assert sorted(os.listdir(path)) == [".hpctrain_checkpoint.json", ".hpctrain_digest.rank-0.json",
                                        ".hpctrain_shard.rank-0.json", "sub", "w.bin"]
    assert verify_checkpoint(path) == []
    assert run.latest_checkpoint().metrics == {"m": 1}
    # a digest record being written (its temporary, empty so far: seen in CI as a
    # JSONDecodeError that failed the restart) and one a node crash left empty (written
    # without fsync) are not read as digests; the sizes are still checked
    open(os.path.join(path, ".hpctrain_digest.rank-0.json.tmp-123-456"), "w").close()
    open(os.path.join(path, ".hpctrain_digest.rank-1.json"), "w").close()
    assert verify_checkpoint(path) == []
    with open(os.path.join(path, "w.bin"), "r+b") as f:
        f.write(b"z")  # same size, different content
    assert verify_checkpoint(path) == ["w.bin: content digest mismatch"]
    os.remove(os.path.join(path, "sub", "v.bin"))
    assert "sub/v.bin: missing" in verify_checkpoint(path)


def test_half_written_checkpoint_is_invisible_and_cleaned(tmp_path):
    run = RunDir(tmp_path / "run")
    run.create()
    os.makedirs(run.staging_tmp(3))
    open(os.path.join(run.staging_tmp(3), "x"), "w").close()
    assert run.list_checkpoints() == [] and run.next_checkpoint_index() == 0
    assert run.clean_incomplete() == [".tmp_checkpoint_i000000003"]
    assert os.listdir(run.checkpoints_dir) == []


def _fill(directory):
    """Write zeros into ``directory/filler`` until the filesystem is full."""
    with open(os.path.join(directory, "filler"), "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        except OSError as e:
            assert e.errno == 28  # ENOSPC
    return os.path.join(directory, "filler")


def _run_with_one_checkpoint(disk, tmp_path):
    """A run on ``disk`` with one committed checkpoint (of ``src``, 1000 bytes)."""
    run = RunDir(os.path.join(disk, "run"))
    run.create()
    src = tmp_path / "src"
    src.mkdir()
    (src / "w.bin").write_bytes(b"x" * 1000)
    stage_shard(run, 1, 0, Checkpoint(str(src)), sync=True)
    first, _ = publish(run, 1, 0, metrics={"m": 1}, world_size=1,
                       config=CheckpointConfig(), started=0)
    return run, src, first


FULL = ("This checkpoint is discarded; the last committed one is untouched.\n"
        "HINT: the filesystem (or your quota) is full")


@pytest.mark.parametrize("instant", ["new-staging-directory", "existing-staging-directory"])
def test_a_disk_full_at_any_staging_step_is_the_checkpoint_error_with_its_hint(
        small_disk, tmp_path, instant):
    """CI once saw a raw ENOSPC: the copies fitted exactly and the manifest written after
    them did not. Every write of a shard — the staging directory, the copies, the
    manifest — fails as one CheckpointError that says what to do, and leaves nothing of
    this rank behind. An empty file needs no data block on tmpfs, so with the disk full
    the copy succeeds and the manifest (written last) is what fails."""
    run, src, first = _run_with_one_checkpoint(small_disk, tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "w.bin").write_bytes(b"")
    if instant == "existing-staging-directory":
        os.makedirs(run.staging_tmp(2))  # the directory exists: only the manifest is left
    filler = _fill(small_disk)
    with pytest.raises(CheckpointError) as info:
        stage_shard(run, 2, 1, Checkpoint(str(empty)), sync=True)
    assert "rank 1: writing the checkpoint of report 2" in str(info.value)
    assert "No space left on device" in str(info.value) and FULL in str(info.value)
    if os.path.isdir(run.staging_tmp(2)):
        assert os.listdir(run.staging_tmp(2)) == []  # its copy was freed
    os.remove(filler)
    assert [r.path for r in run.list_checkpoints()] == [os.path.join(run.checkpoints_dir, first)]
    assert verify_checkpoint(run.latest_checkpoint().path) == []


def test_a_disk_full_when_rank0_publishes_discards_that_checkpoint_clearly(small_disk, tmp_path):
    """Rank 0's metadata write is the last write before the commit: a full disk there is
    the same CheckpointError, the staged directory is removed (its room freed) and the
    previous checkpoint stays the latest."""
    run, src, first = _run_with_one_checkpoint(small_disk, tmp_path)
    stage_shard(run, 2, 0, Checkpoint(str(src)), sync=True)
    _fill(small_disk)
    with pytest.raises(CheckpointError) as info:
        publish(run, 2, 1, metrics={"m": 2}, world_size=1, config=CheckpointConfig(), started=0)
    assert "report 2" in str(info.value) and FULL in str(info.value)
    assert not os.path.exists(run.staging_tmp(2))
    assert [os.path.basename(r.path) for r in run.list_checkpoints()] == [first]
    assert run.latest_checkpoint().metrics == {"m": 1}
    assert verify_checkpoint(run.latest_checkpoint().path) == []


def test_a_disk_full_when_recording_metrics_is_a_clear_error_and_leaves_no_half_line(
        small_disk):
    """result.json and progress.csv get a report's line both or neither, never half of
    one, and a full disk says what to do."""
    from hpctrain.rundir.layout import ResultWriter
    from hpctrain.errors import CheckpointError

    run = RunDir(os.path.join(small_disk, "run"))
    run.create()
    writer = ResultWriter(run)
    writer.write({"loss": 1.0, "_training_iteration": 1})
    filler = _fill(small_disk)
    with pytest.raises(CheckpointError) as info:
        for it in range(2, 2000):  # until a line needs a new block
            writer.write({"loss": 0.5, "blob": "x" * 100, "_training_iteration": it})
    assert f"in {run.result_file} failed: No space left on device" in str(info.value)
    assert "Its metrics are not recorded; committed checkpoints are untouched.\nHINT: the " \
        "filesystem (or your quota) is full" in str(info.value)
    lost = int(str(info.value).split("recording report ")[1].split()[0])
    os.remove(filler)
    writer.write({"loss": 0.25, "_training_iteration": lost})  # the same report, again
    writer.close()
    rows = read_results(run.result_file)
    assert [r["_training_iteration"] for r in rows] == list(range(1, lost + 1))
    with open(run.progress_file) as f:
        lines = f.read().splitlines()
    assert lines[0] == "loss,_training_iteration" and len(lines) == lost + 1
    assert lines[-1] == f"0.25,{lost}"


def test_same_name_from_a_rank_that_came_first_is_replaced_by_the_lowest_ranks(tmp_path):
    """Without the agreement that lets rank 0 list its names first (a checkpoint handed in
    between agreement reports), ranks 2 and 1 may write a name before rank 0 does: the
    later ones write theirs aside, and the committed checkpoint still holds rank 0's copy
    (and, for a name rank 0 lacks, rank 1's), with digests that verify."""
    from hpctrain.rundir.commit import digest_shard

    run = RunDir(tmp_path / "run")
    run.create()
    manifests = {}
    for rank in (2, 1, 0):  # the highest rank first
        src = tmp_path / f"src-{rank}"
        (src / "sub").mkdir(parents=True)
        (src / "sub" / "model.pt").write_bytes(bytes([rank]) * (100 + rank))
        if rank:
            (src / "extra.bin").write_bytes(bytes([rank]) * 10)
        manifests[rank] = stage_shard(run, 1, rank, Checkpoint(str(src)), sync=False)
    assert manifests[2]["files"] == {"sub/model.pt": {"size": 102}, "extra.bin": {"size": 10}}
    assert manifests[0]["files"] == {"sub/model.pt": {"size": 100, "aside": True}}
    duplicates = []
    name, _ = publish(run, 1, 0, metrics={}, world_size=3, config=CheckpointConfig(),
                      started=0, on_duplicates=duplicates.append)
    assert duplicates == [{"sub/model.pt": [0, 1, 2], "extra.bin": [1, 2]}]
    path = os.path.join(run.checkpoints_dir, name)
    for rank, manifest in manifests.items():  # each rank hashes the copies it wrote
        digest_shard(run, 1, rank, list(manifest["files"]), name,
                     [rel for rel, i in manifest["files"].items() if i.get("aside")])
    assert sorted(e for e in os.listdir(path) if not e.startswith(".hpctrain_")) == [
        "extra.bin", "sub"]
    assert os.listdir(os.path.join(path, "sub")) == ["model.pt"]
    assert open(os.path.join(path, "sub", "model.pt"), "rb").read() == bytes([0]) * 100
    assert open(os.path.join(path, "extra.bin"), "rb").read() == bytes([1]) * 10
    meta = Checkpoint(path).commit_record()
    assert meta["files"] == {"sub/model.pt": {"size": 100, "rank": 0},
                             "extra.bin": {"size": 10, "rank": 1}}
    assert verify_checkpoint(path) == []


def _private_workload(config):
    import tempfile

    import hpctrain

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.pt")
        with open(path, "w") as f:
            f.write("weights")
        os.chmod(path, config["file_mode"])
        hpctrain.report({"loss": 1.0}, checkpoint=Checkpoint.from_directory(d))


@pytest.mark.parametrize("share, dirs, files", [(None, 0o700, 0o600), ("group", 0o2750, 0o640)])
def test_a_run_directory_has_its_shares_modes_whatever_the_umask(storage, share, dirs, files):
    """Under umask 002 (a setgid project directory's usual one), before issue 25: the run
    directory 0775, checkpoint files 0644 even when the user's file was 0600, job.sh 0755.
    Now everything hpctrain makes has the share's modes: nothing writable by another user,
    nothing readable by one unless the run is shared with the group."""
    import stat

    from hpctrain import RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    old = os.umask(0o002)
    try:
        result = TorchTrainer(_private_workload, train_loop_config={"file_mode": 0o666},
                              scaling_config=ScalingConfig(num_workers=2),
                              run_config=RunConfig(name="modes", storage_path=storage,
                                                   verbose=0, share=share)).fit()
    finally:
        os.umask(old)
    seen = {}
    for root, subdirs, names in os.walk(result.path):
        seen[root] = stat.S_IMODE(os.stat(root).st_mode)
        for n in names:
            seen[os.path.join(root, n)] = stat.S_IMODE(os.lstat(os.path.join(root, n)).st_mode)
    writable = {p: f"{m:o}" for p, m in seen.items() if m & 0o022}
    assert writable == {}, writable
    readable = {p: f"{m:o}" for p, m in seen.items() if m & 0o004}
    assert readable == {}, readable  # never by other users
    assert seen[result.path] == dirs
    for name in ("spec.toml", "state.json", "result.json", "progress.csv"):
        assert seen[os.path.join(result.path, name)] == files, name
    assert seen[os.path.join(result.checkpoint.path, "model.pt")] == files
    assert seen[os.path.join(result.path, ".hpctrain", "payload.pkl")] == 0o600


def test_a_run_directory_an_older_hpctrain_left_0755_continues_private(storage):
    """Older hpctrain made run directories with the umask (0755 under 022). Such a
    directory is neither refused (nobody else can write it) nor taken for a group share
    (only 2750 is one): it continues, and becomes private."""
    import stat

    from hpctrain import RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    def fit():
        return TorchTrainer(_private_workload, train_loop_config={"file_mode": 0o600},
                            scaling_config=ScalingConfig(num_workers=1),
                            run_config=RunConfig(name="older", storage_path=storage,
                                                 verbose=0)).fit()

    first = fit()
    with open(os.path.join(first.path, "state.json")) as f:
        state = f.read().replace('"FINISHED"', '"FAILED"')  # leave it to be continued
    with open(os.path.join(first.path, "state.json"), "w") as f:
        f.write(state)
    for root, _dirs, names in os.walk(first.path):
        os.chmod(root, 0o755)
        for n in names:
            os.chmod(os.path.join(root, n), 0o644)
    second = fit()
    assert second.path == first.path
    assert stat.S_IMODE(os.stat(second.path).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(second.path, "spec.toml")).st_mode) == 0o600


def test_the_payload_gives_its_backend_before_the_training_function(tmp_path):
    """payload.pkl: the backend's name and config first, so a worker sets the backend's
    environment before the training function is unpickled; a file of an older hpctrain
    (the payload alone) still loads."""
    import cloudpickle

    from hpctrain.backends.tensorflow import TensorflowConfig
    from hpctrain.config import ScalingConfig
    from hpctrain.rundir.payload import WorkerPayload

    run = RunDir(tmp_path / "run")
    run.create()
    payload = WorkerPayload(train_func=len, train_loop_config={"a": 1}, backend="tensorflow",
                            backend_config=TensorflowConfig(legacy_keras=False),
                            scaling=ScalingConfig(num_workers=1),
                            checkpoint_config=CheckpointConfig(), run_name="r")
    payload.save(run)
    seen = []
    loaded = WorkerPayload.load(run, before_user=lambda *a: seen.append(a))
    assert seen == [("tensorflow", TensorflowConfig(legacy_keras=False))]
    assert loaded == payload
    with open(run.payload_file, "wb") as f:  # as an older hpctrain wrote it
        f.write(cloudpickle.dumps(payload))
    assert WorkerPayload.load(run, before_user=lambda *a: seen.append(a)) == payload
    assert len(seen) == 1
