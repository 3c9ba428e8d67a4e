"""Ray Data's names on hpctrain's shards: DataConfig(datasets_to_split) and the trainers'
dataset_config= (and [data] in a job file), iter_batches(prefetch_batches=),
iter_torch_batches(dtypes=, device=, collate_fn=) and iter_tf_batches."""
import doctest
import importlib
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

h5py = pytest.importorskip("h5py", reason="hpctrain[data] (h5py) is not installed")

import hpctrain  # noqa: E402
import hpctrain.torch  # noqa: E402
import hpctrain.train  # noqa: E402 - Ray 2's ray.train.DataConfig path
from hpctrain import ConfigError, DataConfig, Run, RunConfig, ScalingConfig  # noqa: E402
from hpctrain.data import HDF5Dataset, SequenceDataset  # noqa: E402

import data_workloads  # noqa: E402


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "hpctrain-prefetch"]


def _same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        assert all(np.array_equal(x[k], y[k]) for k in x)


@pytest.mark.parametrize("name", ["hpctrain.data.prefetch", "hpctrain.config"])
def test_docstring_examples(name):
    assert doctest.testmod(importlib.import_module(name)).failed == 0


# -- DataConfig ------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["python", "job file"])
def test_datasets_to_split_splits_train_and_gives_every_rank_all_of_val(tmp_path, storage,
                                                                        how):
    train = data_workloads.make_file(str(tmp_path / "train.h5"), 1000, 4, chunk_rows=50)
    val = data_workloads.make_file(str(tmp_path / "val.h5"), 301, 4, chunk_rows=50)
    if how == "python":
        trainer = hpctrain.torch.TorchTrainer(
            data_workloads.read_split_and_whole,
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(name="split", storage_path=storage, verbose=0),
            datasets={"train": f"{train}:x,y", "val": f"{val}:x,y"},
            dataset_config=DataConfig(datasets_to_split=["train"]))
    else:
        from hpctrain.spec import load_job_spec

        job = tmp_path / "job.toml"
        job.write_text(
            f'[job]\nentrypoint = "{os.path.abspath(data_workloads.__file__)}:'
            f'read_split_and_whole"\n[scaling]\nnum_workers = 2\n'
            f'[run]\nname = "split"\nstorage_path = "{storage}"\nverbose = 0\n'
            f'[datasets]\ntrain = "train.h5:x,y"\nval = "val.h5:x,y"\n'
            f'[data]\ndatasets_to_split = ["train"]\n')
        spec = load_job_spec(str(job))
        again = tmp_path / "again.toml"                   # the resolved spec keeps it
        again.write_text(spec.to_toml())
        assert load_job_spec(str(again)).data_config == DataConfig(["train"])
        trainer = Run.from_spec(spec)
    result = trainer.fit()
    out = [json.load(open(os.path.join(result.path, "test-out", f"rank-{r}.json")))
           for r in range(2)]
    halves = [o["train"] for o in out]
    assert [len(h) for h in halves] == [500, 500]
    assert not set(halves[0]) & set(halves[1])            # disjoint
    assert sorted(halves[0] + halves[1]) == list(range(1000))   # together: all of train
    for o in out:                                         # every rank: all of val
        assert sorted(o["val"]) == list(range(301))
    # a restored run splits the same datasets
    restored = hpctrain.torch.TorchTrainer.restore(result.path)
    assert restored.dataset_config == DataConfig(["train"])


def test_datasets_to_split_defaults_to_all_and_refuses_what_it_cannot_mean(tmp_path):
    train = data_workloads.make_file(str(tmp_path / "t.h5"), 10, 2)
    assert DataConfig().datasets_to_split == "all" and DataConfig().splits("anything")
    assert hpctrain.train.DataConfig is DataConfig        # Ray's ray.train.DataConfig path
    with pytest.raises(ConfigError) as e:
        DataConfig(datasets_to_split="train")
    assert "dataset_config.datasets_to_split: expected \"all\" or a list" in str(e.value)
    assert "HINT:" in str(e.value)
    with pytest.raises(ConfigError) as e:                 # a typo would give every rank all
        hpctrain.torch.TorchTrainer(lambda: None, datasets={"train": f"{train}:x,y"},
                                    dataset_config=DataConfig(["trian"]))
    assert "no dataset named 'trian' (this run has 'train')" in str(e.value)
    with pytest.raises(ConfigError, match="dataset_config: expected a hpctrain.DataConfig"):
        hpctrain.torch.TorchTrainer(lambda: None, dataset_config={"datasets_to_split": "all"})


