"""Ray's public module paths that Ray's example scripts import resolve under hpctrain
(issue 29): ``ray.air.*`` as ``hpctrain.air.*`` without importing a framework, and the
``ray.tune`` names the Tune examples use (``Stopper``, ``RunConfig``, ``reuse_actors``)."""
import importlib
import subprocess
import sys

import pytest

from hpctrain.errors import ConfigError


@pytest.mark.parametrize("module, names", [
    ("hpctrain.air", ["RunConfig", "ScalingConfig", "FailureConfig", "CheckpointConfig",
                      "Result"]),
    ("hpctrain.air.config", ["RunConfig", "ScalingConfig", "FailureConfig", "CheckpointConfig"]),
    ("hpctrain.air.result", ["Result"]),
    ("hpctrain.air.integrations.mlflow", ["MLflowLoggerCallback"]),
    ("hpctrain.air.integrations.wandb", ["WandbLoggerCallback"]),
])
def test_ray_air_paths_hold_hpctrains_objects(module, names):
    import hpctrain
    import hpctrain.callbacks

    mod = importlib.import_module(module)
    for name in names:
        ours = getattr(hpctrain, name, None) or getattr(hpctrain.callbacks, name)
        assert getattr(mod, name) is ours, (module, name)


def test_the_air_keras_callback_imports_no_tensorflow_until_used():
    code = ("import sys, hpctrain, hpctrain.air.integrations.keras as k\n"
            "assert 'tensorflow' not in sys.modules and 'torch' not in sys.modules\n"
            "print(hpctrain.air.integrations.keras.__all__)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['ReportCheckpointCallback']"


def test_the_air_keras_callback_is_hpctrains():
    pytest.importorskip("tensorflow")
    from hpctrain.air.integrations.keras import ReportCheckpointCallback
    from hpctrain.tensorflow.keras import ReportCheckpointCallback as ours

    assert ReportCheckpointCallback is ours


def test_ray_tune_names_of_the_tune_examples():
    from hpctrain import Checkpoint, CheckpointConfig, RunConfig, get_checkpoint
    from hpctrain import tune

    assert (tune.RunConfig, tune.CheckpointConfig, tune.Checkpoint, tune.get_checkpoint) == \
        (RunConfig, CheckpointConfig, Checkpoint, get_checkpoint)
    assert tune.TuneConfig(reuse_actors=True).reuse_actors is True
    with pytest.raises(ConfigError, match=r"tune_config.reuse_actors: expected True, False "
                                          r"or None, got 'yes'"):
        tune.TuneConfig(reuse_actors="yes")


def test_a_stoppers_stop_all_ends_the_trial_that_consults_it():
    from hpctrain.tune import Stopper
    from hpctrain.tune._control import stop_met

    class AtAccuracy(Stopper):
        def __init__(self):
            self.should_stop = False

        def __call__(self, trial_id, result):
            self.should_stop = self.should_stop or result["acc"] > 0.9
            return False                      # (only stop_all() stops)

        def stop_all(self):
            return self.should_stop

    stopper = AtAccuracy()
    assert stop_met(stopper, "t0", {"acc": 0.5}) is None
    assert stop_met(stopper, "t0", {"acc": 0.95}) == "stop criterion AtAccuracy.stop_all()"
    from hpctrain import RunConfig

    assert RunConfig(stop=stopper).stop is stopper          # a valid RunConfig(stop=...)


def test_with_resources_gives_a_function_trial_its_cores_and_gpus():
    from hpctrain import ScalingConfig
    from hpctrain.tune import Tuner, with_resources

    def train_fn(config):
        return config

    trial = with_resources(train_fn, resources={"cpu": 2, "gpu": 0})
    assert trial.__name__ == "train_fn" and trial({"a": 1}) == {"a": 1}
    scaling = Tuner(trial)._trainer.scaling_config
    assert (scaling.num_workers, scaling.resources_per_worker, scaling.use_gpu) == \
        (1, {"CPU": 2}, False)
    gpu = Tuner(with_resources(train_fn, {"CPU": 1, "GPU": 1}))._trainer.scaling_config
    assert gpu.use_gpu and gpu.resources_per_worker == {"CPU": 1, "GPU": 1}
    mine = ScalingConfig(num_workers=2)
    assert Tuner(with_resources(train_fn, mine))._trainer.scaling_config is mine
    with pytest.raises(ConfigError, match=r"with_resources\(resources=\.\.\.\): unknown key "
                                          r"'memory'; expected 'cpu' and/or 'gpu'"):
        with_resources(train_fn, {"cpu": 1, "memory": 10})
    with pytest.raises(ConfigError, match=r"'cpu': expected a number ≥ 0, got -1"):
        with_resources(train_fn, {"cpu": -1})


def test_the_tune_keras_callback_path_imports_no_tensorflow_until_used():
    code = ("import sys, hpctrain.tune.integration.keras as k\n"
            "assert 'tensorflow' not in sys.modules\n"
            "print(k.__all__)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['TuneReportCheckpointCallback']"
