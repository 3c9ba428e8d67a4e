"""Ray Train 2.x's names added since the seed documents: get_all_reported_checkpoints,
ray.train.collective, Result.return_value and get_best_checkpoint, TrainContext's module,
WorkerGroupError/ControllerError, and Ray's module paths. Real runs (two torch worker
processes, real files); outcomes, not existence."""
import json
import os
import pickle
import subprocess
import sys

import pytest

import hpctrain
import ray_v2_workloads as wl
from helpers import ROOT, fit, out
from hpctrain import Result
from hpctrain.errors import (ControllerError, TrainingFailedError, WorkerGroupError,
                             WorkerTraceback)


def _read(result, name):
    with open(out(result, name)) as f:
        return json.load(f)


# -- get_all_reported_checkpoints, Result.return_value, get_best_checkpoint -----------------
def test_reported_checkpoints_so_far_on_every_rank_and_the_result_after(storage):
    result = fit(wl.report_three_checkpoints, storage, name="reported")
    for rank in (0, 1):
        seen = _read(result, f"seen-rank-{rank}.json")
        # after report i, the i+1 checkpoints committed so far, oldest first, each with
        # the metrics reported with it and the files rank 0 handed in
        assert [[(c["dir"], c["epoch"], c["loss"], c["state"]["epoch"]) for c in s]
                for s in seen] == [
            [("checkpoint_000000", 0, 3.0, 0)],
            [("checkpoint_000000", 0, 3.0, 0), ("checkpoint_000001", 1, 1.0, 1)],
            [("checkpoint_000000", 0, 3.0, 0), ("checkpoint_000001", 1, 1.0, 1),
             ("checkpoint_000002", 2, 2.0, 2)]], rank
        assert {c["type"] for s in seen for c in s} == {"ReportedCheckpoint"}
    # rank 0's return value, through the Result of fit() and one rebuilt from the path
    assert result.return_value == {"rank": 0, "answer": 42}
    assert Result.from_path(result.path).return_value == {"rank": 0, "answer": 42}
    best = result.get_best_checkpoint("loss", "min")
    assert os.path.basename(best.path) == "checkpoint_000001"
    assert os.path.basename(result.get_best_checkpoint("loss", "max").path) == \
        "checkpoint_000000"
    with pytest.raises(ValueError, match=r'Unsupported mode: avg. Please choose from '
                                         r'\["min", "max"\]!'):
        result.get_best_checkpoint("loss", "avg")
    with pytest.raises(RuntimeError, match="Invalid metric name accuracy! You may choose "
                                           "from the following metrics: "):
        result.get_best_checkpoint("accuracy", "max")


def test_get_best_checkpoint_of_a_result_without_checkpoints():
    result = Result(metrics={"loss": 1.0}, checkpoint=None, error=None, path="/nowhere")
    with pytest.raises(RuntimeError, match="No checkpoint exists in the trial directory!"):
        result.get_best_checkpoint("loss", "min")
    assert result.return_value is None


def test_get_all_reported_checkpoints_outside_a_training_function():
    with pytest.raises(RuntimeError, match=r"hpctrain.get_all_reported_checkpoints\(\) must "
                                           "be called inside a training function"):
        hpctrain.train.get_all_reported_checkpoints()


# -- ray.train.collective, ray.train.context ----------------------------------------------
def test_barrier_waits_for_the_slow_rank_and_broadcast_gives_rank_zeros_dict(storage):
    result = fit(wl.collectives, storage, name="collectives", config={"sleep_s": 1.5})
    r0, r1 = (_read(result, f"collective-rank-{r}.json") for r in (0, 1))
    assert r0["is_train_context"] and r1["is_train_context"]
    assert r1["arrived"] - r0["arrived"] > 1.0          # rank 1 slept
    assert r0["passed"] >= r1["arrived"]                # so rank 0 waited for it
    assert r0["got"] == r1["got"] == {"seed": 1234, "from": 0}


def test_broadcast_of_more_than_rays_1000_bytes_still_arrives(storage):
    result = fit(wl.collectives, storage, name="big", config={"sleep_s": 0, "pad": 5000})
    assert [_read(result, f"collective-rank-{r}.json")["pad"] for r in (0, 1)] == [5000, 5000]


def test_collectives_outside_a_training_function():
    with pytest.raises(RuntimeError, match=r"hpctrain.train.collective.barrier\(\) must be "
                                           "called inside a training function"):
        hpctrain.train.collective.barrier()


