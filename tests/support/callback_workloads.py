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


def _ckpt_dir(name):
    d = os.path.join(hpctrain.get_context().get_run_dir(), "test-out", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "w.txt"), "w") as f:
        f.write(name)
    return d


def delete_or_keep(config):
    """Three checkpoints, with Ray's delete_local_checkpoint_after_upload; what is left
    of each directory after its report goes to test-out/left.json; then
    checkpoint_upload_fn's error."""
    import json

    left = {}
    for name, mode, delete in (("sync-delete", "sync", True), ("async-keep", "async", False),
                               ("async-default", "async", None)):
        d = _ckpt_dir(name)
        hpctrain.report({"name": name}, checkpoint=hpctrain.Checkpoint.from_directory(d),
                        checkpoint_upload_mode=mode,
                        delete_local_checkpoint_after_upload=delete)
        left[name] = sorted(os.listdir(d)) if os.path.isdir(d) else None
    try:
        hpctrain.report({}, checkpoint=hpctrain.Checkpoint.from_directory(_ckpt_dir("fn")),
                        checkpoint_upload_fn=lambda ckpt, name: ckpt)
    except Exception as e:  # noqa: BLE001 - what the user sees
        left["upload_fn"] = f"{type(e).__name__}: {e}"
    with open(os.path.join(hpctrain.get_context().get_run_dir(), "test-out", "left.json"),
              "w") as f:
        json.dump(left, f)


def jit_checkpoint_on_preemption(config):
    """Ray v2's pattern: train until get_preemption_info() says the allocation goes, then
    report one more checkpoint. Rank 0 warns the supervisor (SIGUSR1, as the scheduler
    does) after step 2; each rank writes what it saw to test-out/preempt-rank-R.json."""
    import json
    import signal
    import time

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    seen = {"before": hpctrain.get_preemption_info()}
    for step in range(1000):
        info = hpctrain.get_preemption_info()
        if info is not None:
            seen.update(step=step, deadline_ms=info.deadline_ms, now_ms=time.time() * 1000,
                        nodes=info.preempted_node_to_ranks, ranks=info.preempted_ranks,
                        node_ids=info.preempted_node_ids)
            d = os.path.join(ctx.get_run_dir(), "test-out")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"preempt-rank-{rank}.json"), "w") as f:
                json.dump(seen, f)
            ckpt = os.path.join(d, f"jit-{rank}")
            os.makedirs(ckpt)
            with open(os.path.join(ckpt, f"rank-{rank}.txt"), "w") as f:
                f.write(str(step))
            hpctrain.report({"step": step}, checkpoint=hpctrain.Checkpoint.from_directory(ckpt))
            raise AssertionError("the report with the checkpoint did not stop the run")
        if step == 2 and rank == 0:
            os.kill(int(os.environ["HPCTRAIN_PARENT_PID"]), signal.SIGUSR1)
        hpctrain.report({"step": step})
        time.sleep(0.05)
