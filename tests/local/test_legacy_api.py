"""The seed-era (Ray Train 1.x) API: ``Trainer(backend="torch", num_workers=2)``,
``start/run/shutdown``, ``train.report/save_checkpoint/load_checkpoint``, callbacks,
``CheckpointStrategy`` and ``run_iterator``, on real 2-rank Gloo runs."""
import json
import os
import subprocess
import sys
import time

import cloudpickle
import pytest

import hpctrain
from hpctrain import train
from hpctrain.train import CheckpointStrategy, JsonLoggerCallback, Trainer, TrainingCallback
from helpers import ROOT

# The workers cannot import this module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Recorder(TrainingCallback):
    def __init__(self):
        self.results, self.started, self.finished = [], None, None

    def handle_result(self, results, **info):
        self.results.append(results)
        ack = os.path.join(self.started["logdir"], f"ack-{len(self.results)}")
        open(ack, "w").close()

    def start_training(self, logdir, config, **info):
        self.started = {"logdir": logdir, "config": config}

    def finish_training(self, error=False, **info):
        self.finished = {"error": error}


@pytest.fixture
def trainer(tmp_path):
    t = Trainer(backend="torch", num_workers=2, logdir=str(tmp_path / "logs"), max_retries=0)
    t.start()
    yield t
    t.shutdown()


# -- training functions (run in the workers) ----------------------------------------------
def report_three(config):
    rank = train.world_rank()
    print(f"hello from rank {rank}")
    for i in range(config["iterations"]):
        train.report(loss=rank * 10 + i, rank=rank)
        if i == 0 and rank == 0:
            # the driver hands iteration 1 to the callbacks while we still train
            ack = os.path.join(hpctrain.get_context().get_run_dir(), "ack-1")
            deadline = time.monotonic() + 30
            while not os.path.exists(ack):
                if time.monotonic() > deadline:
                    raise RuntimeError("the driver did not handle iteration 1 during training")
                time.sleep(0.05)
    return [train.world_rank(), train.local_rank(), train.world_size()]


def epochs_with_checkpoints(config):
    ckpt = train.load_checkpoint()
    start = ckpt["epoch"] + 1 if ckpt else 0
    for epoch in range(start, config["epochs"]):
        train.save_checkpoint(epoch=epoch, rank=train.world_rank())
        train.report(epoch=epoch)
    return {"start": start, "own_save": train.load_checkpoint()}


def scored_checkpoints(config):
    for loss in config["losses"]:
        train.save_checkpoint(loss=loss)
        train.report(loss=loss)


def crash_once_at_epoch_2(config):
    import time

    from hpctrain.rundir.layout import RunDir

    ckpt = train.load_checkpoint()
    start = ckpt["epoch"] + 1 if ckpt else 0
    for epoch in range(start, 4):
        if epoch == 2 and train.world_rank() == 1 and hpctrain.get_context().get_attempt() == 1:
            # crash once the checkpoint of epoch 1 is committed (rank 1 passes the
            # agreement before rank 0 has published it, and a crash in between would
            # rightly lose that not-yet-committed checkpoint) and rank 0 has written its
            # result line of epoch 1's report (under load it was seen still on its way
            # when rank 1 crashed: the report after the last checkpoint, never trained
            # again, then has no line of rank 0 and is not an event)
            run = RunDir(hpctrain.get_context().get_run_dir())
            rank0 = os.path.join(run.internal_dir, "worker-results", "rank-0.jsonl")

            def epoch_1_reported():
                try:
                    with open(rank0) as f:
                        return any('"epoch": 1' in line and '"checkpoint": true' not in line
                                   for line in f)
                except OSError:
                    return False

            for _ in range(400):
                if len(run.list_checkpoints()) >= 2 and epoch_1_reported():
                    break
                time.sleep(0.05)
            raise RuntimeError("lost a node")
        train.save_checkpoint(epoch=epoch)
        # slower than report()'s agreement budget, so that every report agrees and the
        # checkpoint of epoch 1 is published before rank 1 crashes (fast reports agree
        # only every few reports: the checkpoint would wait, rightly lost in the crash)
        time.sleep(0.02)
        train.report(epoch=epoch)
    return start


def fail_on_rank_1():
    train.report(step=0)
    if train.world_rank() == 1:
        raise ValueError("boom on purpose")
    train.report(step=1)


