"""Object storage (``storage_path="s3://…"``) against a real S3 server: moto's, started
by scripts/s3-server.sh (tests/support/s3.py). Runs with the local launcher."""
import json
import os
import subprocess
import sys

import pytest

import hpctrain
from hpctrain import Checkpoint, CheckpointConfig

from helpers import cli, fit, run_state, workload, write_job
from s3 import s3_bucket, s3_server  # noqa: F401 - fixtures
import s3_workloads

pytestmark = pytest.mark.timeout(120)


def _objects(uri):
    """Every object under ``uri``, relative to it, sorted."""
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(i.path[len(path) + 1:] for i in infos if i.type == pafs.FileType.File)


def test_a_two_rank_run_stores_its_checkpoints_in_s3_and_resumes_from_there(s3_bucket,
                                                                             tmp_path):
    pytest.importorskip("torch")
    result = fit(s3_workloads.steps, f"{s3_bucket}/runs", name="two", max_failures=1,
                 config={"steps": 5, "fail_after": 2},
                 ckpt=CheckpointConfig(num_to_keep=2))
    # resumed after the failure from checkpoint 2, which it downloaded from S3
    assert result.error is None and result.metrics["i"] == 4 and result.metrics["first"] == 3
    assert result.path == f"{s3_bucket}/runs/two"
    assert type(result.filesystem).__name__ == "S3FileSystem"
    # the data in the bucket: the last two checkpoints, each with both ranks' shards
    names = _objects(f"{s3_bucket}/runs/two/checkpoints")
    assert sorted({n.split("/")[0] for n in names}) == ["checkpoint_000003", "checkpoint_000004"]
    assert {"checkpoint_000004/rank0.bin", "checkpoint_000004/rank1.bin",
            "checkpoint_000004/step.txt",
            "checkpoint_000004/.hpctrain_checkpoint.json"} <= set(names)
    # the control files on POSIX under the control root, no checkpoint among them
    control = tmp_path / "control" / "s3" / s3_bucket[5:] / "runs" / "two"
    state = run_state(str(control))
    assert state["status"] == "FINISHED" and len(state["attempts"]) == 2
    assert not [n for n in os.listdir(control / "checkpoints") if n.startswith("checkpoint_")]
    ckpt = result.checkpoint
    assert ckpt.path == f"{s3_bucket}/runs/two/checkpoints/checkpoint_000004"
    assert type(ckpt.filesystem).__name__ == "S3FileSystem"
    with ckpt.as_directory() as d:
        assert open(os.path.join(d, "step.txt")).read() == "4"
        assert open(os.path.join(d, "rank1.bin"), "rb").read() == bytes([4]) * 16
    assert not os.path.exists(d)  # the download is gone afterwards
    out = ckpt.to_directory(str(tmp_path / "copy"))
    assert sorted(os.listdir(out)) == ["rank0.bin", "rank1.bin", "step.txt"]


