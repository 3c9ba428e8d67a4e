"""hpctrain.data's Ray Data subset: the readers, the transformations with Ray's
semantics, and a Dataset given to a trainer's datasets= read by real torch ranks."""
import doctest
import json
import os

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow", reason="hpctrain[parquet] (pyarrow) is not installed")
pd = pytest.importorskip("pandas")

import hpctrain.data as data  # noqa: E402
from hpctrain import ConfigError, RunConfig, ScalingConfig  # noqa: E402

import data_workloads  # noqa: E402


@pytest.mark.parametrize("module", ["dataset", "arrow", "read_api"])
def test_docstring_examples(module):
    import importlib

    assert doctest.testmod(importlib.import_module(f"hpctrain.data.{module}")).failed == 0


def test_two_torch_ranks_see_disjoint_shards_that_cover_the_transformed_data(tmp_path,
                                                                              storage):
    pytest.importorskip("torch")
    from hpctrain.torch import TorchTrainer

    ds = data.from_items([{"id": i, "x": i / 64} for i in range(64)]) \
        .map_batches(lambda b: {**b, "y": 2 * b["x"] + 1}, batch_size=10) \
        .random_shuffle()
    result = TorchTrainer(
        data_workloads.ray_data_torch, train_loop_config={"epochs": 3},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="raydata", storage_path=storage, verbose=0),
        datasets={"train": ds}, site="local").fit()
    out = [json.load(open(os.path.join(result.path, "test-out", f"rank-{r}.json")))
           for r in range(2)]
    assert out[0]["columns"] == ["id", "x", "y"]          # map_batches' new column arrived
    for epoch in range(3):
        a, b = out[0]["ids"][epoch], out[1]["ids"][epoch]
        assert len(a) == len(b) == 32
        assert sorted(a + b) == list(range(64))           # disjoint, and every row once
    # random_shuffle() without a seed: a new order each epoch (Ray runs it again per pass)
    assert out[0]["ids"][0] != out[0]["ids"][1]
    losses = out[0]["losses"]
    assert losses[-1] < losses[0]                          # the model learned y = 2x + 1
    assert result.metrics["epoch"] == 2


def test_an_odd_row_count_gives_equal_shards_as_ray_does():
    ds = data.range(7)
    parts = [[int(i) for b in ds.shard(r, 2).iter_batches(batch_size=3) for i in b["id"]]
             for r in range(2)]
    assert parts == [[0, 1, 2], [3, 4, 5]]   # streaming_split(equal=True): row 6 sits out


def test_train_test_split_sizes():
    train, test = data.range(8).train_test_split(test_size=0.25)   # Ray's docstring example
    assert [r["id"] for r in train.take_all()] == [0, 1, 2, 3, 4, 5]
    assert [r["id"] for r in test.take_all()] == [6, 7]
    train, test = data.range(10).train_test_split(test_size=0.25)
    assert (train.count(), test.count()) == (7, 3)                 # int(10 * 0.75) stay
    train, test = data.range(10).train_test_split(test_size=4, shuffle=True, seed=3)
    assert (train.count(), test.count()) == (6, 4)
    ids = [r["id"] for r in train.take_all() + test.take_all()]
    assert sorted(ids) == list(range(10)) and ids != list(range(10))
    again = data.range(10).train_test_split(test_size=4, shuffle=True, seed=3)[1]
    assert again.take_all() == test.take_all()                    # the seed fixes it
    with pytest.raises(ValueError, match=r"test_size: a float must be in \(0, 1\), got 1.0"):
        data.range(8).train_test_split(test_size=1.0)
    with pytest.raises(ValueError, match=r"an int must be in \[1, 7\] for 8 rows, got 8"):
        data.range(8).train_test_split(test_size=8)


@pytest.mark.parametrize("fmt,fn", [
    ("numpy", lambda b: {"id": b["id"], "sq": b["id"] ** 2}),
    ("default", lambda b: {"id": b["id"], "sq": b["id"] ** 2}),
    ("pandas", lambda df: df.assign(sq=df["id"] ** 2)),
    ("pyarrow", lambda t: t.append_column("sq", pa.compute.power(t.column("id"), 2))),
])
def test_map_batches_in_each_batch_format(fmt, fn):
    seen = []

    def spy(batch):
        seen.append(type(batch).__name__)
        return fn(batch)

    ds = data.range(10).map_batches(spy, batch_format=fmt, batch_size=4)
    assert ds.take_all() == [{"id": i, "sq": i * i} for i in range(10)]
    assert seen == [{"numpy": "dict", "default": "dict", "pandas": "DataFrame",
                     "pyarrow": "Table"}[fmt]] * 3       # batches of 4, 4, 2 rows