# -- the error hierarchy ------------------------------------------------------------------
def test_failed_ranks_raise_a_worker_group_error_with_each_ranks_exception(storage):
    with pytest.raises(TrainingFailedError) as info:
        fit(wl.both_ranks_raise, storage, name="both-fail")
    err = info.value
    assert isinstance(err, WorkerGroupError)
    # still TrainingFailedError(<cause class>): the first failed rank's own exception
    first = err.worker_failures[err.rank]
    assert isinstance(err, type(first)) and err.__cause__ is first
    assert set(err.worker_failures) == {0, 1}
    assert type(err.worker_failures[0]) is ValueError
    assert str(err.worker_failures[0]) == "rank 0: bad value"
    assert type(err.worker_failures[1]) is KeyError
    assert err.worker_failures[1].args == ("rank 1: no such column",)
    # the Result carries the same error; it survives pickling with its failures
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, WorkerGroupError) and isinstance(again, type(first))
    assert {r: type(e) for r, e in again.worker_failures.items()} == \
        {0: ValueError, 1: KeyError}
    rebuilt = Result.from_path(err.result.path).error
    assert isinstance(rebuilt, WorkerGroupError) and set(rebuilt.worker_failures) == {0, 1}


def test_ray_v2_error_classes():
    assert issubclass(WorkerGroupError, TrainingFailedError)
    assert issubclass(ControllerError, TrainingFailedError)
    err = WorkerGroupError("2 ranks failed", {1: KeyError("x")})
    assert str(err) == "2 ranks failed" and isinstance(err.worker_failures[1], KeyError)
    ctl = ControllerError(RuntimeError("the batch job was cancelled"))
    assert str(ctl) == "the batch job was cancelled"
    assert isinstance(pickle.loads(pickle.dumps(ctl)).controller_failure, RuntimeError)
    assert hpctrain.train.WorkerGroupError is hpctrain.WorkerGroupError is WorkerGroupError
    assert isinstance(WorkerTraceback("tb"), Exception)


# -- Ray's module paths ---------------------------------------------------------------------
#: every public module path of Ray that hpctrain mirrors: (hpctrain module, a name in it)
MODULE_PATHS = [
    ("hpctrain.train", "get_all_reported_checkpoints"),
    ("hpctrain.train.context", "TrainContext"),
    ("hpctrain.train.collective", "broadcast_from_rank_zero"),
    ("hpctrain.train.torch", "TorchTrainer"),
    ("hpctrain.train.lightning", "RayLightningEnvironment"),
    ("hpctrain.train.huggingface.transformers", "RayTrainReportCallback"),
    ("hpctrain.train.tensorflow", "TensorflowTrainer"),
    ("hpctrain.train.tensorflow.keras", "ReportCheckpointCallback"),
    ("hpctrain.train.horovod", "HorovodTrainer"),
    ("hpctrain.train.xgboost", "XGBoostTrainer"),
    ("hpctrain.train.lightgbm", "LightGBMTrainer"),
    ("hpctrain.tune", "Tuner"),
    ("hpctrain.tune.tune_config", "TuneConfig"),
    ("hpctrain.tune.schedulers", "ASHAScheduler"),
]


