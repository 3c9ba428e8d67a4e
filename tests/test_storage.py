"""Run-directory pieces on their own: retention, result files, checkpoint verification."""
import os

import pytest

from hpctrain._internal.commit import verify_checkpoint
from hpctrain._internal.storage import (CheckpointRecord, ResultTail, RunDir,
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
    from hpctrain._internal.commit import digest_shard, publish, stage_shard

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
