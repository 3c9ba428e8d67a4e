"""Ray programs as Ray documents them today, with their imports changed (issue 45): Ray
Train's ``ray.train.v2.api.*`` module paths, Ray 2.0–2.6's ``ray.air.session`` functions
(still in much public Ray code), and the attribute chains Ray's lazily loaded packages
resolve (``ray.train.huggingface.transformers`` after ``import ray.train``)."""
import importlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

import hpctrain

# Ray's v2 docs' imports (DataParallelTrainer from its v2 module, the config classes from
# v2.api.config) and an older program's ray.air.session calls; "ray." → "hpctrain." only
V2_AND_AIR_SESSION = textwrap.dedent('''
    import json
    import os
    import sys
    import tempfile

    from hpctrain.air import session
    from hpctrain.train import Checkpoint
    from hpctrain.train.v2.api.config import RunConfig, ScalingConfig
    from hpctrain.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from hpctrain.train.v2.api.exceptions import TrainingFailedError


    def train_func(config):
        start = 0
        checkpoint = session.get_checkpoint()
        if checkpoint:
            with checkpoint.as_directory() as d:
                with open(os.path.join(d, "state.json")) as f:
                    start = json.load(f)["epoch"] + 1
        for epoch in range(start, config["epochs"]):
            if epoch == 2 and start == 0 and session.get_world_rank() == 1:
                raise RuntimeError("injected failure at epoch 2")
            metrics = {"epoch": epoch, "rank": session.get_world_rank(),
                       "world": session.get_world_size(), "local": session.get_local_rank(),
                       "node": session.get_node_rank(), "start": start,
                       "trial": session.get_trial_name()}
            with tempfile.TemporaryDirectory() as d:
                ckpt = None
                if session.get_world_rank() == 0:
                    with open(os.path.join(d, "state.json"), "w") as f:
                        json.dump({"epoch": epoch}, f)
                    ckpt = Checkpoint.from_directory(d)
                session.report(metrics, checkpoint=ckpt)


    run_config = RunConfig(name="v2", storage_path=sys.argv[1], verbose=0)
    trainer = DataParallelTrainer(train_func, train_loop_config={"epochs": 4},
                                  scaling_config=ScalingConfig(num_workers=2),
                                  run_config=run_config)
    try:
        trainer.fit()
    except TrainingFailedError as e:
        print("failed once:", type(e).__name__)
    result = DataParallelTrainer.restore(os.path.join(sys.argv[1], "v2")).fit()
    print("final", json.dumps(result.metrics), result.checkpoint.path)
''')


def test_a_program_on_rays_v2_paths_and_air_session_fails_restores_and_finishes(tmp_path,
                                                                                  storage):
    script = tmp_path / "v2_program.py"
    script.write_text(V2_AND_AIR_SESSION)
    p = subprocess.run([sys.executable, str(script), storage], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "failed once: WorkerGroupError" in p.stdout
    final = [line for line in p.stdout.splitlines() if line.startswith("final ")]
    assert final, p.stdout
    metrics, path = final[0][len("final "):].rsplit(" ", 1)
    m = json.loads(metrics)
    # rank 0's metrics; the restore resumed after checkpoint_000001 (epoch 1)
    assert (m["epoch"], m["rank"], m["world"], m["local"], m["node"], m["start"]) == \
        (3, 0, 2, 0, 0, 2)
    assert m["trial"].endswith("_00000")
    assert path == os.path.join(storage, "v2", "checkpoints", "checkpoint_000003")


V2_NAMES = {
    "data_parallel_trainer": {"DataParallelTrainer": hpctrain.DataParallelTrainer},
    "config": {n: getattr(hpctrain, n) for n in ("ScalingConfig", "RunConfig",
                                                 "CheckpointConfig", "FailureConfig")},
    "exceptions": {n: getattr(hpctrain, n) for n in ("TrainingFailedError",
                                                     "WorkerGroupError", "ControllerError")},
    "result": {"Result": hpctrain.Result},
    "reported_checkpoint": {"ReportedCheckpoint": hpctrain.ReportedCheckpoint},
    "train_fn_utils": {n: getattr(hpctrain, n) for n in (
        "report", "get_context", "get_checkpoint", "get_all_reported_checkpoints",
        "get_dataset_shard", "get_preemption_info")},
    "callback": {"UserCallback": hpctrain.UserCallback},
    "validation_config": {n: getattr(hpctrain, n) for n in ("ValidationConfig",
                                                            "ValidationTaskConfig")},
    "preemption": {"PreemptionInfo": hpctrain.PreemptionInfo},
}


@pytest.mark.parametrize("module", sorted(V2_NAMES))
def test_each_v2_api_module_names_hpctrains_own_objects(module):
    mod = importlib.import_module(f"hpctrain.train.v2.api.{module}")
    for name, obj in V2_NAMES[module].items():
        assert getattr(mod, name) is obj, (module, name)
        assert name in mod.__all__


def test_attribute_chains_resolve_as_in_ray_and_import_no_framework():
    code = textwrap.dedent('''
        import sys
        import hpctrain.train as train
        assert "torch" not in sys.modules and "transformers" not in sys.modules
        assert train.v2.api.context.TrainContext is train.context.TrainContext
        callback = train.huggingface.transformers.RayTrainReportCallback
        assert callback.__module__ == "hpctrain.huggingface.transformers", callback.__module__
        keras = train.tensorflow.keras.ReportCheckpointCallback
        assert keras.__module__ == "hpctrain.tensorflow.keras", keras.__module__
        print("ok")
    ''')
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_air_session_outside_a_training_function_raises_as_get_context_does():
    from hpctrain.air import session

    with pytest.raises(RuntimeError) as from_session:
        session.get_world_rank()
    with pytest.raises(RuntimeError) as from_context:
        hpctrain.get_context()
    assert str(from_session.value) == str(from_context.value)
