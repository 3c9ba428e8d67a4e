"""Training functions of tests/local/test_user_callbacks.py (imported by the ranks)."""
import os
import tempfile

import hpctrain


def three_reports(config):
    """Three reports on every rank, each naming its rank; rank 0 hands in a checkpoint at
    the second."""
    rank = hpctrain.get_context().get_world_rank()
    for step in range(3):
        ckpt = None
        if step == 1 and rank == 0:
            d = tempfile.mkdtemp()
            with open(os.path.join(d, "w.txt"), "w") as f:
                f.write("weights")
            ckpt = hpctrain.Checkpoint.from_directory(d)
        hpctrain.report({"step": step, "rank": rank}, checkpoint=ckpt)


class RankError(Exception):
    pass


def every_rank_fails(config):
    """One report, then each rank raises its own error."""
    rank = hpctrain.get_context().get_world_rank()
    hpctrain.report({"step": 0})
    raise RankError(f"rank {rank} failed on attempt {hpctrain.get_context().get_attempt()}")
