"""The training thread's per-step cost: what hpctrain adds to a step is counted, not
called. A prepared DataLoader's batches reach the hang watchdog through the batch count
torch's own iterator keeps (read by the heartbeat thread), with no hpctrain call per
batch; the count is exact during a pass, after it, and after a pass left early."""
import pytest

from hpctrain.common import progress


@pytest.fixture
def no_call_per_batch(monkeypatch):
    """progress.beat() (a call, the old per-batch sign of life) fails the test."""
    def beat():
        raise AssertionError("progress.beat() called for a batch")

    monkeypatch.setattr(progress, "beat", beat)


def _loader(n=10, batch_size=2):
    from torch.utils.data import DataLoader

    from hpctrain.torch import prepare_data_loader

    return prepare_data_loader(DataLoader(list(range(n)), batch_size=batch_size, shuffle=True))


def test_a_prepared_loaders_batches_are_progress_without_a_call_per_batch(no_call_per_batch):
    loader = _loader()  # 5 batches a pass
    start = progress.moves()
    seen = []
    for i, batch in enumerate(loader):
        seen.append(progress.moves() - start)
        if i == 2:
            break  # a pass left early keeps the batches it read
    assert seen == [1, 2, 3]
    assert progress.moves() - start == 3
    assert sum(len(b) for b in loader) == 10  # a whole pass
    assert progress.moves() - start == 8
    assert progress._reading == {}  # nothing held once the passes ended


def test_the_heartbeat_writes_the_batches_a_pass_read(tmp_path, no_call_per_batch):
    """The heartbeat thread (not the training thread) turns the count into the file the
    supervisor's watchdog reads."""
    import json
    import time

    from hpctrain.worker.heartbeat import Heartbeat

    loader = _loader(n=40)
    hb = Heartbeat(str(tmp_path), rank=0, interval=0.05).start()
    path = tmp_path / "heartbeat.rank-0.json"
    it = iter(loader)
    next(it), next(it), next(it)
    expected = progress.moves()
    deadline = time.time() + 10
    while time.time() < deadline:
        rec = json.loads(path.read_text())
        if rec["progress"] == expected:
            break
        time.sleep(0.05)
    assert rec["progress"] == expected and rec["phase"] == "train"
    it.close()


# -- a durable staged checkpoint: one fsync per file, batched; directories once ------------

@pytest.fixture
def disk_events(monkeypatch):
    """Every fsync (the path synced), rename and link, in order, from every thread."""
    import os
    import threading

    events, lock = [], threading.Lock()
    real_fsync, real_rename, real_replace, real_link = os.fsync, os.rename, os.replace, os.link

    def log(*e):
        with lock:
            events.append(e)

    def fsync(fd):
        real_fsync(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        log("fsync", path, "dir" if os.path.isdir(path) else "file")

    def rename(a, b, *args, **kw):
        real_rename(a, b, *args, **kw)
        log("rename", str(a), str(b))

    def replace(a, b, *args, **kw):
        real_replace(a, b, *args, **kw)
        log("rename", str(a), str(b))

    def link(a, b, *args, **kw):
        real_link(a, b, *args, **kw)
        log("link", str(a), str(b))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "link", link)
    return events


def _staged_commit(tmp_path, events, files=3):
    import os

    from hpctrain import Checkpoint, CheckpointConfig
    from hpctrain.rundir.commit import new_staging_dir, publish, stage_shard
    from hpctrain.rundir.layout import RunDir

    run = RunDir(tmp_path / "run")
    run.create()
    src = new_staging_dir(run, 0)
    for i in range(files):
        with open(os.path.join(src, f"shard-{i}.bin"), "wb") as f:
            f.write(os.urandom(4096))
    del events[:]
    stage_shard(run, 1, 0, Checkpoint(src), sync=True)
    name, _ = publish(run, 1, 0, metrics={"loss": 0.5}, world_size=1,
                      config=CheckpointConfig(sync_to_disk=True), started=0)
    return run, os.path.join(run.checkpoints_dir, name)


def test_a_durable_staged_checkpoint_syncs_each_file_once_and_its_directories_once(
        tmp_path, disk_events):
    """sync_to_disk=True, a checkpoint written into the staging directory: what a
    durable in-place save costs (each file fsynced, the directory, one rename, its
    parent) and no more; every file durable before the rename that publishes them."""
    import os

    run, final = _staged_commit(tmp_path, disk_events)
    tmp = run.staging_tmp(1)
    publish_at = next(i for i, e in enumerate(disk_events)
                      if e[0] == "rename" and e[1] == tmp and e[2] == final)
    synced = [e for e in disk_events if e[0] == "fsync"]
    dir_syncs = [e[1] for e in synced if e[2] == "dir"]
    assert sorted(dir_syncs) == sorted([tmp, run.checkpoints_dir]), dir_syncs
    file_syncs = [e[1] for e in synced if e[2] == "file"]
    assert len(file_syncs) == len(set(file_syncs))  # each file once
    # every file of the checkpoint (the shards, the manifest, the commit record) was
    # fsynced under its staging name before the rename...
    before = set()
    for e in disk_events[:publish_at]:
        if e[0] == "fsync":
            before.add(e[1])
        elif e[0] == "rename" and e[1] in before:  # written and synced aside, then renamed
            before.add(e[2])
    for rel in os.listdir(final):
        if not rel.startswith(".hpctrain_digest"):
            assert os.path.join(tmp, rel) in before, rel
    # ...and the staging directory after the last name was made in it
    last_entry = max(i for i, e in enumerate(disk_events[:publish_at])
                     if e[0] in ("link", "rename") and os.path.dirname(e[2]) == tmp)
    tmp_sync = disk_events.index(("fsync", tmp, "dir"))
    assert last_entry < tmp_sync < publish_at
    assert disk_events.index(("fsync", run.checkpoints_dir, "dir")) > publish_at


def test_a_prepared_loader_and_its_dataset_are_freed_when_the_loop_lets_go():
    """The sampler's epoch hook makes no reference cycle: once the loop drops a prepared
    loader, its DistributedSampler and its dataset go at once, as they do without hpctrain,
    not at the garbage collector's next full pass (the loader of a finished phase kept its
    dataset alive while the next phase built another: 50 MiB more peak memory a rank in
    bench/bench_core.py). The loop's own ``sampler.set_epoch`` still reaches the sampler."""
    import gc
    import weakref

    import torch
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from hpctrain.torch import prepare_data_loader

    dataset = TensorDataset(torch.arange(8))
    sampler = DistributedSampler(dataset, num_replicas=2, rank=0, shuffle=True)
    loader = prepare_data_loader(DataLoader(dataset, batch_size=2, sampler=sampler))
    loader.sampler.set_epoch(3)  # Ray's pattern: the loop sets the sampler's epoch
    assert [len(b[0]) for b in loader] == [2, 2] and sampler.epoch == 3
    gone = weakref.ref(dataset), weakref.ref(sampler)
    gc.disable()
    try:
        del dataset, sampler, loader
        assert [ref() for ref in gone] == [None, None]
    finally:
        gc.enable()
