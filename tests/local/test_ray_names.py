"""Ray Train names the seed documents use, with Ray's meaning adapted to a batch system:
ScalingConfig(accelerator_type, trainer_resources), SyncConfig, Trainer(metadata=) with
Checkpoint.get/set/update_metadata, TrainContext's trial names, get_devices(), the
seed-era TBXLoggerCallback, and Tuner param_space over scaling_config. Real runs (torch
worker processes, real files); outcomes, not existence."""
import glob
import json
import os
import re
import sys
import textwrap
import types
import warnings

import pytest

import hpctrain
from hpctrain import (Checkpoint, FailureConfig, RunConfig, ScalingConfig, SyncConfig,
                      tune)
from hpctrain.cluster_env import local_gpu_indices, visible_gpu_count
from hpctrain.errors import ConfigError
from hpctrain.schedulers import BatchRequest
from hpctrain.spec import load_job_spec
from hpctrain.run import Run
from hpctrain.torch import TorchTrainer

import ray_names_workloads as wl  # noqa: E402

RUN = "/scratch/me/runs/r1"


def _directives(script):
    return [line.split(" ", 1)[1] for line in script.splitlines()
            if line.startswith(("#SBATCH ", "#PBS "))]


def _render_toml(tmp_path, body, site):
    job = tmp_path / "job.toml"
    job.write_text('[job]\nentrypoint = "train.py:train"\n' + textwrap.dedent(body))
    (tmp_path / "train.py").write_text("def train(config):\n    pass\n")
    return BatchRequest(load_job_spec(str(job), [], site=site), RUN).materialize()


# --------------------------------------------------------------------------- accelerator_type
def test_accelerator_type_is_the_gpu_type_of_the_slurm_request(tmp_path):
    script = _render_toml(tmp_path, """
        [scaling]
        num_nodes = 2
        workers_per_node = 4
        use_gpu = true
        accelerator_type = "h100"
        """, "generic-slurm")
    assert "--gpus-per-node=h100:4" in _directives(script)
    # from Python: the field survives the spec the trainer resolves for the batch job
    trainer = TorchTrainer(wl.report_context, scaling_config=ScalingConfig(
        num_workers=2, use_gpu=True, gpus_per_worker=2, accelerator_type="a100"),
        scheduler="slurm")
    lines = _directives(BatchRequest(Run.for_trainer(trainer).spec, RUN).materialize())
    assert [l for l in lines if "gpus" in l] == ["--gpus-per-node=a100:4"]


def test_accelerator_type_on_pbs_is_refused_with_the_site_resource_as_hint(tmp_path):
    with pytest.raises(ConfigError) as info:
        _render_toml(tmp_path, '[scaling]\nuse_gpu = true\naccelerator_type = "a100"\n',
                     "generic-pbs")
    text = str(info.value)
    assert "scaling.accelerator_type: 'a100' cannot be requested from PBS" in text
    assert str(tmp_path / "job.toml") in text
    assert 'HINT: leave accelerator_type out and name the site\'s resource in the select ' \
           'chunk, e.g. [scheduler.directives] "select:gpu_type" = "a100"' in text
    # what the hint says renders as the select chunk's resource
    script = _render_toml(tmp_path, '[scaling]\nuse_gpu = true\n[scheduler.directives]\n'
                          '"select:gpu_type" = "a100"\n', "generic-pbs")
    assert "-l select=1:ncpus=1:mpiprocs=1:ngpus=1:gpu_type=a100" in _directives(script)


def test_accelerator_type_without_gpus_in_a_job_file_names_the_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        _render_toml(tmp_path, '[scaling]\naccelerator_type = "a100"\n', "generic-slurm")
    assert str(info.value).startswith(
        f"{tmp_path / 'job.toml'}: scaling.accelerator_type: 'a100' is a GPU type, but no "
        "GPUs are requested\nHINT: set use_gpu=True")


