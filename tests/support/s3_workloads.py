"""Training functions of the object-storage tests (tests/local/test_object_storage.py)."""
import os
import tempfile

import hpctrain
from hpctrain import Checkpoint

KILL_AFTER_ENV = "HPCTRAIN_TEST_KILL_AFTER_OBJECTS"


def steps(config):
    """``config["steps"]`` reports, each with a checkpoint: a shard per rank
    (``rank<r>.bin``, ``config["size"]`` bytes) and rank 0's ``step.txt``. A resumed attempt
    starts after the step its checkpoint holds (read from the downloaded copy); rank 0 of
    the first attempt raises after reporting ``config["fail_after"]``."""
    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    start = hpctrain.get_checkpoint()
    first = 0
    if start is not None:
        os.environ.pop(KILL_AFTER_ENV, None)  # the test's crash happens once
        with start.as_directory() as d:
            first = int(open(os.path.join(d, "step.txt")).read()) + 1
    for i in range(first, config["steps"]):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, f"rank{rank}.bin"), "wb") as f:
                f.write(bytes([i % 256]) * config.get("size", 16))
            if rank == 0:
                with open(os.path.join(d, "step.txt"), "w") as f:
                    f.write(str(i))
            hpctrain.report({"i": i, "first": first}, checkpoint=Checkpoint.from_directory(d))
        if rank == 0 and start is None and config.get("fail_after") == i:
            raise RuntimeError(f"planned failure after step {i}")


def reports_a_stored_checkpoint(config):
    """Hands ``config["uri"]`` (a checkpoint already in S3) to report()."""
    hpctrain.report({"i": 0}, checkpoint=Checkpoint(config["uri"]))
