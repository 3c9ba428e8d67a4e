"""``hpctrain.Run``: the run below ``fit()``, used directly (prepare, run here, result)."""
import os

import pytest

pytest.importorskip("torch")

import hpctrain
from hpctrain import (CheckpointConfig, ConfigError, RunConfig, Run, RunOptions,
                      ScalingConfig)
from hpctrain.torch import TorchTrainer

import workloads


def _trainer(storage, name="r", **kw):
    return TorchTrainer(workloads.scored, train_loop_config={"scores": [3, 1, 2]},
                        scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(name=name, storage_path=str(storage), verbose=0,
                                             checkpoint_config=CheckpointConfig(num_to_keep=2)),
                        **kw)


def test_a_run_prepared_and_run_here_gives_fit_s_result(tmp_path):
    run = Run.for_trainer(_trainer(tmp_path))
    assert (run.path, run.name, run.here) == (str(tmp_path / "r"), "r", True)
    assert run.spec.scaling.num_workers == 2 and run.spec.backend == "torch"
    with run.run_dir.exclusive():
        rd = run.prepare()
        assert rd.path == run.path
        assert os.path.isfile(rd.spec_file) and os.path.isfile(rd.payload_file)
        payload = run.payload
        assert payload.run_name == "r" and payload.trial == {"trainer": "TorchTrainer"}
        status = run.run_here()
    assert status == "FINISHED"
    assert rd.read_state()["status"] == "FINISHED"
    result = run.result(status)
    assert result.metrics["score"] == 2 and result.metrics["i"] == 2
    assert result.path == run.path
    with open(os.path.join(result.checkpoint.path, "value.txt")) as f:
        assert f.read() == "2"
    assert len(result.best_checkpoints) == 2  # num_to_keep
    assert run.result().metrics["score"] == 2  # (the status from state.json)


def test_a_second_run_of_a_finished_name_is_refused_as_fit_refuses_it(tmp_path):
    assert _trainer(tmp_path).fit().metrics["score"] == 2
    again = Run.for_trainer(_trainer(tmp_path))
    with pytest.raises(ConfigError, match="a finished run named 'r' already exists") as e:
        again.prepare()
    with pytest.raises(ConfigError) as by_fit:
        _trainer(tmp_path).fit()
    assert str(by_fit.value) == str(e.value)
    # an explicit run directory (what restore() continues) is not refused
    explicit = Run.for_trainer(_trainer(tmp_path), RunOptions(path=str(tmp_path / "r")))
    explicit.prepare()
    assert Run.for_trainer(TorchTrainer.restore(str(tmp_path / "r"))).path == str(tmp_path / "r")


def test_run_options_reach_the_payload_and_the_choice_of_here(tmp_path):
    trainer = _trainer(tmp_path, scheduler="slurm")
    assert Run.for_trainer(trainer).here is False
    run = Run.for_trainer(trainer, RunOptions(local_only=True, per_rank_results=True,
                                  trial={"trial_id": "trial_00001"},
                                  path=str(tmp_path / "elsewhere")))
    assert run.here and run.name == "elsewhere"
    payload = run.payload
    assert payload.per_rank_results and not payload.keep_return_values
    assert payload.trial == {"trainer": "TorchTrainer", "trial_id": "trial_00001"}
    _, script = Run.for_trainer(trainer).render()
    assert "hpctrain.cli.batch" in script and "#SBATCH" in script
    with pytest.raises(ConfigError, match="submit\\(\\) needs a batch scheduler"):
        Run.for_trainer(_trainer(tmp_path)).submit()


def test_run_is_exported_at_the_top():
    assert hpctrain.Run is Run and "Run" in hpctrain.__all__ and "RunOptions" in hpctrain.__all__


def test_restore_keeps_the_whole_failure_config_and_the_run_directory(tmp_path):
    from hpctrain import FailureConfig

    trainer = TorchTrainer(workloads.scored, train_loop_config={"scores": [1]},
                           scaling_config=ScalingConfig(num_workers=1),
                           run_config=RunConfig(name="f", storage_path=str(tmp_path), verbose=0,
                                                failure_config=FailureConfig(
                                                    max_failures=3, warning_time="30s")))
    trainer.fit()
    restored = Run.for_trainer(TorchTrainer.restore(str(tmp_path / "f")))
    fc = restored.spec.run.failure_config
    # (restore kept max_failures alone before, and the warning time fell back to 120 s)
    assert (fc.max_failures, fc.warning_s) == (3, 30)
    assert restored.path == str(tmp_path / "f") and restored.options.path == restored.path


def test_a_job_file_run_is_made_without_a_trainer(tmp_path):
    from hpctrain.spec import load_job_spec

    job = tmp_path / "job.toml"
    job.write_text(f'[job]\nentrypoint = "{workloads.__file__}:scored"\n'
                   f'[run]\nname = "j"\nstorage_path = "{tmp_path}"\nverbose = 0\n'
                   '[config]\nscores = [2, 5]\n[scaling]\nnum_workers = 2\n')
    run = Run.from_spec(load_job_spec(str(job)))
    assert run.payload.train_loop_config == {"scores": [2, 5]}
    assert run.payload.trial == {"trainer": "TorchTrainer"}
    assert run.fit().metrics["score"] == 5
    again = Run.at(run.path)   # the run directory read back: the same spec and payload
    assert again.spec.scaling.num_workers == 2 and again.payload.backend == "torch"
    assert again.spec.run.name == "j" and again.options.path == run.path


def test_a_run_directory_of_an_earlier_version_restores_and_requeues(tmp_path):
    """Before each scheduler declared its own options, ``partition`` and ``queue`` were one
    key under every scheduler, and the resolved spec.toml (and the spec a job script
    carries) kept the word the user wrote: a PBS run's ``partition``, a ``qos`` under PBS.
    Such a run continues after the upgrade, its partition read as PBS's queue."""
    import tomli_w

    from hpctrain.rundir.layout import RunDir
    from hpctrain.cli.batch import load_spec
    from hpctrain.spec import load_job_spec

    job = tmp_path / "job.toml"
    job.write_text(f'[job]\nentrypoint = "{workloads.__file__}:scored"\n'
                   f'[run]\nname = "old"\nstorage_path = "{tmp_path}"\n'
                   '[scheduler]\nkind = "pbs"\nqueue = "debug"\n')
    Run.from_spec(load_job_spec(str(job))).prepare()
    run = RunDir(tmp_path / "old")
    with run.update_state() as state:  # (submitted, then failed: what restore continues)
        state["status"] = "FAILED"
    data = run.read_spec()
    data["scheduler"].pop("queue")
    data["scheduler"].update(partition="debug", qos="high")  # as the earlier version wrote it
    with open(run.spec_file, "wb") as f:
        tomli_w.dump(data, f)
    restored = Run.for_trainer(TorchTrainer.restore(run.path))
    assert restored.spec.scheduler.kind == "pbs" and restored.spec.scheduler.queue == "debug"
    assert "qos" not in restored.spec.to_toml_dict()["scheduler"]
    # the batch step of the earlier version's job script, requeued after the upgrade
    with open(run.spec_file) as f:
        carried = load_spec(f.read(), run.path)
    assert carried.scheduler.queue == "debug"


def test_validate_prints_the_spec_as_written_without_naming_it(tmp_path):
    from helpers import cli

    job = tmp_path / "job.toml"
    job.write_text(f'[job]\nentrypoint = "{workloads.__file__}:scored"\n'
                   f'[run]\nstorage_path = "{tmp_path}"\n')
    out = cli("validate", str(job)).stdout
    assert "[run]" in out and "\nname = " not in out