@pytest.mark.parametrize("value, expected", [
    ('["trian"]', "data.datasets_to_split: no dataset named 'trian' (this run has 'train')"),
    ('"some"', "data.datasets_to_split: expected \"all\" or an array of dataset names"),
    ("[1]", "data.datasets_to_split[0]: expected a string"),
    ("in [datasets]", "datasets.datasets_to_split: 'datasets_to_split' is not a dataset"),
])
def test_bad_datasets_to_split_in_a_job_file_is_named(tmp_path, value, expected):
    from hpctrain.spec import load_job_spec

    data_workloads.make_file(str(tmp_path / "d.h5"), 10, 2)
    job = tmp_path / "job.toml"
    data = f"[data]\ndatasets_to_split = {value}"
    if value == "in [datasets]":                          # [data]'s key written in [datasets]
        data = 'datasets_to_split = ["train"]'
    job.write_text(f'[datasets]\ntrain = "d.h5:x,y"\n{data}\n')
    with pytest.raises(ConfigError) as e:
        load_job_spec(str(job))
    assert str(job) in str(e.value) and expected in str(e.value), str(e.value)
    assert "HINT:" in str(e.value) or "[0]" in expected


# -- prefetch_batches --------------------------------------------------------------------
def test_prefetched_batches_are_the_same_batches_in_the_same_order(tmp_path):
    # 4 KiB rows, 1 MiB windows: a shuffled epoch of 3 windows, batches spanning them
    path = data_workloads.make_file(str(tmp_path / "d.h5"), 900, 1024, chunk_rows=32)
    for shuffle in (True, False):
        shard = HDF5Dataset(path, ["x", "y"], shuffle=shuffle, window_mb=1,
                            seed=2).shard(0, 1)
        plain = [{k: v.copy() for k, v in b.items()}
                 for b in shard.iter_batches(100, epoch=1, prefetch_batches=0)]
        for n in (1, 4):
            _same_batches(list(shard.iter_batches(100, epoch=1, prefetch_batches=n)), plain)
        assert [int(i) for b in plain for i in b["y"]] == shard.indices(1).tolist()
    # the default (1, as in Ray) counts epochs as before
    shard = SequenceDataset(np.arange(50), shuffle=True, seed=1).shard(1, 2)
    first = np.concatenate(list(shard.iter_batches(7)))
    assert first.tolist() == shard.indices(0).tolist() and shard.epoch == 1
    assert not _prefetch_threads()


def test_stopping_early_leaves_no_prefetch_thread(tmp_path):
    shard = SequenceDataset(np.arange(1000)).shard(0, 1)
    for batch in shard.iter_batches(10, prefetch_batches=4):
        assert len(_prefetch_threads()) == 1              # reading ahead meanwhile
        break
    assert not _prefetch_threads()
    kept = shard.iter_batches(10, prefetch_batches=2)     # held in a variable: close()
    assert next(kept).tolist() == list(range(10))
    kept.close()
    assert not _prefetch_threads()
    torch = pytest.importorskip("torch", reason="hpctrain[torch] is not installed")
    with pytest.raises(ZeroDivisionError):                # an error in the loop body
        for batch in shard.iter_torch_batches(10, prefetch_batches=3):
            assert isinstance(batch, torch.Tensor)
            1 / 0
    assert not _prefetch_threads()


def test_errors_on_the_prefetch_thread_reach_the_loop(tmp_path):
    path = data_workloads.make_file(str(tmp_path / "gone.h5"), 100, 2)
    shard = HDF5Dataset(path, ["x", "y"]).shard(0, 1)     # opens the file at the first read
    os.remove(path)
    with pytest.raises(OSError, match="gone.h5"):
        list(shard.iter_batches(10, prefetch_batches=2))
    assert not _prefetch_threads()
    pytest.importorskip("torch", reason="hpctrain[torch] is not installed")

    def collate(batch):                                   # runs on the prefetch thread
        if batch[0] >= 20:
            raise KeyError(f"no label for row {batch[0]}")
        return batch.tolist()

    got = []
    seq = SequenceDataset(np.arange(40)).shard(0, 1)
    with pytest.raises(KeyError, match="no label for row 20"):
        for batch in seq.iter_torch_batches(10, collate_fn=collate, prefetch_batches=3):
            got.append(batch)
    assert got == [list(range(10)), list(range(10, 20))]  # every batch before the error
    assert not _prefetch_threads()
    with pytest.raises(ValueError, match="prefetch_batches: expected an integer >= 0"):
        seq.iter_batches(10, prefetch_batches=-1)


# -- iter_torch_batches ------------------------------------------------------------------
def _typed_file(path):
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(60, dtype=np.float64).reshape(30, 2) / 4
        f["y"] = np.arange(30, dtype=np.int64)
        f["m"] = np.arange(30, dtype=np.int32) % 2
    return path


