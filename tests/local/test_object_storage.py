"""Object storage (``storage_path="s3://…"``) against a real S3 server: moto's, started
by scripts/s3-server.sh (tests/support/s3.py). Runs with the local launcher."""
import json
import os
import subprocess
import sys

import pytest

import hpctrain
from hpctrain import Checkpoint, CheckpointConfig

from helpers import fit, run_state
from s3 import s3_bucket, s3_server  # noqa: F401 - fixtures
import s3_workloads

pytestmark = pytest.mark.timeout(120)


def _objects(uri):
    """Every object under ``uri``, relative to it, sorted."""
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(i.path[len(path) + 1:] for i in infos if i.type == pafs.FileType.File)


def test_a_two_rank_run_stores_its_checkpoints_in_s3_and_resumes_from_there(s3_bucket,
                                                                             tmp_path):
    pytest.importorskip("torch")
    result = fit(s3_workloads.steps, f"{s3_bucket}/runs", name="two", max_failures=1,
                 config={"steps": 5, "fail_after": 2},
                 ckpt=CheckpointConfig(num_to_keep=2))
    # resumed after the failure from checkpoint 2, which it downloaded from S3
    assert result.error is None and result.metrics["i"] == 4 and result.metrics["first"] == 3
    assert result.path == f"{s3_bucket}/runs/two"
    assert type(result.filesystem).__name__ == "S3FileSystem"
    # the data in the bucket: the last two checkpoints, each with both ranks' shards
    names = _objects(f"{s3_bucket}/runs/two/checkpoints")
    assert sorted({n.split("/")[0] for n in names}) == ["checkpoint_000003", "checkpoint_000004"]
    assert {"checkpoint_000004/rank0.bin", "checkpoint_000004/rank1.bin",
            "checkpoint_000004/step.txt",
            "checkpoint_000004/.hpctrain_checkpoint.json"} <= set(names)
    # the control files on POSIX under the control root, no checkpoint among them
    control = tmp_path / "control" / "s3" / s3_bucket[5:] / "runs" / "two"
    state = run_state(str(control))
    assert state["status"] == "FINISHED" and len(state["attempts"]) == 2
    assert not [n for n in os.listdir(control / "checkpoints") if n.startswith("checkpoint_")]
    ckpt = result.checkpoint
    assert ckpt.path == f"{s3_bucket}/runs/two/checkpoints/checkpoint_000004"
    assert type(ckpt.filesystem).__name__ == "S3FileSystem"
    with ckpt.as_directory() as d:
        assert open(os.path.join(d, "step.txt")).read() == "4"
        assert open(os.path.join(d, "rank1.bin"), "rb").read() == bytes([4]) * 16
    assert not os.path.exists(d)  # the download is gone afterwards
    out = ckpt.to_directory(str(tmp_path / "copy"))
    assert sorted(os.listdir(out)) == ["rank0.bin", "rank1.bin", "step.txt"]
