"""A run directory written before the internals moved out of ``hpctrain/_internal/``
(issue 41) still restores: its pickled payload names ``hpctrain._internal.rundir.payload``,
and ``Trainer.restore`` continues the run from its last checkpoint to the end."""
import io
import os

import cloudpickle
import pytest

import workloads
from hpctrain import TrainingFailedError
from hpctrain.torch import TorchTrainer
from helpers import fit

pytestmark = pytest.mark.slow


def as_written_before_the_move(payload_file):
    """Rewrite ``payload.pkl`` (its header, then the payload) as the version before wrote
    it: the same objects, the payload's class under its old module name. Protocol 2 writes
    a class as the text ``c<module>\\n<name>\\n``, so the name can be put back."""
    with open(payload_file, "rb") as f:
        stream = io.BytesIO(f.read())
    header, payload = cloudpickle.load(stream), cloudpickle.load(stream)
    old = (cloudpickle.dumps(header, protocol=2) + cloudpickle.dumps(payload, protocol=2)
           ).replace(b"chpctrain.rundir.payload\n", b"chpctrain._internal.rundir.payload\n")
    assert b"hpctrain._internal.rundir.payload" in old
    with open(payload_file, "wb") as f:
        f.write(old)


def test_a_run_directory_of_the_version_before_the_move_restores_and_finishes(storage):
    config = {"epochs": 4, "crash_at": 2, "crash_rank": 1}
    with pytest.raises(TrainingFailedError):
        fit(workloads.deterministic, storage, name="old", config=config)
    run = os.path.join(storage, "old")
    as_written_before_the_move(os.path.join(run, ".hpctrain", "payload.pkl"))
    result = TorchTrainer.restore(run).fit()
    assert result.status == "FINISHED" and result.metrics["epoch"] == 3
    with open(os.path.join(run, "test-out", "resumed-attempt-2-rank-0")) as f:
        resumed_from, start, _ = f.read().split()
    assert (os.path.basename(resumed_from), int(start)) == ("checkpoint_000001", 2)