def test_iter_torch_batches_applies_dtypes_on_the_device(tmp_path):
    torch = pytest.importorskip("torch", reason="hpctrain[torch] is not installed")
    shard = HDF5Dataset(_typed_file(str(tmp_path / "t.h5")), ["x", "y", "m"],
                        seed=3).shard(0, 1)
    numpy_batches = list(shard.iter_batches(8, epoch=0))
    # one dtype for every column
    got = list(shard.iter_torch_batches(8, epoch=0, dtypes=torch.float32, device="cpu"))
    assert [b["x"].dtype for b in got] == [torch.float32] * 4
    assert {b["y"].dtype for b in got} == {torch.float32} == {b["m"].dtype for b in got}
    assert {b["x"].device.type for b in got} == {"cpu"}
    for t, n in zip(got, numpy_batches):
        assert t["x"].tolist() == n["x"].astype(np.float32).tolist()
        assert t["y"].tolist() == n["y"].tolist()
    # per column; the columns left out keep theirs
    got = list(shard.iter_torch_batches(8, epoch=0, dtypes={"x": torch.float16,
                                                            "m": torch.bool}))
    assert (got[0]["x"].dtype, got[0]["y"].dtype, got[0]["m"].dtype) == \
        (torch.float16, torch.int64, torch.bool)
    assert got[0]["m"].tolist() == [bool(v) for v in numpy_batches[0]["m"]]
    assert got[0]["x"].device.type == "cpu"               # "auto" outside a run: the CPU
    # collate_fn: the NumPy batch in, whatever it makes out
    got = list(shard.iter_torch_batches(
        8, epoch=0, collate_fn=lambda b: (torch.as_tensor(b["x"]), torch.as_tensor(b["y"]))))
    assert isinstance(got[0], tuple) and got[0][1].tolist() == numpy_batches[0]["y"].tolist()
    assert shard.epoch == 1                               # explicit epochs leave the count
    with pytest.raises(ConfigError) as e:
        shard.iter_torch_batches(8, dtypes={"images": torch.float32})
    assert "dtypes: no column 'images' in this shard (its columns: 'x', 'y', 'm')" in \
        str(e.value) and "HINT:" in str(e.value)
    with pytest.raises(ValueError, match="collate_fn cannot be used with dtypes or device"):
        shard.iter_torch_batches(8, dtypes=torch.float32, collate_fn=lambda b: b)
    with pytest.raises(ConfigError, match="local_shuffle_buffer_size: a shard has no local"):
        shard.iter_torch_batches(8, local_shuffle_buffer_size=100)
    assert shard.epoch == 1                               # refused: no epoch was used


# -- iter_tf_batches ---------------------------------------------------------------------
def test_iter_tf_batches_yields_tf_tensors_of_the_shards_rows(tmp_path):
    tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
    shard = HDF5Dataset(_typed_file(str(tmp_path / "t.h5")), ["x", "y", "m"],
                        seed=3).shard(1, 2)
    got = list(shard.iter_tf_batches(4, epoch=0, dtypes={"x": tf.float32}))
    assert all(isinstance(v, tf.Tensor) for b in got for v in b.values())
    assert (got[0]["x"].dtype, got[0]["y"].dtype, got[0]["m"].dtype) == \
        (tf.float32, tf.int64, tf.int32)
    assert [int(i) for b in got for i in b["y"].numpy()] == shard.indices(0).tolist()
    assert all(np.array_equal(b["x"].numpy(), (np.stack([2 * b["y"].numpy(),
                                                         2 * b["y"].numpy() + 1], 1) / 4))
               for b in got)
    seq = SequenceDataset(np.arange(10, dtype=np.int64)).shard(0, 1)  # unnamed: one tensor
    got = list(seq.iter_tf_batches(4, dtypes=tf.float64))
    assert [b.dtype for b in got] == [tf.float64] * 3 and got[2].numpy().tolist() == [8., 9.]


def test_hpctrain_data_imports_and_reads_without_tensorflow(tmp_path):
    code = ("import sys; sys.modules['tensorflow'] = None\n"
            "import numpy as np, hpctrain.data as d\n"
            "s = d.SequenceDataset(np.arange(5)).shard(0, 1)\n"
            "print([b.tolist() for b in s.iter_batches(2)])\n"
            "try:\n    s.iter_tf_batches(2)\nexcept ImportError as e:\n    print(e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["[[0, 1], [2, 3], [4]]", "tensorflow is not installed.",
                                     f"HINT: {sys.executable} -m pip install tensorflow"]