def test_a_kill_9_in_the_middle_of_an_upload_leaves_nothing_restorable(s3_bucket, monkeypatch):
    """Rank 0 dies (SIGKILL, the uploading process itself) after the first object of
    checkpoint 2 is in the bucket: that checkpoint has no commit record, no restore picks
    it, and the next attempt resumes from checkpoint 1, the last whole one."""
    pytest.importorskip("torch")
    monkeypatch.setenv(s3_workloads.KILL_AFTER_ENV, "checkpoint_000002:1")
    result = fit(s3_workloads.steps, f"{s3_bucket}/runs", name="killed", max_failures=1,
                 config={"steps": 4, "size": 1 << 20})
    assert result.error is None and result.metrics["i"] == 3
    assert result.metrics["first"] == 2  # resumed from checkpoint 1 (step 1)
    names = _objects(f"{s3_bucket}/runs/killed/checkpoints")
    # the half-uploaded one: set aside, part of its objects, no commit record; its index
    # never reused
    aside = sorted({n.split("/")[0] for n in names if n.startswith(".damaged_")})
    assert len(aside) == 1 and aside[0].startswith(".damaged_checkpoint_000002_")
    assert [n for n in names if n.startswith(aside[0])] and not any(
        n.startswith(aside[0]) and n.endswith(".hpctrain_checkpoint.json") for n in names)
    half = [n for n in names if n.startswith(aside[0] + "/")]
    whole = [n for n in names if n.startswith("checkpoint_000003/")]
    assert len(half) == 1 and len(whole) == 6, (half, whole)
    # the resumed attempt went on from a new index: 3 and 4 hold steps 2 and 3
    run = hpctrain.Result.from_path(f"{s3_bucket}/runs/killed")
    assert [c.path.rsplit("/", 1)[1] for c, _ in run.best_checkpoints] == [
        "checkpoint_000000", "checkpoint_000001", "checkpoint_000003", "checkpoint_000004"]
    assert [m["i"] for _, m in run.best_checkpoints] == [0, 1, 2, 3]
    attempts = run_state(run_dir_of(result)).get("attempts")
    assert len(attempts) == 2 and "signal 9" in json.dumps(attempts[0]), attempts[0]


def run_dir_of(result):
    from hpctrain.rundir.layout import RunDir

    return RunDir(result.path).path


def test_result_from_path_of_the_uri_in_another_process(s3_bucket, tmp_path):
    pytest.importorskip("torch")
    fit(s3_workloads.steps, f"{s3_bucket}/runs", name="other", config={"steps": 2})
    code = (
        "import sys, hpctrain\n"
        "r = hpctrain.Result.from_path(sys.argv[1])\n"
        "with r.checkpoint.as_directory() as d:\n"
        "    step = open(d + '/step.txt').read()\n"
        "print(r.path, r.metrics['i'], r.checkpoint.path.rsplit('/', 1)[1], step, r.status)\n")
    p = subprocess.run([sys.executable, "-c", code, f"{s3_bucket}/runs/other"],
                       capture_output=True, text=True, timeout=60, env=os.environ)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [f"{s3_bucket}/runs/other", "1", "checkpoint_000001", "1",
                                "FINISHED"]
    # where the control directory is not (another machine): the checkpoints and their
    # metrics from the store alone
    elsewhere = {**os.environ, "HPCTRAIN_CONTROL_ROOT": str(tmp_path / "elsewhere")}
    p = subprocess.run([sys.executable, "-c", code, f"{s3_bucket}/runs/other"],
                       capture_output=True, text=True, timeout=60, env=elsewhere)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [f"{s3_bucket}/runs/other", "1", "checkpoint_000001", "1",
                                "UNKNOWN"]
    assert not os.path.exists(tmp_path / "elsewhere")  # nothing created there
    p = subprocess.run([sys.executable, "-c", code, f"{s3_bucket}/runs/nothing"],
                       capture_output=True, text=True, timeout=60, env=elsewhere)
    assert p.returncode == 1 and "RunNotFoundError" in p.stderr, p.stderr


# --------------------------------------------------------------------------- Ray's docs
# "Configuring Persistent Storage" (Ray Train's user guide), with `ray.train` → hpctrain
def train_fn(config):
    import tempfile

    import hpctrain as train

    for i in range(2):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "model.txt"), "w") as f:
                f.write(f"weights {i}")
            train.report({"loss": 1.0 / (i + 1)}, checkpoint=train.Checkpoint.from_directory(d))


