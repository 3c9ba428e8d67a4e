"""``hpctrain.train`` is ``ray.train`` with the imports changed: a Ray Train 2.x program
(``import ray.train.torch`` → ``import hpctrain.train.torch``) runs as written, and the
1.x names live beside the 2.x ones."""
import os
import subprocess
import sys
import textwrap

import pytest

import hpctrain
import hpctrain.train as train

# Ray Train 2.x's PyTorch pattern, with "ray.train" replaced by "hpctrain.train" and
# nothing else changed (Ray's docs: "Get started with PyTorch", train_func + report).
RAY2_PROGRAM = textwrap.dedent('''
    import os
    import sys
    import tempfile

    import torch

    import hpctrain.train
    import hpctrain.train.torch
    from hpctrain.train import Checkpoint, RunConfig, ScalingConfig
    from hpctrain.train.torch import TorchTrainer


    def train_func(config):
        torch.manual_seed(0)
        model = hpctrain.train.torch.prepare_model(torch.nn.Linear(4, 1))
        opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
        start = 0
        checkpoint = hpctrain.train.get_checkpoint()
        if checkpoint:
            with checkpoint.as_directory() as d:
                state = torch.load(os.path.join(d, "model.pt"))
                model.module.load_state_dict(state["model"])
                start = state["epoch"] + 1
        x = torch.ones(8, 4) * (hpctrain.train.get_context().get_world_rank() + 1)
        for epoch in range(start, config["epochs"]):
            loss = model(x).pow(2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
            with tempfile.TemporaryDirectory() as tmp:
                ckpt = None
                if hpctrain.train.get_context().get_world_rank() == 0:
                    torch.save({"model": model.module.state_dict(), "epoch": epoch},
                               os.path.join(tmp, "model.pt"))
                    ckpt = Checkpoint.from_directory(tmp)
                hpctrain.train.report({"loss": loss.item(), "epoch": epoch}, checkpoint=ckpt)


    trainer = TorchTrainer(train_func, train_loop_config={"lr": 0.1, "epochs": 3},
                           scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(name="ray2", storage_path=sys.argv[1]))
    result = trainer.fit()
    with result.checkpoint.as_directory() as d:
        state = torch.load(os.path.join(d, "model.pt"))
    print("final", result.metrics["epoch"], state["epoch"], result.checkpoint.path)
''')


def test_a_ray2_program_runs_with_only_its_imports_changed(tmp_path, storage):
    script = tmp_path / "ray2_program.py"
    script.write_text(RAY2_PROGRAM)
    p = subprocess.run([sys.executable, str(script), storage], capture_output=True, text=True,
                       timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    final = [line for line in p.stdout.splitlines() if line.startswith("final ")]
    assert final, p.stdout
    _, metric_epoch, saved_epoch, path = final[0].split(" ", 3)
    assert (metric_epoch, saved_epoch) == ("2", "2")
    # Ray 2 numbers checkpoints from 0; the last of three reports is checkpoint_000002
    assert path == os.path.join(storage, "ray2", "checkpoints", "checkpoint_000002")


def test_the_2x_names_are_hpctrains_own_objects():
    import hpctrain.torch
    import hpctrain.train.horovod
    import hpctrain.train.tensorflow
    import hpctrain.train.torch

    for name in ("report", "get_checkpoint", "get_context", "Checkpoint", "ScalingConfig",
                 "RunConfig", "CheckpointConfig", "FailureConfig", "DataConfig", "SyncConfig", "Result",
                 "TrainingFailedError"):
        assert name in train.__all__, name
        if name != "report":  # train.report takes Ray 1.x's keyword form too
            assert getattr(train, name) is getattr(hpctrain, name), name
    assert train.torch.TorchTrainer is hpctrain.torch.TorchTrainer
    assert train.torch.prepare_data_loader is hpctrain.torch.prepare_data_loader
    assert train.horovod.HorovodTrainer.__module__ == "hpctrain.horovod"
    assert train.tensorflow.TensorflowTrainer.__module__ == "hpctrain.tensorflow"


def test_report_refuses_both_forms_at_once_and_non_dict_metrics():
    with pytest.raises(TypeError, match="not both"):
        train.report({"loss": 1.0}, loss=2.0)
    with pytest.raises(TypeError, match="metrics must be a dict"):
        train.report(1.0)


def test_ray1_callbacks_module_is_a_real_module():
    from hpctrain.train.callbacks import JsonLoggerCallback, TrainingCallback

    assert issubclass(JsonLoggerCallback, TrainingCallback)
    assert train.callbacks.__file__.endswith(os.path.join("train", "callbacks.py"))