@pytest.mark.parametrize("kwargs, message", [
    ({"accelerator_type": "a100"},
     "scaling.accelerator_type: 'a100' is a GPU type, but no GPUs are requested\n"
     "HINT: set use_gpu=True (or gpus_per_worker)"),
    ({"use_gpu": True, "accelerator_type": "a100 --wrap=x"},
     "scaling.accelerator_type: expected a GPU type name"),
    ({"use_gpu": True, "accelerator_type": 100}, "expected a GPU type name"),
    ({"trainer_resources": {"CPU": "1"}},
     "scaling.trainer_resources: expected a table of resource name → number ≥ 0"),
    ({"trainer_resources": {"CPU": -1}}, "number ≥ 0"),
    ({"trainer_resources": 1}, "got 1\nHINT: it is Ray's reservation"),
    ({"num_workers": (1, 8)}, "scaling.num_workers: expected an integer, got (1, 8)\n"
                              "HINT: Ray's elastic form (min_workers, max_workers)"),
])
def test_bad_scaling_values_are_refused(kwargs, message):
    with pytest.raises(ConfigError) as info:
        ScalingConfig(**kwargs)
    assert message in str(info.value)


def test_trainer_resources_asking_for_something_warns_once_zero_is_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ScalingConfig(trainer_resources={"CPU": 0})
        ScalingConfig(trainer_resources={})
    with pytest.warns(UserWarning) as record:
        ScalingConfig(trainer_resources={"CPU": 1, "memory": 1e9})
    assert len(record) == 1
    assert str(record[0].message).startswith(
        "ScalingConfig(trainer_resources={'CPU': 1, 'memory': 1000000000.0}) is ignored: "
        "hpctrain's supervisor runs inside the allocation beside rank 0")


# --------------------------------------------------------------------------- SyncConfig
def test_sync_config_import_paths_and_validation():
    import hpctrain.train

    assert hpctrain.SyncConfig is hpctrain.tune.SyncConfig is hpctrain.train.SyncConfig
    assert RunConfig().sync_config == SyncConfig(sync_period=300, sync_timeout=1800,
                                                 sync_artifacts=False,
                                                 sync_artifacts_on_checkpoint=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sync_perod'"):
        SyncConfig(sync_perod=10)
    for kwargs, message in [
            ({"sync_period": -1}, "sync_config.sync_period: expected a number of seconds ≥ 0"),
            ({"sync_timeout": "1h"}, "sync_config.sync_timeout: expected a number of seconds"),
            ({"sync_artifacts": "yes"}, "sync_config.sync_artifacts: expected true or false"),
            ({"upload_dir": "s3://b"}, "sync_config.upload_dir: removed from Ray's SyncConfig"
                                       " (Ray 2.10 refuses it too)\nHINT: give RunConfig("
                                       "storage_path=...) instead"),
            ({"syncer": "auto"}, "HINT: storage is the shared filesystem here"),
            ({"sync_artifacts": True},
             "sync_config.sync_artifacts: expected false; hpctrain does not run workers in a "
             "trial working directory, so the files a worker writes in its working directory "
             "are not persisted (Ray 2.x uploads them with this flag)\nHINT: write such "
             "files under hpctrain.get_context().get_trial_dir() (the run directory, on the "
             "shared filesystem: kept with no syncing), and drop sync_artifacts=True")]:
        with pytest.raises(ConfigError) as info:
            SyncConfig(**kwargs)
        assert message in str(info.value)
    with pytest.raises(ConfigError, match="run.sync_config: expected a SyncConfig, got dict"):
        RunConfig(sync_config={"sync_period": 1})


def test_trainer_metadata_must_be_a_json_dict():
    with pytest.raises(ConfigError, match="metadata: expected a dict, got list"):
        TorchTrainer(wl.report_context, metadata=["a"])
    with pytest.raises(ConfigError) as info:
        TorchTrainer(wl.report_context, metadata={"f": object()})
    assert "metadata: expected a JSON-serializable dict" in str(info.value)
    assert "HINT: it is stored in each checkpoint's .metadata.json" in str(info.value)


# --------------------------------------------------------------------------- a real run
def test_metadata_context_and_sync_config_of_a_real_two_worker_run(storage):
    """Trainer metadata in every committed checkpoint (keys set on the checkpoint win),
    in get_checkpoint() after a restart and in result.checkpoint; get_context()'s names
    on both ranks and both attempts; a SyncConfig and trainer_resources change nothing."""
    from hpctrain.rundir.commit import verify_checkpoint

    with pytest.warns(UserWarning, match="trainer_resources"):
        scaling = ScalingConfig(num_workers=2, trainer_resources={"CPU": 1})
    result = TorchTrainer(
        wl.context_and_metadata, scaling_config=scaling,
        metadata={"model": "mlp", "note": "from the trainer"},
        run_config=RunConfig(name="ctx", storage_path=storage, verbose=0,
                             failure_config=FailureConfig(max_failures=1),
                             sync_config=SyncConfig(sync_period=1,
                                                    sync_artifacts_on_checkpoint=False)),
    ).fit()
    assert result.metrics["step"] == 2
    trainer_md = {"model": "mlp", "note": "from the trainer"}
    assert result.checkpoint.get_metadata() == trainer_md
    # every checkpoint committed: report 2's carries what was set on it over the trainer's
    by_step = {}
    for path in sorted(glob.glob(os.path.join(result.path, "checkpoints", "checkpoint_*"))):
        ck = Checkpoint(path)
        by_step.setdefault(int(open(os.path.join(path, "step.txt")).read()), ck.get_metadata())
    assert by_step == {0: trainer_md,
                       1: {"model": "mlp", "note": "set on the checkpoint", "step": 1},
                       2: trainer_md}
    # the second attempt resumed from report 2's checkpoint and read its metadata
    out = os.path.join(result.path, "test-out")
    assert json.load(open(os.path.join(out, "resumed-metadata.json"))) == by_step[1]
    # the metadata may change after the commit (as in Ray) without damaging the checkpoint
    result.checkpoint.update_metadata({"eval": 0.5})
    assert result.checkpoint.get_metadata() == {**trainer_md, "eval": 0.5}
    assert verify_checkpoint(result.checkpoint.path) == []
    # get_context(): the same names on every rank and attempt, derived from the run
    seen = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "context.*")))]
    assert len(seen) == 4  # 2 ranks × 2 attempts
    first = seen[0]
    assert all(s == first for s in seen)
    assert first["experiment_name"] == "ctx" and first["trial_dir"] == result.path
    assert re.fullmatch(r"[0-9a-f]{5}_00000", first["trial_id"])
    assert first["trial_name"] == "TorchTrainer_" + first["trial_id"]
    assert first["metadata"] == trainer_md
    assert first["world_size"] == 2 and first["devices"] == ["cpu"]


