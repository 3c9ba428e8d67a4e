"""The Checkpoint object on its own (Ray Train 2 names)."""
import os

import pytest

from hpctrain import Checkpoint


def test_from_dict_round_trip_and_to_directory(tmp_path):
    ck = Checkpoint.from_dict({"epoch": 3, "weights": [1.0, 2.0]})
    assert ck.to_dict() == {"epoch": 3, "weights": [1.0, 2.0]}
    out = ck.to_directory(tmp_path / "copy")
    assert Checkpoint.from_directory(out).to_dict()["epoch"] == 3


def test_directory_checkpoint(tmp_path):
    d = tmp_path / "ck"
    (d / "sub").mkdir(parents=True)
    (d / "model.pt").write_bytes(b"abc")
    (d / "sub" / "opt.pt").write_bytes(b"de")
    (d / ".hpctrain_checkpoint.json").write_text('{"iteration": 4, "metrics": {"loss": 0.5}}')
    ck = Checkpoint.from_directory(d)
    with ck.as_directory() as path:
        assert open(os.path.join(path, "model.pt"), "rb").read() == b"abc"
    assert ck.commit_record()["iteration"] == 4 and ck.metrics == {"loss": 0.5}
    out = ck.to_directory(tmp_path / "out")
    assert sorted(os.listdir(out)) == ["model.pt", "sub"]  # hpctrain's metadata left behind
    assert ck == Checkpoint(str(d)) and len({ck, Checkpoint(str(d))}) == 1
    with pytest.raises(ValueError, match="holds no dict"):
        ck.to_dict()


def test_from_directory_requires_a_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        Checkpoint.from_directory(tmp_path / "missing")