# -- runs ---------------------------------------------------------------------------------
def test_run_returns_every_workers_value_and_callbacks_get_every_rank(trainer, capsys):
    rec, json_logger = Recorder(), JsonLoggerCallback()
    values = trainer.run(report_three, config={"iterations": 3},
                         callbacks=[rec, json_logger])

    assert values == [[0, 0, 2], [1, 1, 2]]
    run_dir = trainer.logdir / "run_001"
    assert trainer.latest_run_dir == run_dir
    assert rec.started == {"logdir": str(run_dir), "config": {"iterations": 3}}
    assert rec.finished == {"error": False}
    assert [[r["loss"] for r in it] for it in rec.results] == [[0, 10], [1, 11], [2, 12]]
    assert [[r["rank"] for r in it] for it in rec.results] == [[0, 1]] * 3
    iterations = [[r["_training_iteration"] for r in it] for it in rec.results]
    assert iterations == [[1, 1], [2, 2], [3, 3]]
    assert all("_timestamp" in r and r["_time_this_iter_s"] >= 0 for it in rec.results for r in it)
    # JsonLoggerCallback: results.json in the run dir, worker 0 by default
    with open(run_dir / "results.json") as f:
        logged = json.load(f)
    assert [[r["loss"] for r in it] for it in logged] == [[0], [1], [2]]
    out = capsys.readouterr().out
    assert "(rank 0) hello from rank 0" in out and "(rank 1) hello from rank 1" in out


def test_save_and_load_checkpoint_across_runs(trainer):
    first = trainer.run(epochs_with_checkpoints, config={"epochs": 2})
    assert [v["start"] for v in first] == [0, 0]
    # load_checkpoint() after a save: what this worker saved
    assert [v["own_save"] for v in first] == [{"epoch": 1, "rank": 0}, {"epoch": 1, "rank": 1}]
    ckpt_dir = trainer.logdir / "run_001" / "checkpoints"
    assert trainer.latest_checkpoint_dir == ckpt_dir
    assert sorted(p for p in os.listdir(ckpt_dir) if not p.startswith(".")) == [
        "checkpoint_000001", "checkpoint_000002"]
    latest = trainer.latest_checkpoint
    assert latest["epoch"] == 1 and latest["rank"] == 0 and "_timestamp" in latest  # rank 0 wins
    assert Trainer.load_checkpoint(ckpt_dir / "checkpoint_000001")["epoch"] == 0
    assert trainer.best_checkpoint_path == ckpt_dir / "checkpoint_000002"  # default: most recent

    rec = Recorder()
    second = trainer.run(epochs_with_checkpoints, config={"epochs": 4}, callbacks=[rec],
                         checkpoint=trainer.latest_checkpoint)
    assert trainer.latest_run_dir == trainer.logdir / "run_002"
    assert [v["start"] for v in second] == [2, 2]
    assert [[r["epoch"] for r in it] for it in rec.results] == [[2, 2], [3, 3]]
    assert trainer.latest_checkpoint["epoch"] == 3
    assert trainer.latest_checkpoint_dir == trainer.logdir / "run_002" / "checkpoints"


def test_checkpoint_strategy_keeps_the_best_and_the_latest(trainer):
    strategy = CheckpointStrategy(num_to_keep=1, checkpoint_score_attribute="loss",
                                  checkpoint_score_order="min")
    trainer.run(scored_checkpoints, config={"losses": [3.0, 1.0, 2.0, 4.0]},
                checkpoint_strategy=strategy)

    ckpt_dir = trainer.latest_checkpoint_dir
    kept = sorted(p for p in os.listdir(ckpt_dir) if not p.startswith("."))
    assert kept == ["checkpoint_000002", "checkpoint_000004"]  # best (loss 1) + latest
    assert trainer.best_checkpoint_path == ckpt_dir / "checkpoint_000002"
    assert trainer.best_checkpoint["loss"] == 1.0
    assert trainer.latest_checkpoint["loss"] == 4.0