# --------------------------------------------------------------------------- get_devices
@pytest.mark.parametrize("env, device_count, expected", [
    (None, 0, 0), (None, 4, 4), ("", 4, 0), ("NoDevFiles", 4, 0), ("3", 8, 1),
    ("0,1,2,3", 8, 4), ("GPU-5f2a,GPU-77c1", 8, 2),
])
def test_visible_gpu_count(env, device_count, expected):
    assert visible_gpu_count(env, device_count) == expected


@pytest.mark.parametrize("visible, local_rank, local_world_size, gpus, expected", [
    # srun --gpus-per-task / a site's per-rank binding: the rank sees its own GPUs only
    (1, 3, 4, 1, [0]),
    (2, 1, 4, 2, [0, 1]),
    # the node's GPUs shared by its ranks (local runs, mpiexec)
    (4, 0, 4, 1, [0]),
    (4, 3, 4, 1, [3]),
    (8, 1, 4, 2, [2, 3]),
    (8, 0, 1, 1, [0]),
    # fewer GPUs than the ranks need: round robin, as get_device() always did
    (2, 3, 4, 1, [1]),
    (3, 1, 2, 2, [2, 0]),
    (0, 0, 2, 1, []),
])
def test_local_gpu_indices(visible, local_rank, local_world_size, gpus, expected):
    assert local_gpu_indices(visible, local_rank=local_rank,
                             local_world_size=local_world_size,
                             gpus_per_worker=gpus) == expected


def test_get_devices_on_a_machine_without_gpus():
    torch = pytest.importorskip("torch")
    from hpctrain.torch import get_device, get_devices

    if torch.cuda.is_available():
        pytest.skip(reason="this machine has a GPU: the CPU-only answer cannot be checked")
    assert get_devices() == [torch.device("cpu")] and get_device() == torch.device("cpu")


