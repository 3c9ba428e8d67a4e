"""Retention and ``Result.best_checkpoints`` against Ray Train's checkpoint-manager tests
(python/ray/train/tests/test_checkpoint_manager.py), ported: each checkpoint is committed
by hpctrain's own commit path, and what is left on disk is what is asserted. Where the
contracts differ on purpose (the latest checkpoint is always kept; a record without the
score attribute ranks last), docs/porting.md says so."""
import math
import os
import random

import pytest

import workloads
from helpers import fit

from hpctrain import Checkpoint, CheckpointConfig, Result
from hpctrain.rundir.commit import publish, stage_shard
from hpctrain.rundir.layout import RunDir, best_checkpoints


class Manager:
    """Ray's ``_CheckpointManager`` surface over a real run directory: ``register``
    commits a checkpoint (retention runs as in a training run), ``best_checkpoints``
    is what ``Result.best_checkpoints`` lists."""

    def __init__(self, tmp_path, config):
        self.tmp, self.config, self.n = tmp_path, config, 0
        self.run = RunDir(tmp_path / "run")
        self.run.create()

    def register(self, metrics):
        src = self.tmp / f"src{self.n}"
        src.mkdir()
        (src / "dummy.txt").write_text(str(self.n))
        stage_shard(self.run, self.n, 0, Checkpoint(str(src)), sync=False)
        publish(self.run, self.n, self.n, metrics=metrics, world_size=1, config=self.config,
                started=0)
        self.n += 1

    def on_disk(self):
        """The indices of the checkpoints left in the run directory."""
        return [r.index for r in self.run.list_checkpoints()]

    def best_checkpoints(self):
        c = self.config
        return [r.metrics for r in best_checkpoints(
            self.run.list_checkpoints(), c.num_to_keep, c.checkpoint_score_attribute,
            c.checkpoint_score_order)]


def test_unlimited_checkpoints(tmp_path):
    m = Manager(tmp_path, CheckpointConfig(num_to_keep=None))
    for i in range(10):
        m.register({"iter": i})
    assert len(m.best_checkpoints()) == 10 and m.on_disk() == list(range(10))


def test_limited_checkpoints(tmp_path):
    m = Manager(tmp_path, CheckpointConfig(num_to_keep=2))
    for i in range(10):
        m.register({"iter": i})
    # the latest ones when no metric is given, oldest first (worst to best)
    assert [b["iter"] for b in m.best_checkpoints()] == [8, 9]
    assert m.on_disk() == [8, 9]


@pytest.mark.parametrize("order", ["min", "max"])
def test_keep_checkpoints_by_score(tmp_path, order):
    m = Manager(tmp_path, CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="score",
                                           checkpoint_score_order=order))
    rng = random.Random(7)
    scores = [rng.random() for _ in range(10)]
    for i, score in enumerate(scores):
        m.register({"iter": i, "score": score})
    best = sorted(scores, reverse=order == "max")[:2]
    # worst to best, as Ray lists them
    assert [b["score"] for b in m.best_checkpoints()] == best[::-1]
    kept = {scores.index(s) for s in best} | {9}  # the top K, and the latest
    assert m.on_disk() == sorted(kept)


def test_keep_latest_checkpoint(tmp_path):
    m = Manager(tmp_path, CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="score",
                                           checkpoint_score_order="max"))
    for score in (3.0, 2.0, 1.0):
        m.register({"score": score})
    assert [b["score"] for b in m.best_checkpoints()] == [2.0, 3.0]
    assert m.on_disk() == [0, 1, 2]  # the latest, lowest score, is not deleted yet
    m.register({"score": 0.0})
    # a newer one came in: the previous latest is no longer kept; the new one is
    assert m.on_disk() == [0, 1, 3]
    assert [b["score"] for b in m.best_checkpoints()] == [2.0, 3.0]


@pytest.mark.parametrize("metrics", [
    {"nested": {"sub": {"attr": 5}}},
    {"nested": {"sub/attr": 5}},
    {"nested/sub": {"attr": 5}},
    {"nested/sub/attr": 5},
])
def test_nested_checkpoint_score(tmp_path, metrics):
    m = Manager(tmp_path, CheckpointConfig(num_to_keep=1, checkpoint_score_attribute="nested/sub/attr",
                                           checkpoint_score_order="max"))
    m.register(metrics)
    m.register({"nested": {"sub": {"attr": 1}}})
    m.register({"other": 9})
    # 5 beats 1; the record without the attribute is kept only as the latest
    assert m.on_disk() == [0, 2]
    assert m.best_checkpoints() == [metrics]


@pytest.mark.parametrize("order", ["min", "max"])
def test_nan_ranks_below_every_number_and_is_deleted_first(tmp_path, order):
    # Ray: nan < -inf < valid, whatever the order
    worst = -math.inf if order == "max" else math.inf
    m = Manager(tmp_path, CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="score",
                                           checkpoint_score_order=order))
    for score in (1.0, math.nan, worst, 2.0):
        m.register({"score": score})
    assert m.on_disk() == [0, 3]  # the NaN went as soon as two numbers were better
    m.register({"score": math.nan})
    assert m.on_disk() == [0, 3, 4]  # the latest is kept though NaN
    m.register({"score": 0.5 if order == "max" else 2.5})
    assert m.on_disk() == [0, 3, 5]
    assert [b["score"] for b in m.best_checkpoints()][-1] == (2.0 if order == "max" else 1.0)


def test_ties_keep_the_newer(tmp_path):
    m = Manager(tmp_path, CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="score",
                                           checkpoint_score_order="min"))
    for i in range(5):
        m.register({"score": 1.0, "iter": i})
    assert m.on_disk() == [3, 4]
    assert [b["iter"] for b in m.best_checkpoints()] == [3, 4]


# -- the same through a training run and Result.from_path -------------------------------

@pytest.fixture(scope="module")
def scored_run(tmp_path_factory):
    storage = str(tmp_path_factory.mktemp("runs"))
    return fit(workloads.scored, storage, config={"scores": [1.0, math.nan, 3.0, 2.0, 0.5]},
               ckpt=CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="score",
                                     checkpoint_score_order="max"))


def test_a_run_keeps_the_best_and_the_latest_and_lists_the_best_worst_first(scored_run):
    names = sorted(os.listdir(os.path.join(scored_run.path, "checkpoints")))
    # 3.0 and 2.0 are the best; 0.5 is kept as the latest (a restart resumes from it);
    # the NaN went first
    assert names == ["checkpoint_000002", "checkpoint_000003", "checkpoint_000004"]
    assert [m["score"] for _, m in scored_run.best_checkpoints] == [2.0, 3.0]
    assert os.path.basename(scored_run.checkpoint.path) == "checkpoint_000004"
    again = Result.from_path(scored_run.path)
    assert [m["i"] for _, m in again.best_checkpoints] == [3, 2]


def test_from_path_without_result_json_restores_the_checkpoints(scored_run, tmp_path):
    import shutil

    copy = str(tmp_path / "killed")
    shutil.copytree(scored_run.path, copy, symlinks=True)
    for name in ("result.json", "progress.csv"):
        os.remove(os.path.join(copy, name))
    result = Result.from_path(copy)
    assert [m["score"] for _, m in result.best_checkpoints] == [2.0, 3.0]
    assert result.checkpoint.path == os.path.join(copy, "checkpoints", "checkpoint_000004")
    assert result.metrics["score"] == 0.5 and result.metrics["i"] == 4
