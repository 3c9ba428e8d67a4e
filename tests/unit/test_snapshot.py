"""The async commit's snapshot of a committed checkpoint handed back in
(``report(checkpoint=get_checkpoint())``): it takes the user's files only. A committed
checkpoint's own records (commit record, digests) stay behind — the other ranks may
still be writing a digest there, a ``….tmp-PID-TID`` renamed away while it is listed."""
import os

from hpctrain.checkpoint import Checkpoint
from hpctrain.rundir.async_commit import snapshot
from hpctrain.rundir.layout import RunDir


def test_a_committed_checkpoint_is_copied_without_hpctrain_s_own_records(tmp_path):
    run = RunDir(tmp_path / "run")
    run.create()
    committed = os.path.join(run.checkpoints_dir, "checkpoint_000000")
    os.makedirs(os.path.join(committed, "sub"))
    for rel, data in {"model.pt": b"m", "sub/opt.pt": b"o", ".metadata.json": b"{}",
                      ".hpctrain_checkpoint.json": b"{}",
                      ".hpctrain_digest.rank-0.json": b"{}",
                      ".hpctrain_digest.rank-1.json.tmp-123-456": b"{"}.items():
        with open(os.path.join(committed, rel), "wb") as f:
            f.write(data)
    snap = snapshot(run, 0, 3, Checkpoint(committed))
    found = sorted(os.path.relpath(os.path.join(d, n), snap)
                   for d, _, names in os.walk(snap) for n in names)
    assert found == [".metadata.json", "model.pt", "sub/opt.pt"]
    assert open(os.path.join(snap, "sub/opt.pt"), "rb").read() == b"o"
    # the committed checkpoint itself is untouched (a copy, never taken apart)
    assert sorted(os.listdir(committed)) == [
        ".hpctrain_checkpoint.json", ".hpctrain_digest.rank-0.json",
        ".hpctrain_digest.rank-1.json.tmp-123-456", ".metadata.json", "model.pt", "sub"]