# --------------------------------------------------------------------------- seed-era TBX
def test_seed_era_tbx_logger_writes_the_chosen_workers_scalars(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard", reason="hpctrain[tracking] is not installed")
    pytest.importorskip("tensorboardX", reason="hpctrain[tracking] is not installed")
    from hpctrain.train import Trainer
    from hpctrain.train.callbacks import TBXLoggerCallback

    monkeypatch.setenv("HPCTRAIN_STORAGE_PATH", str(tmp_path))
    trainer = Trainer(backend="torch", num_workers=2, logdir="tbx")
    trainer.start()
    other = tmp_path / "elsewhere"
    trainer.run(wl.legacy_reports, callbacks=[TBXLoggerCallback(worker_to_log=1),
                                              TBXLoggerCallback(logdir=str(other))])
    trainer.shutdown()

    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("notf"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def scalars(logdir):
        ea = EventAccumulator(str(logdir))
        ea.Reload()
        return {tag: [(s.step, round(s.value, 6)) for s in ea.Scalars(tag)]
                for tag in ea.Tags()["scalars"]}

    run_dir = trainer.latest_run_dir   # the default logdir: the run's directory
    assert len(glob.glob(str(run_dir / "events.out.tfevents.*"))) == 1
    worker1 = scalars(run_dir)
    assert sorted(worker1) == ["ray/train/_time_this_iter_s", "ray/train/loss",
                               "ray/train/nested/m"]
    assert worker1["ray/train/loss"] == [(1, 2.0), (2, 1.5), (3, round(1 + 1 / 3, 6))]
    assert worker1["ray/train/nested/m"] == [(1, 0.0), (2, 10.0), (3, 20.0)]
    worker0 = scalars(other)
    assert worker0["ray/train/loss"] == [(1, 1.0), (2, 0.5), (3, round(1 / 3, 6))]


# --------------------------------------------------------------------------- sweeps
def test_sweep_over_scaling_config_runs_each_trial_at_its_world_size(storage):
    trainer = TorchTrainer(wl.report_context, scaling_config=ScalingConfig(num_workers=1),
                           run_config=RunConfig(storage_path=storage, verbose=0))
    grid = tune.Tuner(
        trainer,
        param_space={"scaling_config": ScalingConfig(num_workers=tune.grid_search([1, 2])),
                     "train_loop_config": {"x": tune.grid_search([7])}},
        run_config=RunConfig(name="scale", storage_path=storage)).fit()
    assert grid.num_errors == 0
    seen = sorted((r.config["scaling_config"]["num_workers"], r.metrics["world_size"],
                   r.metrics["trial_id"], r.metrics["trial_name"],
                   r.metrics["experiment_name"], r.metrics["trial_dir"] == r.path,
                   r.metrics["x"], r.metrics["devices"]) for r in grid)
    assert seen == [(1, 1, "trial_00000", "trial_00000", "scale", True, 7, "cpu"),
                    (2, 2, "trial_00001", "trial_00001", "scale", True, 7, "cpu")]
    manifest = json.load(open(os.path.join(storage, "scale", "sweep.json")))
    assert manifest["param_space"]["scaling_config"] == {
        "num_workers": {"grid_search": [1, 2]}}


def test_scaling_sweeps_that_cannot_run_are_refused_before_anything_is_written(storage):
    trainer = TorchTrainer(wl.report_context, run_config=RunConfig(storage_path=storage),
                           scheduler="slurm")
    tuner = tune.Tuner(trainer, param_space={
        "scaling_config": ScalingConfig(num_workers=tune.grid_search([1, 2]))},
        run_config=RunConfig(name="batch", storage_path=storage))
    with pytest.raises(ConfigError) as info:
        tuner.fit()
    assert "param_space.scaling_config: a batch sweep is one job array" in str(info.value)
    assert "HINT: one Tuner per scaling config" in str(info.value)
    assert os.listdir(storage) == []
    with pytest.raises(ConfigError) as info:
        TorchTrainer(wl.report_context,
                     scaling_config=ScalingConfig(num_workers=tune.grid_search([1, 2])))
    assert "scaling_config: holds a search space (tune.grid_search, tune.choice…), which " \
           "only a Tuner resolves\nHINT: Tuner(trainer, param_space=" in str(info.value)
    with pytest.raises(ConfigError, match="param_space.scaling_config: unknown field"):
        tune.Tuner(trainer, param_space={"scaling_config": {"num_worker": 2}})
    with pytest.raises(ConfigError, match="expected \"train_loop_config\" and "
                                          "\"scaling_config\""):
        tune.Tuner(trainer, param_space={"datasets": {}})
