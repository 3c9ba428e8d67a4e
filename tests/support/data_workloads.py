"""Training functions of the data and tracking tests (imported by the workers too)."""
import json
import os

import numpy as np

import hpctrain


def _rchar() -> int:
    """Bytes this process asked the kernel to read (read/pread calls, page cache or not)."""
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def read_shards(config):
    """Two epochs of "train" (iter_batches, then the torch DataLoader adapter), one of
    "val", and the file list; records rows, bytes read and plans in test-out/."""
    import h5py  # noqa: F401 - imported before any measurement
    from hpctrain import train as legacy
    from hpctrain.data import plan

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    train = hpctrain.get_dataset_shard("train")
    assert legacy.get_dataset_shard("train") is train  # the seed-era name, same shard
    out = {"rank": rank, "len": len(train), "epochs": [], "bytes": [], "plans": []}
    for epoch in range(2):
        # the plan of every rank, as this rank computes it (nothing is read)
        out["plans"].append([
            plan.shard_indices(
                train.num_rows, r, train.world_size, epoch=epoch, seed=train.seed,
                shuffle=train.shuffle, remainder=train.remainder,
                block_rows=train.block_rows, window_blocks=train.window_blocks).tolist()
            for r in range(train.world_size)])
        before = _rchar()
        if epoch == 0:
            batches = list(train.iter_batches(config["batch_size"]))
            rows = [int(i) for b in batches for i in b["y"]]
            # columns stay aligned through the shuffle: x[i] starts with i * 100
            out["train_x_matches"] = all(bool((b["x"][:, 0] == b["y"] * 100).all())
                                         for b in batches)
        else:
            loader = train.to_torch_dataloader(config["batch_size"])
            rows = [int(i) for b in loader for i in b["y"]]
        out["bytes"].append(_rchar() - before)
        out["epochs"].append(rows)
        hpctrain.report({"epoch": epoch, "rows": len(rows)})
    val = hpctrain.get_dataset_shard("val")
    out["val"] = [int(i) for b in val.iter_batches(100) for i in b["y"]]
    x_ok = all(bool((b["x"][:, 0] == b["y"] * 100).all()) for b in val.iter_batches(100))
    out["val_x_matches"] = x_ok
    out["files"] = list(hpctrain.get_dataset_shard("files").iter_rows())
    d = os.path.join(ctx.get_run_dir(), "test-out")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"rank-{rank}.json"), "w") as f:
        json.dump(out, f)


def make_file(path, rows, cols=100, chunk_rows=64, compression=None):
    """x[i] = i * 100 + column, y[i] = i; chunked by ``chunk_rows`` rows."""
    import h5py

    chunk_rows = min(chunk_rows, rows)
    with h5py.File(path, "w") as f:
        x = (np.arange(rows, dtype=np.float32)[:, None] * 100
             + np.arange(cols, dtype=np.float32)[None, :])
        f.create_dataset("x", data=x, chunks=(chunk_rows, cols), compression=compression)
        f.create_dataset("y", data=np.arange(rows, dtype=np.int64), chunks=(chunk_rows,),
                         compression=compression)
    return path


def x_matches(batch):
    """The columns of a batch (or a row) stayed aligned: x[i] = y[i] * 100 + column."""
    x, y = np.asarray(batch["x"]), np.asarray(batch["y"])
    return bool((x == y[..., None] * 100 + np.arange(x.shape[-1])).all())


def tracked(config):
    """Three reports of known metrics (a nested one too), a checkpoint at the second."""
    import tempfile

    for epoch in range(3):
        ckpt = None
        if epoch == 1 and hpctrain.get_context().get_world_rank() == 0:
            d = tempfile.mkdtemp()
            with open(os.path.join(d, "w.txt"), "w") as f:
                f.write("weights")
            ckpt = hpctrain.Checkpoint.from_directory(d)
        hpctrain.report({"loss": 1.0 / (epoch + 1), "acc": epoch / 10,
                         "nested": {"m": epoch * 2}, "note": "text"}, checkpoint=ckpt)


def read_split_and_whole(config):
    """One epoch of "train" and of "val" (row ids ``y``), into test-out/rank-R.json."""
    ctx = hpctrain.get_context()
    out = {name: [int(i) for b in hpctrain.get_dataset_shard(name).iter_batches(64)
                  for i in b["y"]] for name in ("train", "val")}
    d = os.path.join(ctx.get_run_dir(), "test-out")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"rank-{ctx.get_world_rank()}.json"), "w") as f:
        json.dump(out, f)


def make_parquet(directory, sizes, row_group_rows=64):
    """Parquet files ``part-000.parquet``… in ``directory`` with ``sizes`` rows each,
    numbered on across the files: x[i] = [i * 100, i * 100 + 1, i * 100 + 2] (a list
    column), y[i] = i, name[i] = "r<i>"; row groups of ``row_group_rows`` rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    start = 0
    for n, rows in enumerate(sizes):
        i = np.arange(start, start + rows, dtype=np.int64)
        x = (i[:, None] * 100 + np.arange(3)[None, :]).astype(np.float32)
        table = pa.table({
            "x": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 3),
            "y": pa.array(i), "name": pa.array([f"r{v}" for v in i])})
        pq.write_table(table, os.path.join(directory, f"part-{n:03d}.parquet"),
                       row_group_size=row_group_rows)
        start += rows
    return directory


def read_parquet_shards(config):
    """Two epochs of "train" (iter_batches, then a torch DataLoader with 2 loader
    processes): the rows each rank saw, and whether x stayed aligned with y."""
    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    train = hpctrain.get_dataset_shard("train")
    out = {"epochs": [], "aligned": True, "block_rows": train.block_rows}
    for epoch in range(2):
        if epoch == 0:
            batches = list(train.iter_batches(config["batch_size"]))
        else:
            batches = list(train.to_torch_dataloader(config["batch_size"], num_workers=2))
        rows = []
        for b in batches:
            y, x = np.asarray(b["y"]), np.asarray(b["x"])
            out["aligned"] &= bool((x[:, 0] == y * 100).all() and (x[:, 2] == y * 100 + 2).all())
            rows += [int(v) for v in y]
        out["epochs"].append(rows)
        hpctrain.report({"epoch": epoch, "rows": len(rows)})
    d = os.path.join(ctx.get_run_dir(), "test-out")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"rank-{rank}.json"), "w") as f:
        json.dump(out, f)


def ray_data_torch(config):
    """Ray Data's way: two epochs over the "train" Dataset's shard with
    iter_torch_batches, fitting y = 2x + 1; records the ids each rank saw per epoch and
    the loss of each epoch."""
    import torch

    ctx = hpctrain.get_context()
    train = hpctrain.get_dataset_shard("train")
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    out = {"ids": [], "losses": [], "columns": list(train.columns)}
    for epoch in range(config["epochs"]):
        ids, total, n = [], 0.0, 0
        for batch in train.iter_torch_batches(batch_size=8, dtypes=torch.float32):
            ids += [int(i) for i in batch["id"]]
            loss = torch.nn.functional.mse_loss(model(batch["x"][:, None]), batch["y"][:, None])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, n = total + float(loss) * len(batch["id"]), n + len(batch["id"])
        out["ids"].append(ids)
        out["losses"].append(total / n)
        hpctrain.report({"epoch": epoch, "loss": total / n})
    d = os.path.join(ctx.get_run_dir(), "test-out")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"rank-{ctx.get_world_rank()}.json"), "w") as f:
        json.dump(out, f)
