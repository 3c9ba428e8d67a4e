"""Ray Train's contracts where a ported script relies on them: the data order after a
resume, the worker's exception around ``fit()``, the ranks' environment, ``restore`` and
``Result.from_path`` on a bad directory, and storage paths that are URIs. Real worker
processes, real files."""
import json
import os
import re

import pytest

import workloads
from helpers import fit, out


# -- the data order after a resume ---------------------------------------------------------

def _orders(result):
    """{(rank, epoch): indices} as the run's last attempt to read each epoch saw them,
    and the attempts that read each epoch."""
    orders, attempts = {}, {}
    for rank in (0, 1):
        with open(out(result, f"order-rank-{rank}.jsonl")) as f:
            for line in f:
                row = json.loads(line)
                orders[rank, row["epoch"]] = row["indices"]
                attempts.setdefault(row["epoch"], set()).add(row["attempt"])
    return orders, attempts


def _sampler_order(n, rank, epoch):
    """What torch's DistributedSampler (seed 0, shuffled, two ranks) gives in ``epoch``."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(n), num_replicas=2, rank=rank, shuffle=True)
    sampler.set_epoch(epoch)
    return list(sampler)


@pytest.mark.parametrize("set_epoch", ["none", "sampler", "loader"])
def test_a_resumed_run_reads_every_later_epoch_in_the_uninterrupted_order(storage, set_epoch):
    """A prepared DataLoader, the loop calling ``train_loader.sampler.set_epoch(epoch)``
    (Ray's pattern), ``loader.set_epoch(epoch)``, or neither: rank 1 crashes after epoch
    2's pass, the restart resumes from epoch 1's checkpoint, and epochs 2, 3, 4 see
    exactly the indices of an uninterrupted run (DistributedSampler with that epoch)."""
    config = {"n": 20, "epochs": 5, "set_epoch": set_epoch}
    straight, _ = _orders(fit(workloads.epoch_order, storage, config=config,
                              name=f"straight-{set_epoch}"))
    crashed_result = fit(workloads.epoch_order, storage, max_failures=1,
                         config=dict(config, crash_at=2), name=f"crashed-{set_epoch}")
    crashed, attempts = _orders(crashed_result)
    assert attempts == {0: {1}, 1: {1}, 2: {1, 2}, 3: {2}, 4: {2}}  # resumed at epoch 2
    for rank in (0, 1):
        for epoch in range(5):
            assert crashed[rank, epoch] == straight[rank, epoch] == \
                _sampler_order(20, rank, epoch), (rank, epoch)
    assert straight[0, 0] != straight[0, 1]  # a new order each epoch


def test_a_one_rank_loader_takes_set_epoch_though_its_sampler_has_no_epoch():
    """With one rank the loader keeps its own RandomSampler (as Ray's): the loop's
    ``loader.set_epoch(epoch)`` (the pattern of a script written for many ranks) is taken
    and every pass still reads each sample once, batches and all."""
    from torch.utils.data import DataLoader

    from hpctrain.torch import prepare_data_loader

    loader = prepare_data_loader(DataLoader(list(range(10)), batch_size=4, shuffle=True))
    for epoch in range(2):
        loader.set_epoch(epoch)
        assert sorted(int(v) for batch in loader for v in batch) == list(range(10))


def test_the_loops_epoch_wins_over_the_prepared_loaders_count():
    """In one process, the user's own DistributedSampler: each pass reads the epoch the
    loop set (on the sampler or on the loader), else one more than the previous pass."""
    from torch.utils.data import DataLoader, DistributedSampler

    from hpctrain.torch import prepare_data_loader

    data = list(range(20))
    sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True)
    loader = prepare_data_loader(DataLoader(data, batch_size=3, sampler=sampler))

    def one_pass():
        return [int(v) for batch in loader for v in batch]

    assert one_pass() == _sampler_order(20, 0, 0)      # the count: 0, 1, ...
    assert one_pass() == _sampler_order(20, 0, 1)
    loader.sampler.set_epoch(7)                         # Ray's pattern wins
    assert one_pass() == _sampler_order(20, 0, 7)
    assert one_pass() == _sampler_order(20, 0, 8)       # and the count goes on from it
    loader.set_epoch(3)
    assert one_pass() == _sampler_order(20, 0, 3)
    loader.sampler.set_epoch(5)                         # the same epoch twice: honoured
    assert one_pass() == _sampler_order(20, 0, 5)
    loader.sampler.set_epoch(5)
    assert one_pass() == _sampler_order(20, 0, 5)


def test_a_resumed_dataset_shard_reads_every_later_epoch_in_the_uninterrupted_order(storage):
    """``get_dataset_shard`` over a shuffled dataset, the loop never setting the epoch:
    after the crash and restart, epochs 2, 3, 4 are the shard's plan for those epochs."""
    from hpctrain.data import SequenceDataset

    data = SequenceDataset(list(range(20)), shuffle=True)
    result = fit(workloads.epoch_order, storage, max_failures=1, name="shard-resume",
                 config={"source": "shard", "epochs": 5, "crash_at": 2},
                 datasets={"train": data})
    orders, attempts = _orders(result)
    assert attempts == {0: {1}, 1: {1}, 2: {1, 2}, 3: {2}, 4: {2}}
    for rank in (0, 1):
        shard = data.shard(rank, 2, run_name="shard-resume")
        for epoch in range(5):
            assert orders[rank, epoch] == shard.indices(epoch).tolist(), (rank, epoch)
    assert orders[0, 2] != orders[0, 0]


# -- the worker's exception around fit() ---------------------------------------------------

def test_a_worker_key_error_is_caught_as_key_error_around_fit(storage):
    """As Ray's ``RayTaskError(KeyError)``: the error raised by ``fit()`` is a
    TrainingFailedError and a KeyError, its ``__cause__`` the worker's KeyError object
    (type and message), unpickled from the run directory (mode 0600); Result.from_path
    gives the same."""
    from hpctrain import Result, TrainingFailedError

    with pytest.raises(KeyError) as info:
        fit(workloads.fail_with, storage, config={"error": "key"}, name="key-error")
    err = info.value
    assert isinstance(err, TrainingFailedError) and err.rank == 1
    assert isinstance(err, RuntimeError)  # Ray's TrainingFailedError is a RuntimeError
    assert type(err.__cause__) is KeyError
    assert err.__cause__.args == ("no such column: 'label'",)
    assert str(err).startswith("Training failed: rank 1")  # the message, not KeyError's repr
    assert "KeyError: \"no such column: 'label'\"" in err.worker_traceback
    assert err.result.error is err and isinstance(err.result.error, KeyError)
    saved = os.path.join(err.result.path, ".hpctrain", "attempt-001", "error.rank-1.pickle")
    assert os.stat(saved).st_mode & 0o777 == 0o600
    again = Result.from_path(err.result.path).error
    assert isinstance(again, KeyError) and isinstance(again, TrainingFailedError)
    assert again.__cause__.args == err.__cause__.args


def test_an_unpicklable_worker_exception_gives_the_text_traceback(storage):
    from hpctrain import TrainingFailedError, WorkerGroupError
    from hpctrain.errors import WorkerTraceback

    with pytest.raises(TrainingFailedError) as info:
        fit(workloads.fail_with, storage, config={"error": "lock"}, name="lock-error")
    err = info.value
    assert type(err) is WorkerGroupError  # no class to derive from: the plain error
    assert isinstance(err.__cause__, WorkerTraceback)
    assert err.worker_failures == {1: err.__cause__}
    assert "workloads.HoldsALock: the lock was held" in str(err.__cause__)
    assert str(err.__cause__) == err.worker_traceback
    assert not os.path.exists(os.path.join(err.result.path, ".hpctrain", "attempt-001",
                                           "error.rank-1.pickle"))


def test_a_script_catches_its_own_exception_class_around_fit(tmp_path):
    """The exception class is defined in the driver's ``__main__`` (pickled by value to
    the workers): ``except ColumnMissing`` around ``fit()`` catches it, the very class."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(
        "import hpctrain\n"
        "from hpctrain import ScalingConfig, RunConfig, TrainingFailedError\n"
        "from hpctrain.torch import TorchTrainer\n"
        "class ColumnMissing(Exception):\n"
        "    pass\n"
        "def train_func(config):\n"
        "    raise ColumnMissing('label')\n"
        "if __name__ == '__main__':\n"
        "    try:\n"
        "        TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=1),\n"
        f"                     run_config=RunConfig(storage_path={str(tmp_path)!r}, verbose=0)).fit()\n"
        "    except ColumnMissing as e:\n"
        "        print('CAUGHT', isinstance(e, TrainingFailedError),\n"
        "              type(e.__cause__) is ColumnMissing, e.__cause__.args)\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       cwd=str(tmp_path), timeout=120)
    assert p.returncode == 0, p.stderr
    assert "CAUGHT True True ('label',)" in p.stdout


# -- the ranks' environment ----------------------------------------------------------------

def test_every_rank_has_ray_torch_environment_node_rank_included(storage):
    """Ray's TorchTrainer sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and
    NODE_RANK in each worker; so does TorchTrainer here (local launcher; srun: the 2x2
    job in test_slurm_jobs.py)."""
    result = fit(workloads.deterministic_with_info, storage, config={"epochs": 1})
    for rank in (0, 1):
        with open(out(result, f"info-rank-{rank}.json")) as f:
            env = json.load(f)["env"]
        assert env == {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                       "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "0"}


# -- restore, can_restore and Result.from_path on a bad directory --------------------------

def _bad_paths(tmp_path):
    """A missing path, a file, a directory that is no run."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "model.pt").write_bytes(b"x")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    return {"it does not exist": str(tmp_path / "missing"),
            "it is not a directory": str(a_file),
            "it is not an hpctrain run directory (no state.json)": str(plain)}


def test_result_from_path_on_a_bad_directory_is_a_value_error(tmp_path):
    from hpctrain import Result
    from hpctrain.errors import RunNotFoundError

    for why, path in _bad_paths(tmp_path).items():
        with pytest.raises(RuntimeError) as info:  # what Ray raises for a missing one
            Result.from_path(path)
        assert isinstance(info.value, RunNotFoundError)
        assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, ValueError)
        assert str(info.value) == (f"Result.from_path: {path}: {why}\nHINT: give a run "
                                   "directory, <storage_path>/<name> (what Result.path and "
                                   "`hpctrain status` show)")
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "plain"]  # nothing created