def test_rays_module_paths_resolve_as_attributes_and_imports():
    """In a fresh interpreter: ``import hpctrain.train as train`` imports no framework,
    ``train.torch`` (an attribute, as ``ray.train.torch``) then is the module, and every
    mirrored path imports and holds its name."""
    code = f"""
import importlib, sys
import hpctrain.train as train
assert "torch" not in sys.modules, "import hpctrain.train imported torch"
assert train.torch is importlib.import_module("hpctrain.train.torch")
assert train.context.TrainContext is importlib.import_module("hpctrain.train.context").TrainContext
import hpctrain.tune as tune
assert tune.tune_config.TuneConfig is tune.TuneConfig
for module, name in {MODULE_PATHS!r}:
    parent, _, leaf = module.rpartition(".")
    mod = importlib.import_module(module)
    assert getattr(importlib.import_module(parent), leaf) is mod, module
    assert hasattr(mod, name), (module, name)
try:
    train.nothing
except AttributeError as e:
    assert "has no attribute 'nothing'" in str(e)
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


# -- local mode: ScalingConfig(num_workers=0) ------------------------------------------------
def _checkpoint_files(result):
    out_ = {}
    for ckpt, _metrics in result.best_checkpoints:
        with open(os.path.join(ckpt.path, "state.json")) as f:
            out_[os.path.basename(ckpt.path)] = json.load(f)
    return out_


def test_local_mode_runs_in_this_process_with_the_result_of_one_worker(storage):
    one = fit(wl.local_mode, storage, workers=1, name="one-worker")
    local = fit(wl.local_mode, storage, workers=0, name="local-mode")
    assert _read(local, "pid-1.json")["pid"] == os.getpid()      # in the driver's process
    assert _read(one, "pid-1.json")["pid"] != os.getpid()
    strip = lambda m: {k: v for k, v in m.items() if not k.startswith(("_", "time", "date"))
                       and k not in ("timestamp", "hostname", "pid", "node_ip")}
    assert strip(local.metrics) == strip(one.metrics)
    assert local.metrics["epoch"] == 2 and local.status == one.status == "FINISHED"
    assert _checkpoint_files(local) == _checkpoint_files(one) == {
        f"checkpoint_00000{e}": {"epoch": e, "w": e * 0.5, "world": 1} for e in range(3)}
    assert local.return_value == one.return_value == "done"
    # the driver's process is left as it was: no session, its environment unchanged
    assert "RANK" not in os.environ and "HPCTRAIN_IN_PROCESS" not in os.environ
    with pytest.raises(RuntimeError, match="must be called inside a training function"):
        hpctrain.report({"x": 1})


def test_local_mode_failure_is_the_worker_group_error_of_rank_0(storage):
    with pytest.raises(ValueError, match="failed at epoch 1") as info:
        fit(wl.local_mode, storage, workers=0, name="local-fail", config={"fail_at": 1})
    err = info.value
    assert isinstance(err, WorkerGroupError) and set(err.worker_failures) == {0}
    assert str(err.worker_failures[0]) == "failed at epoch 1"
    assert [os.path.basename(c.path) for c, _ in err.result.best_checkpoints] == \
        ["checkpoint_000000"]


def test_local_mode_is_refused_with_nodes_and_for_a_batch_job(storage):
    from hpctrain import ConfigError, RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    with pytest.raises(ConfigError, match=r"num_workers=0 \(local mode.*takes no num_nodes"):
        ScalingConfig(num_workers=0, num_nodes=2)
    trainer = TorchTrainer(wl.local_mode, scaling_config=ScalingConfig(num_workers=0),
                           run_config=RunConfig(name="batch", storage_path=storage),
                           scheduler="slurm")
    with pytest.raises(ConfigError, match="the trainer's configs: scaling.num_workers: "
                                          "expected an integer ≥ 1, got 0"):
        trainer.fit()
    assert not os.path.exists(os.path.join(storage, "batch"))


def test_the_generic_broadcast_over_allreduce_max_keeps_every_byte():
    """What a backend's coordinator without a broadcast of its own does (torch's, MPI's):
    the bytes travel as integers of an element-wise max; here over a fake group of 3."""
    from hpctrain.common.context import Coordinator

    class Group(Coordinator):
        """Three ranks' values, taken in turn: allreduce_max waits for all three."""

        def __init__(self, rank, board, barrier):
            self.rank, self.board, self.barrier = rank, board, barrier

        def allreduce_max(self, values):
            self.board[self.rank] = list(values)
            self.barrier.wait()
            result = [max(col) for col in zip(*self.board.values())]
            self.barrier.wait()
            return result

    import threading

    board, barrier = {}, threading.Barrier(3)
    data = bytes(range(256)) * 3 + b"\0\0"          # zeros at the end survive
    out = {}
    threads = [threading.Thread(target=lambda r=r: out.__setitem__(
        r, Group(r, board, barrier).broadcast_bytes(data if r == 0 else None)))
        for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert out == {0: data, 1: data, 2: data}


def test_a_batch_job_that_ended_before_its_run_is_a_controller_error(storage):
    """What ``fit()`` with a batch scheduler raises when the job ended (cancelled, out of
    time) before the run did: no rank failed, so Ray's ControllerError."""
    from hpctrain.driver.submission import result_of

    finished = fit(wl.local_mode, storage, workers=0, name="job-ended")
    with pytest.raises(ControllerError, match=r"job \S+ ended \(TIMEOUT\) before the "
                                              r"run finished") as info:
        result_of(finished.path, "JOB_TIMEOUT")
    assert isinstance(info.value, TrainingFailedError)
    assert isinstance(info.value.controller_failure, RuntimeError)
    assert info.value.result.path == finished.path
