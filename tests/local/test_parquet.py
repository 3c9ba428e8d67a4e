"""Parquet datasets: real ranks reading real Parquet files (pyarrow), the same plan as
HDF5, the job file's [datasets], and the errors for bad paths and columns."""
import doctest
import json
import os

import numpy as np
import pytest

pytest.importorskip("pyarrow", reason="hpctrain[parquet] (pyarrow) is not installed")

from hpctrain import ConfigError, RunConfig, ScalingConfig  # noqa: E402
from hpctrain.data import ParquetDataset, as_dataset  # noqa: E402
from hpctrain.torch import TorchTrainer  # noqa: E402

import data_workloads  # noqa: E402

SIZES = [700, 323]  # 1023 rows in 2 files, row groups of 64 rows (the last ones shorter)


def test_docstring_examples():
    import hpctrain.data.parquet as module

    assert doctest.testmod(module).failed == 0


def test_three_ranks_read_their_own_rows_of_a_parquet_directory(tmp_path, storage):
    data = data_workloads.make_parquet(str(tmp_path / "train"), SIZES)
    result = TorchTrainer(
        data_workloads.read_parquet_shards, train_loop_config={"batch_size": 50},
        scaling_config=ScalingConfig(num_workers=3),
        run_config=RunConfig(name="pq", storage_path=storage, verbose=0),
        datasets={"train": f"{data}:x,y"}).fit()
    out = [json.load(open(os.path.join(result.path, "test-out", f"rank-{r}.json")))
           for r in range(3)]
    total = sum(SIZES)
    source = ParquetDataset(data, ["x", "y"])
    for epoch in range(2):
        rows = [o["epochs"][epoch] for o in out]
        assert [len(r) for r in rows] == [total // 3] * 3           # equal shards
        union = [i for r in rows for i in r]
        assert len(set(union)) == len(union) == total // 3 * 3     # no row twice
        # exactly the rows (and, for iter_batches, the order) this process plans for them
        for r in range(3):
            planned = source.shard(r, 3, run_name="pq").indices(epoch).tolist()
            assert (rows[r] if epoch == 0 else sorted(rows[r])) == \
                (planned if epoch == 0 else sorted(planned))
    for o in out:
        assert o["aligned"]                                   # x stays with its y
        assert o["block_rows"] == 3                           # the shortest row group
        assert sorted(o["epochs"][0]) != sorted(o["epochs"][1])  # other rows each epoch


def test_shards_without_shuffle_are_the_files_rows_in_order(tmp_path):
    data = data_workloads.make_parquet(str(tmp_path / "d"), SIZES, row_group_rows=100)
    files = sorted(os.path.join(data, f) for f in os.listdir(data))
    for source in (as_dataset({"path": data, "shuffle": False}),
                   as_dataset({"path": files, "shuffle": False}),       # a list of files
                   ParquetDataset(data, shuffle=False, window_mb=1)):
        parts = [source.shard(r, 4) for r in range(4)]
        batches = [b for p in parts for b in p.iter_batches(64)]
        y = np.concatenate([b["y"] for b in batches])
        assert y.tolist() == list(range(sum(SIZES)))           # every row once, in order
        x = np.concatenate([b["x"] for b in batches])
        assert x.shape == (sum(SIZES), 3) and x.dtype == np.float32
        assert (x[:, 1] == y * 100 + 1).all()
        assert [n for b in batches for n in b["name"]][:3] == ["r0", "r1", "r2"]
        assert [len(p) for p in parts] == [256, 256, 256, 255]
    shard = ParquetDataset(data, ["y", "name"], shuffle=False).shard(1, 2)
    frame = shard.to_pandas()
    assert list(frame.columns) == ["y", "name"] and frame["y"].tolist()[0] == 512
    assert shard.column_specs()["y"] == (np.dtype(np.int64), ())


def test_parquet_datasets_round_trip_through_the_job_spec(tmp_path):
    from hpctrain.spec import load_job_spec

    data_workloads.make_parquet(str(tmp_path / "d"), [10])
    (tmp_path / "t.py").write_text("def train(config):\n    pass\n")
    job = tmp_path / "job.toml"
    job.write_text('[job]\nentrypoint = "t.py:train"\n[datasets]\ntrain = "d:x,y"\n'
                   'one = "d/part-000.parquet"\n'
                   'val = { path = ["d/part-000.parquet"], columns = ["x"], shuffle = false }\n')
    spec = load_job_spec(str(job))
    assert spec.datasets["train"] == ParquetDataset(str(tmp_path / "d"), ["x", "y"])
    assert spec.datasets["one"].paths == [str(tmp_path / "d" / "part-000.parquet")]
    assert spec.datasets["val"].shuffle is False and spec.datasets["val"].columns == ["x"]
    again = tmp_path / "again.toml"
    again.write_text(spec.to_toml())
    assert load_job_spec(str(again)).datasets == spec.datasets


@pytest.mark.parametrize("entry, expected", [
    ('train = "d:x,nope"', ["datasets.train", "no column 'nope'", "its columns: x, y, name"]),
    ('train = "empty/:x"', ["datasets.train", "no *.parquet file", "empty"]),
    ('train = "bad.parquet"', ["datasets.train", "bad.parquet is not a readable Parquet file"]),
    ('train = "gone.parquet"', ["datasets.train", "not found", "gone.parquet"]),
    ('train = { path = "d", colums = ["x"] }', ["datasets.train", "colums", "unknown option"]),
    ('train = { path = "d", window_mb = 0 }', ["datasets.train", "window_mb",
                                              "expected an integer >= 1"]),
])
def test_bad_parquet_datasets_in_a_job_file_are_refused(tmp_path, capsys, entry, expected):
    from hpctrain.cli.main import main

    data_workloads.make_parquet(str(tmp_path / "d"), [10])
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.parquet").write_text("not parquet\n")
    (tmp_path / "t.py").write_text("def train(config):\n    pass\n")
    job = tmp_path / "job.toml"
    job.write_text(f'[job]\nentrypoint = "t.py:train"\n[run]\nstorage_path = "runs"\n'
                   f'[datasets]\n{entry}\n')
    with pytest.raises(SystemExit) as e:
        main(["validate", str(job)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and str(job) in err and all(x in err for x in expected), err
    assert not (tmp_path / "runs").exists()


def test_a_bad_parquet_dataset_in_python_is_refused_before_anything_runs(tmp_path, storage):
    data_workloads.make_parquet(str(tmp_path / "d"), [10])
    with pytest.raises(ConfigError, match="datasets.train: .* has no column 'z'"):
        TorchTrainer(data_workloads.read_parquet_shards,
                     run_config=RunConfig(name="bad", storage_path=storage, verbose=0),
                     datasets={"train": ParquetDataset(str(tmp_path / "d"), ["z"])}).fit()
    assert not os.path.exists(os.path.join(storage, "bad"))