def test_restore_refuses_what_can_restore_refuses(tmp_path, storage):
    """``can_restore`` is False (never an error) where ``restore`` raises a ValueError
    ("invalid restore path", as Ray's); a TensorFlow run is not restored as a torch one."""
    from hpctrain.tensorflow import TensorflowTrainer
    from hpctrain.torch import TorchTrainer

    for why, path in _bad_paths(tmp_path).items():
        assert not TorchTrainer.can_restore(path)
        with pytest.raises(ValueError, match="^" + re.escape(
                f"TorchTrainer.restore: invalid restore path {path}: {why}\nHINT: ")):
            TorchTrainer.restore(path)
    result = fit(workloads.return_rank, storage, workers=1, name="done")
    assert TorchTrainer.can_restore(result.path)
    os.remove(os.path.join(result.path, ".hpctrain", "payload.pkl"))
    assert not TorchTrainer.can_restore(result.path)
    with pytest.raises(ValueError, match="the run directory has no training function"):
        TorchTrainer.restore(result.path)
    again = fit(workloads.return_rank, storage, workers=1, name="torch-run")
    with pytest.raises(ValueError, match=r"is a run of TorchTrainer \(backend 'torch'\), not "
                                         r"of TensorflowTrainer\nHINT: use TorchTrainer"):
        TensorflowTrainer.restore(again.path)