def test_ray_docs_custom_storage_filesystem(s3_bucket, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import pyarrow.fs

    from hpctrain import RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    bucket = s3_bucket[len("s3://"):]
    # Ray: fs = pyarrow.fs.S3FileSystem(endpoint_override=..., access_key=..., secret_key=...)
    fs = pyarrow.fs.S3FileSystem(endpoint_override=os.environ["AWS_ENDPOINT_URL"],
                                 access_key="testing", secret_key="testing",
                                 region="us-east-1")
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)  # every process reaches the server through `fs` alone
    trainer = TorchTrainer(
        train_fn,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            storage_filesystem=fs,
            storage_path=f"{bucket}/sub-path",
            name="experiment_name",
            verbose=0,
        ),
    )
    result = trainer.fit()
    # Ray: result.filesystem, result.checkpoint.filesystem are the pyarrow filesystem
    assert result.filesystem is not None and result.filesystem.type_name == "s3"
    checkpoint = result.checkpoint
    assert checkpoint.filesystem.type_name == "s3"
    with checkpoint.as_directory() as d:
        assert open(os.path.join(d, "model.txt")).read() == "weights 1"
    # the files are where Ray puts them: <bucket>/sub-path/experiment_name/…
    infos = fs.get_file_info(pyarrow.fs.FileSelector(f"{bucket}/sub-path/experiment_name",
                                                     recursive=True))
    assert f"{bucket}/sub-path/experiment_name/checkpoints/checkpoint_000001/model.txt" in \
        [i.path for i in infos]
    # the filesystem object is kept for the run's other processes, private
    control = tmp_path / "control" / "pyarrowfs" / bucket / "sub-path" / "experiment_name"
    kept = control / ".hpctrain" / "storage_filesystem.pkl"
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    # read back from the location alone (the filesystem object from the control directory)
    assert result.path == f"pyarrowfs://{bucket}/sub-path/experiment_name"
    again = hpctrain.Result.from_path(result.path)
    with again.checkpoint.as_directory() as d:
        assert open(os.path.join(d, "model.txt")).read() == "weights 1"


def test_ray_docs_cloud_storage_uri_and_checkpoint_filesystem(s3_bucket, tmp_path):
    pytest.importorskip("torch")
    from hpctrain import RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    trainer = TorchTrainer(
        train_fn,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path=f"{s3_bucket}/sub-path/", name="experiment_name",
                             verbose=0),
    )
    result = trainer.fit()
    # "all files are uploaded to shared storage at s3://bucket-name/sub-path/experiment_name"
    assert result.path == f"{s3_bucket}/sub-path/experiment_name"
    assert result.filesystem.type_name == "s3"
    # Checkpoint(URI) / from_directory(URI) read back through its filesystem
    uri = f"{s3_bucket}/sub-path/experiment_name/checkpoints/checkpoint_000000"
    checkpoint = Checkpoint.from_directory(uri)
    assert checkpoint.filesystem.type_name == "s3"
    path = checkpoint.to_directory(str(tmp_path / "local"))
    assert open(os.path.join(path, "model.txt")).read() == "weights 0"
    with pytest.raises(FileNotFoundError, match="nothing at"):
        Checkpoint.from_directory(f"{s3_bucket}/sub-path/missing")


# --------------------------------------------------------------------------- job file, CLI
def test_the_job_file_and_set_take_a_uri_and_the_cli_reads_runs_there(s3_bucket, tmp_path):
    """``hpctrain run`` of a job file whose storage_path is an s3:// URI (and ``--set``
    giving another), then ``hpctrain list/results/status`` of the URIs."""
    job = write_job(tmp_path, "fromjob", entrypoint=workload("s3_workloads:steps"),
                    storage=f"{s3_bucket}/jobs", verbose=0, scaling={"num_workers": 1},
                    config={"steps": 2})
    cli("run", job)
    cli("run", job, "--set", f"run.storage_path={s3_bucket}/other")
    for where in ("jobs", "other"):
        assert "fromjob/checkpoints/checkpoint_000001/step.txt" in _objects(
            f"{s3_bucket}/{where}"), where
    listed = cli("list", f"{s3_bucket}/jobs").stdout.splitlines()
    assert len(listed) == 1 and listed[0].split("\t")[:4] == ["fromjob", "run", "FINISHED", "2"]
    assert listed[0].split("\t")[-1] == f"{s3_bucket}/jobs/fromjob"
    results = cli("results", f"{s3_bucket}/jobs/fromjob").stdout
    assert results.startswith("fromjob  FINISHED  iterations 2  attempts 1"), results
    status = cli("status", f"{s3_bucket}/other/fromjob").stdout
    assert status.startswith("run fromjob: FINISHED"), status
    assert (f"  latest checkpoint: {s3_bucket}/other/fromjob/checkpoints/checkpoint_000001"
            in status.splitlines()), status


