"""The training thread's per-step cost: what hpctrain adds to a step is counted, not
called. A prepared DataLoader's batches reach the hang watchdog through the batch count
torch's own iterator keeps (read by the heartbeat thread), with no hpctrain call per
batch; the count is exact during a pass, after it, and after a pass left early."""
import pytest

from hpctrain._internal.base import progress


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

    from hpctrain._internal.worker.heartbeat import Heartbeat

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
