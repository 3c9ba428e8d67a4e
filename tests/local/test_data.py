"""Sharded datasets: real ranks reading a real HDF5 file, the plan's guarantees, the
adapters and the job file's [datasets]."""
import doctest
import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import ROOT

h5py = pytest.importorskip("h5py", reason="hpctrain[data] (h5py) is not installed")

from hpctrain import RunConfig, ScalingConfig  # noqa: E402
from hpctrain.data import HDF5Dataset, SequenceDataset, plan, shard_list  # noqa: E402
from hpctrain.torch import TorchTrainer  # noqa: E402

import data_workloads  # noqa: E402

ROWS, COLS = 4000, 256  # 4 MiB of float32 in chunks of 64 rows (64 KiB); not a multiple
WINDOW_MB = 1           # 15 chunks: each rank's 1000 rows (16 chunks) are 2 windows


@pytest.mark.parametrize("name", ["hpctrain.data.plan", "hpctrain.data.shard",
                                  "hpctrain.data.sequence", "hpctrain.data.hdf5",
                                  "hpctrain.data.source",
                                  "hpctrain.cli.views", "hpctrain.callbacks"])
def test_docstring_examples(name):
    assert doctest.testmod(importlib.import_module(name)).failed == 0


def test_four_ranks_read_their_own_quarter_of_an_hdf5_file(tmp_path, storage):
    train = data_workloads.make_file(str(tmp_path / "train.h5"), ROWS, COLS)
    val = data_workloads.make_file(str(tmp_path / "val.h5"), 1027, 8, chunk_rows=50)
    files = [f"shard-{i:03d}.npy" for i in range(10)]
    result = TorchTrainer(
        data_workloads.read_shards, train_loop_config={"batch_size": 100},
        scaling_config=ScalingConfig(num_workers=4),
        run_config=RunConfig(name="shards", storage_path=storage, verbose=0),
        datasets={"train": HDF5Dataset(train, ["x", "y"], window_mb=WINDOW_MB),
                  "val": HDF5Dataset(val, ["x", "y"], shuffle=False),
                  "files": files}).fit()
    out = [json.load(open(os.path.join(result.path, "test-out", f"rank-{r}.json")))
           for r in range(4)]
    size = os.path.getsize(train)
    for epoch in range(2):
        rows = [o["epochs"][epoch] for o in out]
        union = sorted(i for r in rows for i in r)
        assert union == list(range(ROWS))                  # the dataset, no row twice
        assert [len(r) for r in rows] == [ROWS // 4] * 4
        # every rank computed the same plan of all ranks, and read exactly its part of it
        assert all(o["plans"][epoch] == out[0]["plans"][epoch] for o in out)
        assert [out[0]["plans"][epoch][r] for r in range(4)] == rows
        # each rank read about a quarter of the file (whole 64-row chunks, plus metadata)
        for o in out:
            assert 0.24 * size <= o["bytes"][epoch] <= 0.30 * size, (epoch, o["bytes"], size)
    for o in out:
        assert o["epochs"][0] != o["epochs"][1]            # a new order each epoch
        assert sorted(o["epochs"][0]) != sorted(o["epochs"][1])  # and other blocks
        assert o["train_x_matches"] and o["val_x_matches"]
    # the order is a function of the run name and the epoch: this process computes it too
    source = HDF5Dataset(train, ["x", "y"], window_mb=WINDOW_MB)
    shard = source.shard(0, 4, run_name="shards")
    assert len(shard.segments(0)) > shard.window_blocks  # more than one window per rank
    for r in range(4):
        assert source.shard(r, 4, run_name="shards").indices(1).tolist() == out[r]["epochs"][1]
    # evaluation: 1027 rows over 4 ranks, every row exactly once, sizes 257/257/257/256
    assert [len(o["val"]) for o in out] == [257, 257, 257, 256]
    assert [i for o in out for i in o["val"]] == list(range(1027))
    # a plain file list: contiguous parts, nothing duplicated or dropped
    assert [o["files"] for o in out] == [files[0:3], files[3:6], files[6:8], files[8:10]]
    assert [row["rows"] for row in result.metrics_dataframe.to_dict("records")] == [1000, 1000]


@pytest.mark.parametrize("rows, world", [(10, 4), (4096, 4), (7, 8), (1000, 3)])
@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("remainder", ["drop", "uneven"])
def test_the_plan_never_duplicates_and_says_what_it_drops(rows, world, shuffle, remainder):
    def epoch(e):
        return [plan.shard_indices(rows, r, world, epoch=e, seed=7, shuffle=shuffle,
                                   remainder=remainder, block_rows=3, window_blocks=2).tolist()
                for r in range(world)]

    for e in range(3):
        shards = epoch(e)
        seen = [i for s in shards for i in s]
        assert len(seen) == len(set(seen))                 # never a row twice
        sizes = [len(s) for s in shards]
        if remainder == "drop":
            assert sizes == [rows // world] * world        # equal: lockstep training
            assert len(seen) == rows - rows % world
        else:
            assert sorted(seen) == list(range(rows))       # every row once (evaluation)
            assert max(sizes) - min(sizes) <= 1
    if shuffle and remainder == "drop" and rows % world and rows > world:
        left_out = [set(range(rows)) - {i for s in epoch(e) for i in s} for e in range(3)]
        assert len({frozenset(x) for x in left_out}) > 1  # not always the same rows


def test_shard_list_and_sequence_shards():
    assert shard_list(list(range(7)), rank=2, world_size=3) == [5, 6]
    assert shard_list(np.arange(7), rank=0, world_size=3, shuffle=True, seed=1).shape == (2,)
    s = SequenceDataset(np.arange(20).reshape(10, 2), shuffle=True, seed=3).shard(1, 2)
    first = np.concatenate(list(s.iter_batches(3)))       # epoch 0, then
    second = np.concatenate(list(s.iter_batches(3)))      # epoch 1
    assert first.shape == (5, 2) and (first[:, 1] == first[:, 0] + 1).all()
    assert first[:, 0].tolist() != second[:, 0].tolist()
    s.set_epoch(0)
    assert np.concatenate(list(s.iter_batches(4))).tolist() == first.tolist()


def test_torch_and_tf_adapters_yield_the_shards_rows(tmp_path):
    path = data_workloads.make_file(str(tmp_path / "d.h5"), 300, 4, chunk_rows=32)
    shard = HDF5Dataset(path, ["x", "y"], seed=5).shard(1, 3)
    torch = pytest.importorskip("torch", reason="hpctrain[torch] is not installed")
    ds = shard.to_torch(16)
    assert isinstance(ds, torch.utils.data.IterableDataset)
    got = [int(i) for b in ds for i in b["y"]]
    assert got == shard.indices(0).tolist() and shard.epoch == 1
    loader = shard.to_torch_dataloader(16, num_workers=2)   # two loader processes
    got = sorted(int(i) for b in loader for i in b["y"])
    assert got == sorted(shard.indices(1).tolist()) and shard.epoch == 2
    tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
    tfds = shard.to_tf(16)
    assert [int(i) for b in tfds for i in b["y"].numpy()] == shard.indices(2).tolist()
    assert [int(i) for b in tfds for i in b["y"].numpy()] == shard.indices(3).tolist()
    assert tfds.element_spec["x"].dtype == tf.float32


def test_rows_kept_from_a_shuffled_shard_stay_whole_across_windows(tmp_path):
    path = data_workloads.make_file(str(tmp_path / "r.h5"), 4000, COLS, chunk_rows=100)
    shard = HDF5Dataset(path, ["x", "y"], window_mb=1, seed=3).shard(0, 1)
    assert shard.window_blocks == 10                      # 4 windows of 100 KiB chunks
    rows = list(shard)                                    # kept while later windows are read
    assert [int(r["y"]) for r in rows] == shard.indices(0).tolist()
    assert all(data_workloads.x_matches(r) for r in rows)


def test_a_chunk_larger_than_the_window_is_read_in_parts_or_named(tmp_path):
    # h5py-style big chunks: 3000 rows of 1 KiB in one 3 MiB chunk, a 1 MiB window
    path = data_workloads.make_file(str(tmp_path / "big.h5"), 3000, COLS, chunk_rows=3000)
    shard = HDF5Dataset(path, ["x", "y"], window_mb=1, seed=1).shard(0, 1)
    got = list(shard.iter_batches(128))
    assert sorted(int(i) for b in got for i in b["y"]) == list(range(3000))
    assert all(data_workloads.x_matches(b) for b in got)
    held = sum(buf.nbytes for buf in shard._buffers.values())
    assert 0 < held <= 1 << 20                            # the window holds what it says
    # compressed chunks are decompressed whole: cannot be split, said clearly instead
    gz = data_workloads.make_file(str(tmp_path / "gz.h5"), 3000, COLS, chunk_rows=3000,
                                  compression="gzip")
    with pytest.warns(UserWarning) as w:
        shard = HDF5Dataset(gz, ["x", "y"], window_mb=1).shard(0, 2)
    (msg,) = [str(x.message) for x in w if "hpctrain.data" in str(x.message)]
    assert gz in msg and "column 'x' has chunks of shape (3000, 256)" in msg
    assert "a window is 3 MiB, not window_mb=1" in msg and "h5repack" in msg
    got = list(shard.iter_batches(128))
    assert sorted(int(i) for b in got for i in b["y"]) == list(range(1500))


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
def test_loader_processes_make_every_rank_the_batches_of_one_reader(tmp_path):
    torch = pytest.importorskip("torch", reason="hpctrain[torch] is not installed")
    # 4 KiB rows, 64-row chunks (256 KiB), 1 MiB windows: each rank's 750 rows are
    # 3-4 windows, dealt to 3 loader processes
    path = data_workloads.make_file(str(tmp_path / "d.h5"), 3000, 1024, chunk_rows=64)
    source = HDF5Dataset(path, ["x", "y"], window_mb=1)
    for rank in range(4):
        shard = source.shard(rank, 4, run_name="loader")
        assert len(shard.segments(0)) > 2 * shard.window_blocks
        loader = shard.to_torch_dataloader(100, num_workers=3, persistent_workers=True,
                                           drop_last=rank == 3)
        for epoch in range(2):
            got = list(loader)
            # as many batches as one reader makes (8, or 7 full ones), on every rank
            assert len(got) == (7 if rank == 3 else 8), (rank, epoch)
            assert [len(b["y"]) for b in got].count(100) == 7
            rows = sorted(int(i) for b in got for i in b["y"])
            if rank == 3:  # drop_last: the epoch's last 50 rows (one short batch) sit out
                assert len(rows) == 700 and set(rows) < set(shard.indices(epoch).tolist())
            else:          # this epoch's rows (the persistent processes moved on with it)
                assert rows == sorted(shard.indices(epoch).tolist())
            assert all(data_workloads.x_matches(b) for b in got)
    # a plain DataLoader's processes cannot count epochs: told, or given by set_epoch
    ds = source.shard(0, 4, run_name="loader").to_torch(100)
    plain = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    with pytest.raises(RuntimeError, match="to_torch_dataloader"):
        list(plain)
    for epoch in (1, 0):
        ds.set_epoch(epoch)
        got = sorted(int(i) for b in plain for i in b["y"])
        assert got == sorted(ds.shard.indices(epoch).tolist())
    with pytest.raises(RuntimeError, match="epoch 0 was read already"):
        list(plain)                                        # no silent replay


@pytest.mark.parametrize("entry, expected", [
    ('train = "missing.h5:x,y"', ["datasets.train", "file not found", "HINT"]),
    ('train = "d.h5:x,nope"', ["datasets.train", "no dataset 'nope'", "its datasets: x, y"]),
    ('train = { path = "d.h5", remainder = "pad" }', ["datasets.train", "remainder",
                                                      '"drop" or "uneven"']),
    ('train = { path = "d.h5", shufle = true }', ["datasets.train", "shufle", "unknown option"]),
    ('train = 3', ["datasets.train", "expected \"file.h5:dataset1,dataset2\""]),
])
def test_bad_datasets_in_a_job_file_are_refused(tmp_path, capsys, entry, expected):
    data_workloads.make_file(str(tmp_path / "d.h5"), 10, 2)
    (tmp_path / "t.py").write_text("def train(config):\n    pass\n")
    job = tmp_path / "job.toml"
    job.write_text(f'[job]\nentrypoint = "t.py:train"\n[run]\nstorage_path = "runs"\n'
                   f'[datasets]\n{entry}\n')
    if "missing" in entry:  # as a user runs it
        p = subprocess.run([sys.executable, "-m", "hpctrain", "run", str(job)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, p.stderr
        assert str(job) in p.stderr and all(e in p.stderr for e in expected), p.stderr
    code, err = _cli_main(capsys, "validate", str(job))
    assert code == 2 and str(job) in err and all(e in err for e in expected), err
    assert not (tmp_path / "runs").exists()               # nothing was written


def _cli_main(capsys, *args):
    from hpctrain.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(list(args))
    return e.value.code, capsys.readouterr().err


def test_datasets_round_trip_through_the_job_spec(tmp_path):
    from hpctrain.spec import load_job_spec

    data_workloads.make_file(str(tmp_path / "d.h5"), 10, 2)
    (tmp_path / "t.py").write_text("def train(config):\n    pass\n")
    job = tmp_path / "job.toml"
    job.write_text('[job]\nentrypoint = "t.py:train"\n[datasets]\ntrain = "d.h5:x,y"\n'
                   'val = { path = "d.h5", keys = ["x"], shuffle = false }\n')
    spec = load_job_spec(str(job))
    assert spec.datasets["train"] == HDF5Dataset(str(tmp_path / "d.h5"), ["x", "y"])
    assert spec.datasets["val"].shuffle is False and spec.datasets["val"].remainder is None
    again = tmp_path / "again.toml"
    again.write_text(spec.to_toml())
    assert load_job_spec(str(again)).datasets == spec.datasets


def test_torchmetrics_example_aggregates_the_whole_validation_set(tmp_path):
    torch = pytest.importorskip("torch", reason="hpctrain[torch] is not installed")
    pytest.importorskip("torchmetrics", reason="torchmetrics is not installed")
    example = os.path.join(ROOT, "examples",
                           "torchmetrics_eval.py")
    storage = str(tmp_path / "runs")
    p = subprocess.run([sys.executable, example, "--storage-path", storage, "--epochs", "1"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    run = os.path.join(storage, "torchmetrics_eval")
    (row,) = [json.loads(line) for line in open(os.path.join(run, "result.json"))]
    assert row["val_rows_rank0"] == 501                   # 1001 rows: 501 + 500, none twice
    # the reported accuracy is the model's accuracy on all 1001 rows, not on rank 0's part
    spec = importlib.util.spec_from_file_location("torchmetrics_eval", example)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.make_model()
    model.load_state_dict(torch.load(os.path.join(run, "checkpoints", "checkpoint_000000",
                                                  "model.pt")))
    with h5py.File(os.path.join(storage, "torchmetrics_data", "val.h5")) as f:
        x, y = torch.from_numpy(f["x"][:]), torch.from_numpy(f["y"][:])
    with torch.no_grad():
        correct = (model(x).argmax(1) == y).float()
    assert row["val_accuracy"] == pytest.approx(correct.mean().item(), abs=1e-6)
    assert row["val_accuracy"] != pytest.approx(correct[:501].mean().item(), abs=1e-6)
    assert f"validation accuracy over all 2 workers: {row['val_accuracy']:.4f}" in p.stdout