def test_run_iterator_yields_every_iteration(trainer):
    iterator = trainer.run_iterator(report_three, config={"iterations": 4})
    seen = []
    for results in iterator:
        seen.append([r["loss"] for r in results])
        if len(seen) == 1:  # report_three waits for this acknowledgement
            open(trainer.latest_run_dir / "ack-1", "w").close()
    assert seen == [[0, 10], [1, 11], [2, 12], [3, 13]]
    assert iterator.is_finished()
    assert iterator.get_final_results() == [[0, 0, 2], [1, 1, 2]]


def test_a_worker_exception_fails_the_run_naming_its_rank(trainer):
    rec = Recorder()
    with pytest.raises(hpctrain.TrainingFailedError) as info:
        trainer.run(fail_on_rank_1, callbacks=[rec])
    err = info.value
    assert err.rank == 1
    assert "rank 1" in str(err)
    assert "ValueError: boom on purpose" in str(err)
    # the worker's own exception, as for fit(): `except ValueError` catches it too
    assert isinstance(err, ValueError) and type(err.__cause__) is ValueError
    assert str(err.__cause__) == "boom on purpose"
    assert rec.finished == {"error": True}
    assert [[r["step"] for r in it] for it in rec.results] == [[0, 0]]


def test_max_retries_restarts_from_the_latest_checkpoint(tmp_path):
    t = Trainer("torch", num_workers=2, logdir=str(tmp_path), max_retries=1)
    t.start()
    rec = Recorder()
    assert t.run(crash_once_at_epoch_2, callbacks=[rec]) == [2, 2]  # the second attempt's
    assert [[r["epoch"] for r in it] for it in rec.results] == [[0, 0], [1, 1], [2, 2], [3, 3]]
    assert [it[0]["_training_iteration"] for it in rec.results] == [1, 2, 3, 4]
    assert t.latest_checkpoint["epoch"] == 3
    t.shutdown()


def test_the_seed_era_example_runs(tmp_path):
    example = os.path.join(ROOT, "examples", "legacy_api.py")
    out = subprocess.run([sys.executable, example, "--epochs", "2", "--logdir", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # the callback prints every epoch; the second run resumes after the first one's last
    for line in ("epoch 0 (1) | worker 0:", "epoch 1 (2) | worker 0:", "epoch 2 (1) | worker 0:",
                 "epoch 3 (2) | worker 0:", "(rank 0) fitted y ="):
        assert line in out.stdout
    assert sorted(os.listdir(tmp_path)) == ["run_001", "run_002"]
    assert len(json.load(open(tmp_path / "run_001" / "results.json"))) == 2


# -- the trainer's own checks (no workers) -----------------------------------------------
def test_run_needs_a_started_trainer(tmp_path):
    t = Trainer("torch", num_workers=2, logdir=str(tmp_path))
    with pytest.raises(RuntimeError, match="not active"):
        t.run(report_three)
    t.start()
    t.shutdown()
    with pytest.raises(RuntimeError, match="not active"):
        t.run(report_three)
    assert t.latest_run_dir is None and t.latest_checkpoint is None


def test_backends_and_arguments_are_checked(tmp_path):
    from hpctrain.torch import TorchConfig

    t = Trainer(TorchConfig(backend="gloo"), num_workers=1, logdir=str(tmp_path))
    assert t.logdir == tmp_path
    with pytest.raises(ValueError, match="Invalid backend: 'jax'"):
        Trainer("jax", num_workers=2, logdir=str(tmp_path))
    with pytest.raises(TypeError, match="Invalid type for backend"):
        Trainer(42, num_workers=2, logdir=str(tmp_path))
    with pytest.raises(ValueError, match="num_workers"):
        Trainer("torch", num_workers=0, logdir=str(tmp_path))
    with pytest.raises(ValueError, match="checkpoint_score_order"):
        CheckpointStrategy(checkpoint_score_order="best")
    t = Trainer("torch", num_workers=2, logdir=str(tmp_path))
    t.start()
    with pytest.raises(ValueError, match="0 or 1 arguments"):
        t.run(lambda a, b: None)
    with pytest.raises(ValueError, match="does not exist"):
        t.run(report_three, checkpoint=str(tmp_path / "missing"))


def test_worker_functions_outside_a_run():
    assert (train.world_rank(), train.local_rank(), train.world_size()) == (0, 0, 1)
    with pytest.warns(UserWarning, match="only be called inside"):
        assert train.load_checkpoint() is None
    with pytest.warns(UserWarning, match="only be called inside"):
        train.report(loss=1.0)