def test_a_sweep_path_that_is_no_sweep_is_a_value_error(tmp_path):
    from hpctrain.tune import ResultGrid, Tuner

    missing = str(tmp_path / "missing")
    with pytest.raises(ValueError, match=re.escape(f"ResultGrid.from_path: {missing}: it "
                                                   "does not exist\nHINT: give a sweep")):
        ResultGrid.from_path(missing)
    assert not Tuner.can_restore(str(tmp_path))
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"Tuner.restore: {tmp_path}: it is not a sweep directory (no sweep.json)")):
        Tuner.restore(str(tmp_path), workloads.return_rank)


# -- storage paths that are URIs -----------------------------------------------------------

def test_an_unknown_storage_uri_is_refused_before_anything_is_created(tmp_path, monkeypatch):
    """``RunConfig(storage_path="ftp://…")`` (and ``$HPCTRAIN_STORAGE_PATH``) raise a
    ConfigError (a ValueError) with a HINT; nothing is written; ``file:///abs`` is its path."""
    from hpctrain import ConfigError, RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    monkeypatch.chdir(tmp_path)
    for uri in ("ftp://host/x", "sftp://h/x"):
        with pytest.raises(ValueError, match=re.escape(
                f"or a storage URI (s3://, gs://, gcs://, abfs://, abfss://, hdfs://), got "
                f"{uri!r}: {uri.split(':')[0]}:// storage is not supported\nHINT: use a "
                "directory on the shared filesystem")):
            RunConfig(storage_path=uri)
    monkeypatch.setenv("HPCTRAIN_STORAGE_PATH", "ftp://host/runs")
    trainer = TorchTrainer(workloads.return_rank, scaling_config=ScalingConfig(num_workers=1),
                           run_config=RunConfig(name="r", verbose=0))
    with pytest.raises(ConfigError, match=re.escape(
            "$HPCTRAIN_STORAGE_PATH: expected a path on a shared filesystem")):
        trainer.fit()
    assert os.listdir(tmp_path) == []
    assert RunConfig(storage_path=f"file://{tmp_path}/runs").storage_path == f"{tmp_path}/runs"
