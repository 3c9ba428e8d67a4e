"""The training loop of bench_async_checkpoint.py (imported by the workers).

Rank 0 writes ``files`` × ``file_mib`` MiB into one directory it reuses (the user's save,
not timed) and reports it as a checkpoint; the other ranks report no files. Between
checkpoints: ``between`` chunks of fixed CPU work, each followed by a metrics-only
report. The checkpoint report (the time the checkpoint blocks the training, including
any wait for the previous commit; with ``settle``, the previous commit is waited for
first, untimed) and the metrics-only reports are timed.
"""
import json
import os
import time

import hpctrain
from hpctrain import Checkpoint


def _work(n):
    """A fixed amount of CPU work (its time shows contention with the background)."""
    import torch

    a = torch.ones(192, 192)
    t = time.perf_counter()
    for _ in range(n):
        a = (a @ a) * (1.0 / 192)
    return time.perf_counter() - t


def loop(config):
    from hpctrain.worker.session import get_session

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    src = os.path.join(config["src"], f"src-{config['mode']}-rank-{rank}")
    os.makedirs(src, exist_ok=True)
    block = os.urandom(1 << 20) * config["file_mib"]
    records = []
    for i in range(config["warmup"] + config["checkpoints"]):
        ckpt = None
        if rank == 0:
            for f in range(config["files"]):
                with open(os.path.join(src, f"part-{f}.bin"), "wb") as fh:
                    fh.write(block)
            ckpt = Checkpoint.from_directory(src)
        if config.get("settle"):  # (bench_local_tier.py) the previous drain ended
            get_session().wait_for_commit()
        # a report without a checkpoint first: its agreement lines the ranks up, so that
        # the timed report below measures the checkpoint, not rank 1 waiting for rank 0's
        # save or rank 0 for rank 1's share of the CPU
        hpctrain.report({"i": i, "lined_up": True})
        t = time.perf_counter()
        hpctrain.report({"i": i}, checkpoint=ckpt, checkpoint_upload_mode=config["mode"])
        ckpt_s = time.perf_counter() - t
        commit = get_session().commits.inflight
        other_s, work_s = 0.0, 0.0
        for _ in range(config["between"]):
            work_s += _work(config["work"])
            t = time.perf_counter()
            hpctrain.report({"i": i})
            other_s += time.perf_counter() - t
        records.append({"ckpt_report_s": ckpt_s, "other_reports_s": other_s,
                        "work_s": work_s, "commit": commit,
                        "commit_done_before_next": commit is not None and commit.done(),
                        "warmup": i < config["warmup"]})
    t = time.perf_counter()
    get_session().wait_for_commit()  # the end of training waits for the last one
    end_wait_s = time.perf_counter() - t
    for r in records:
        commit = r.pop("commit")
        r["background_s"] = None if commit is None else commit.finished - commit.started
    if rank == 0:
        with open(config["out"], "w") as f:
            json.dump({"records": records, "end_wait_s": end_wait_s}, f)