def test_map_batches_batch_sizes_and_a_callable_class():
    sizes = []
    data.range(2500).map_batches(lambda b: sizes.append(len(b["id"])) or b)
    assert sizes == [1024, 1024, 452]                      # Ray's default batch size
    sizes.clear()
    data.range(30).map_batches(lambda b: sizes.append(len(b["id"])) or b, batch_size=None)
    assert sizes == [30]                                   # None: everything at once

    class AddOffset:
        made = 0

        def __init__(self, offset):
            AddOffset.made += 1
            self.offset = offset

        def __call__(self, batch):
            return {"id": batch["id"] + self.offset}

    ds = data.range(6).map_batches(AddOffset, fn_constructor_args=(100,), batch_size=2)
    assert [r["id"] for r in ds.take_all()] == [100, 101, 102, 103, 104, 105]
    assert AddOffset.made == 1


def test_map_filter_shuffle_and_tensor_columns():
    ds = data.range(6).map(lambda r: {"id": r["id"], "name": f"r{r['id']}"})
    assert ds.filter(lambda r: r["id"] % 2 == 0).take_all() == [
        {"id": 0, "name": "r0"}, {"id": 2, "name": "r2"}, {"id": 4, "name": "r4"}]
    shuffled = ds.random_shuffle(seed=0)
    assert shuffled.take_all() == ds.random_shuffle(seed=0).take_all() != ds.take_all()
    assert sorted(r["id"] for r in shuffled.take_all()) == list(range(6))
    images = data.from_numpy(np.arange(48, dtype=np.float32).reshape(4, 3, 4))
    assert images.columns() == ["data"] and images.count() == 4
    batch = next(images.iter_batches(batch_size=4))
    assert batch["data"].shape == (4, 3, 4) and batch["data"][1, 2, 3] == 23
    doubled = images.map_batches(lambda b: {"data": b["data"] * 2})
    assert doubled.take(1)[0]["data"].tolist() == (np.arange(12).reshape(3, 4) * 2).tolist()
    assert ds.materialize() is ds and ds.schema().names == ["id", "name"]


def test_readers(tmp_path):
    frame = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    frame.to_csv(tmp_path / "one.csv", index=False)
    frame.to_csv(tmp_path / "two.csv", index=False)
    csv = data.read_csv(str(tmp_path))
    assert csv.count() == 6 and csv.take(1) == [{"a": 1, "b": "x"}]
    os.makedirs(tmp_path / "pq")
    frame.to_parquet(tmp_path / "pq" / "part-0.parquet")
    pq = data.read_parquet(str(tmp_path / "pq"), columns=["b"])
    assert pq.take_all() == [{"b": "x"}, {"b": "y"}, {"b": "z"}]
    assert data.from_pandas(frame).take_all() == csv.limit(3).take_all()
    assert data.from_items(["p", "q"]).take_all() == [{"item": "p"}, {"item": "q"}]
    assert data.from_arrow(pa.table({"c": [1.5]})).take_all() == [{"c": 1.5}]
    assert list(data.from_pandas(frame).iter_batches(batch_size=2, batch_format="pandas"))[1] \
        .to_dict("list") == {"a": [3], "b": ["z"]}


def test_bad_input_is_refused_with_the_path_or_the_argument(tmp_path):
    missing = str(tmp_path / "nope.csv")
    with pytest.raises(ConfigError, match=f"read_csv: not found: {missing}"):
        data.read_csv(missing)
    with pytest.raises(ConfigError, match="read_parquet: no .parquet/.pq file in the "
                                          f"directory {tmp_path}"):
        data.read_parquet(str(tmp_path))
    with pytest.raises(ConfigError, match=r"map_batches: the function returned a list; "
                                          r"expected a dict of column → array"):
        data.range(3).map_batches(lambda b: [1, 2])
    with pytest.raises(ConfigError, match=r"map_batches: batch_format: expected one of "
                                          r"\"default\", \"numpy\", \"pandas\", \"pyarrow\", "
                                          r"got 'torch'"):
        data.range(3).map_batches(lambda b: b, batch_format="torch")
    with pytest.raises(ConfigError, match="the columns of a batch differ in length"):
        data.range(3).map_batches(lambda b: {"id": b["id"], "short": [1]})