def test_trainer_restore_of_a_uri_continues_the_failed_run(s3_bucket):
    pytest.importorskip("torch")
    from hpctrain.torch import TorchTrainer

    with pytest.raises(hpctrain.errors.WorkerGroupError) as failed:
        fit(s3_workloads.steps, f"{s3_bucket}/runs", name="again", workers=1,
            config={"steps": 3, "fail_after": 0})
    uri = f"{s3_bucket}/runs/again"
    assert failed.value.result.path == uri
    assert failed.value.result.checkpoint.path == f"{uri}/checkpoints/checkpoint_000000"
    assert TorchTrainer.can_restore(uri)
    result = TorchTrainer.restore(uri).fit()
    assert result.error is None and (result.metrics["i"], result.metrics["first"]) == (2, 1)
    assert result.path == uri


# --------------------------------------------------------------------------- a sweep
def test_a_sweep_whose_trials_store_in_s3(s3_bucket, tmp_path):
    pytest.importorskip("torch")
    from hpctrain import RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer
    from hpctrain.tune import TuneConfig, Tuner, grid_search

    trainer = TorchTrainer(s3_workloads.steps, scaling_config=ScalingConfig(num_workers=1),
                           train_loop_config={"steps": 2})
    tuner = Tuner(trainer, param_space={"train_loop_config": {"size": grid_search([4, 8])}},
                  tune_config=TuneConfig(metric="i", mode="max"),
                  run_config=RunConfig(name="sweep", storage_path=f"{s3_bucket}/sweeps",
                                       verbose=0))
    grid = tuner.fit()
    assert len(grid) == 2 and not grid.errors
    uris = sorted(r.path for r in grid)
    assert uris == [f"{s3_bucket}/sweeps/sweep/trial_00000",
                    f"{s3_bucket}/sweeps/sweep/trial_00001"]
    sizes = []
    for r in sorted(grid, key=lambda r: r.path):  # each trial's checkpoint, from S3
        with r.checkpoint.as_directory() as d:
            sizes.append(len(open(os.path.join(d, "rank0.bin"), "rb").read()))
    assert sizes == [4, 8]
    assert {n.split("/")[0] for n in _objects(f"{s3_bucket}/sweeps/sweep")} == \
        {"trial_00000", "trial_00001"}
    # the sweep continues by its URI
    again = Tuner.restore(f"{s3_bucket}/sweeps/sweep", trainer).fit()
    assert sorted(r.path for r in again) == uris


def test_reporting_a_checkpoint_that_is_in_storage_already_says_what_to_do(s3_bucket):
    pytest.importorskip("torch")
    fit(s3_workloads.steps, f"{s3_bucket}/runs", name="first", workers=1, config={"steps": 1})
    uri = f"{s3_bucket}/runs/first/checkpoints/checkpoint_000000"
    with pytest.raises(hpctrain.errors.WorkerGroupError) as e:
        fit(s3_workloads.reports_a_stored_checkpoint, f"{s3_bucket}/runs", name="second",
            workers=1, config={"uri": uri})
    assert (f"rank 0: report(checkpoint=...) takes a local directory, got {uri!r}, which is "
            "in storage already\nHINT: download it first: "
            "Checkpoint.from_directory(checkpoint.to_directory())") in str(e.value)
