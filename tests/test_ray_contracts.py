"""Ray Train's contracts where a ported script relies on them: the data order after a
resume, the worker's exception around ``fit()``, the ranks' environment, ``restore`` and
``Result.from_path`` on a bad directory, and storage paths that are URIs. Real worker
processes, real files."""
import json
import os

import pytest

import workloads
from helpers import fit, out


# -- the data order after a resume ---------------------------------------------------------

def _orders(result):
    """{(rank, epoch): indices} as the run's last attempt to read each epoch saw them,
    and the attempts that read each epoch."""
    orders, attempts = {}, {}
    for rank in (0, 1):
        with open(out(result, f"order-rank-{rank}.jsonl")) as f:
            for line in f:
                row = json.loads(line)
                orders[rank, row["epoch"]] = row["indices"]
                attempts.setdefault(row["epoch"], set()).add(row["attempt"])
    return orders, attempts


def _sampler_order(n, rank, epoch):
    """What torch's DistributedSampler (seed 0, shuffled, two ranks) gives in ``epoch``."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(n), num_replicas=2, rank=rank, shuffle=True)
    sampler.set_epoch(epoch)
    return list(sampler)


@pytest.mark.parametrize("set_epoch", ["none", "sampler", "loader"])
def test_a_resumed_run_reads_every_later_epoch_in_the_uninterrupted_order(storage, set_epoch):
    """A prepared DataLoader, the loop calling ``train_loader.sampler.set_epoch(epoch)``
    (Ray's pattern), ``loader.set_epoch(epoch)``, or neither: rank 1 crashes after epoch
    2's pass, the restart resumes from epoch 1's checkpoint, and epochs 2, 3, 4 see
    exactly the indices of an uninterrupted run (DistributedSampler with that epoch)."""
    config = {"n": 20, "epochs": 5, "set_epoch": set_epoch}
    straight, _ = _orders(fit(workloads.epoch_order, storage, config=config,
                              name=f"straight-{set_epoch}"))
    crashed_result = fit(workloads.epoch_order, storage, max_failures=1,
                         config=dict(config, crash_at=2), name=f"crashed-{set_epoch}")
    crashed, attempts = _orders(crashed_result)
    assert attempts == {0: {1}, 1: {1}, 2: {1, 2}, 3: {2}, 4: {2}}  # resumed at epoch 2
    for rank in (0, 1):
        for epoch in range(5):
            assert crashed[rank, epoch] == straight[rank, epoch] == \
                _sampler_order(20, rank, epoch), (rank, epoch)
    assert straight[0, 0] != straight[0, 1]  # a new order each epoch


def test_a_resumed_dataset_shard_reads_every_later_epoch_in_the_uninterrupted_order(storage):
    """``get_dataset_shard`` over a shuffled dataset, the loop never setting the epoch:
    after the crash and restart, epochs 2, 3, 4 are the shard's plan for those epochs."""
    from hpctrain.data import SequenceDataset

    data = SequenceDataset(list(range(20)), shuffle=True)
    result = fit(workloads.epoch_order, storage, max_failures=1, name="shard-resume",
                 config={"source": "shard", "epochs": 5, "crash_at": 2},
                 datasets={"train": data})
    orders, attempts = _orders(result)
    assert attempts == {0: {1}, 1: {1}, 2: {1, 2}, 3: {2}, 4: {2}}
    for rank in (0, 1):
        shard = data.shard(rank, 2, run_name="shard-resume")
        for epoch in range(5):
            assert orders[rank, epoch] == shard.indices(epoch).tolist(), (rank, epoch)
    assert orders[0, 2] != orders[0, 0]
