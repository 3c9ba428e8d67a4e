"""Ray's own example scripts, ported mechanically (tests/support/ray_port.py) and run as
a user runs them: ``python example.py --smoke-test``. Each script is read straight out of
Ray's released wheel, which scripts/test.sh downloads once into .cache/ray-wheel/ (pinned
in tests/support/ray_examples/MANIFEST.json with each file's sha256); nothing of Ray is
installed or committed. Without the wheel the tests fail and say so, unless
HPCTRAIN_SKIP_RAY_EXAMPLES=1."""
import glob
import hashlib
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import ray_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MANIFEST = json.load(open(os.path.join(ROOT, "tests", "support", "ray_examples",
                                       "MANIFEST.json")))


def _example(path):
    """The text of ``path`` (as inside Ray's wheel), checked against the manifest."""
    if os.environ.get("HPCTRAIN_SKIP_RAY_EXAMPLES") == "1":
        pytest.skip(reason="HPCTRAIN_SKIP_RAY_EXAMPLES=1")
    wheel = MANIFEST["wheel"]
    pattern = os.path.join(ROOT, wheel["folder"], f"ray-{wheel['version']}-*.whl")
    found = sorted(glob.glob(pattern))
    if not found:
        pytest.fail(f"Ray {wheel['version']}'s wheel is not in {wheel['folder']}/: run "
                    f"`bash scripts/test.sh` (it downloads it once), or set "
                    f"HPCTRAIN_SKIP_RAY_EXAMPLES=1 to skip these tests", pytrace=False)
    with zipfile.ZipFile(found[0]) as whl:
        data = whl.read(path)
    digest = hashlib.sha256(data).hexdigest()
    assert digest == MANIFEST["examples"][path], (
        f"{path} in {os.path.basename(found[0])} is not the pinned version (sha256 {digest})")
    return data.decode()


def _run(script, tmp_path, *args):
    env = dict(os.environ, HPCTRAIN_STORAGE_PATH=str(tmp_path / "results"),
               PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path),
                                           os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_ray_data_torch_regression_example_runs(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("pyarrow")
    pd = pytest.importorskip("pandas")
    # regression.csv's shape: x000…x099 and y
    rng = np.random.default_rng(0)
    x = rng.random((200, 100))
    frame = pd.DataFrame({f"x{i:03d}": x[:, i] for i in range(100)})
    frame["y"] = x.sum(axis=1)
    frame.to_csv(tmp_path / "regression.csv", index=False)
    source = ray_port.port(_example("ray/train/examples/pytorch/torch_regression_example.py"), {
        '"s3://anonymous@air-example-data/regression.csv"': repr(str(tmp_path / "regression.csv"))})
    script = tmp_path / "torch_regression_example.py"
    script.write_text(source)
    proc = _run(script, tmp_path, "--smoke-test")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    from hpctrain import Result

    (run,) = [os.path.join(tmp_path / "results", d) for d in os.listdir(tmp_path / "results")]
    result = Result.from_path(run)
    assert len(result.metrics_dataframe) == 3                # 3 epochs, 3 reports
    assert result.metrics["loss"] > 0                        # rank 0's validation loss
    assert os.path.exists(os.path.join(result.checkpoint.path, "model.pt"))


@pytest.mark.slow
def test_the_tensorflow_mnist_example_runs_with_legacy_keras(tmp_path):
    pytest.importorskip("tensorflow")
    pytest.importorskip("tf_keras")
    # mnist.load_data()'s shapes: (N, 28, 28) uint8 images, (N,) uint8 labels
    source = ray_port.port(_example("ray/train/examples/tf/tensorflow_mnist_example.py"), {
        "(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()":
            "rng = np.random.default_rng(0)\n"
            "        (x_train, y_train), _ = (rng.integers(0, 256, (6000, 28, 28), dtype=np.uint8),"
            " rng.integers(0, 10, 6000, dtype=np.uint8)), None"})
    script = tmp_path / "tensorflow_mnist_example.py"
    script.write_text(source)
    proc = _run(script, tmp_path, "--smoke-test")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    from hpctrain import Result

    (run,) = [os.path.join(tmp_path / "results", d) for d in os.listdir(tmp_path / "results")]
    result = Result.from_path(run)
    frame = result.metrics_dataframe
    assert len(frame) == 4                                   # 4 epochs (the smoke test's)
    # Keras 3 under MultiWorkerMirroredStrategy reported accuracies above 1 (issue 29)
    assert ((frame["accuracy"] >= 0) & (frame["accuracy"] <= 1)).all(), frame["accuracy"]
    assert (frame["loss"] > 0).all()
    assert os.path.exists(os.path.join(result.checkpoint.path, "model.keras"))


#: MNIST's shapes for the ported ``ray.tune.examples.mnist_pytorch``: normalized
#: (n, 1, 28, 28) images and labels 0-9, as tensors (what torchvision's transforms made)
SYNTHETIC_MNIST = """
def _synthetic_mnist(n):  # (the port's: no download, no torchvision)
    g = torch.Generator().manual_seed(n)
    return torch.utils.data.TensorDataset(torch.randn(n, 1, 28, 28, generator=g),
                                          torch.randint(0, 10, (n,), generator=g))
"""


@pytest.mark.slow
def test_the_tune_pbt_convnet_function_example_runs(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("pandas")
    helper = ray_port.port(_example("ray/tune/examples/mnist_pytorch.py"), {
        "from torchvision import datasets, transforms\n": SYNTHETIC_MNIST,
        """    mnist_transforms = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))]
    )""": "",
        """datasets.MNIST(
                "~/data", train=True, download=True, transform=mnist_transforms
            )""": "_synthetic_mnist(1024)",
        """datasets.MNIST(
                "~/data", train=False, download=True, transform=mnist_transforms
            )""": "_synthetic_mnist(512)"})
    (tmp_path / "tune_examples").mkdir()
    (tmp_path / "tune_examples" / "__init__.py").write_text("")
    (tmp_path / "tune_examples" / "mnist_pytorch.py").write_text(helper)
    source = ray_port.port(_example("ray/tune/examples/pbt_convnet_function_example.py"), {})
    script = tmp_path / "pbt_convnet_function_example.py"
    script.write_text(source)
    proc = _run(script, tmp_path, "--smoke-test")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "best model accuracy: " in proc.stdout
    from hpctrain.tune import ResultGrid

    grid = ResultGrid.from_path(tmp_path / "results" / "pbt_test")
    assert len(grid) == 4 and not grid.errors                # num_samples=4
    for trial in grid:
        # the smoke test's CustomStopper: 5 iterations each, a checkpoint at step 0
        assert trial.metrics["_training_iteration"] == 5     # (hpctrain's name)
        assert len(trial.metrics_dataframe) == 5
        assert 0 <= trial.metrics["mean_accuracy"] <= 1
        assert os.path.exists(os.path.join(trial.checkpoint.path, "checkpoint.pt"))


@pytest.mark.slow
def test_the_tune_keras_mnist_example_runs(tmp_path):
    pytest.importorskip("tensorflow")
    pytest.importorskip("pandas")
    source = ray_port.port(_example("ray/tune/examples/tune_mnist_keras.py"), {
        # mnist.load_data()'s shapes: (N, 28, 28) uint8 images, (N,) uint8 labels
        "(x_train, y_train), (x_test, y_test) = mnist.load_data()":
            "import numpy as np\n"
            "        rng = np.random.default_rng(0)\n"
            "        (x_train, y_train), (x_test, y_test) = ("
            "(rng.integers(0, 256, (2000, 28, 28), dtype=np.uint8),"
            " rng.integers(0, 10, 2000, dtype=np.uint8)),"
            " (rng.integers(0, 256, (500, 28, 28), dtype=np.uint8),"
            " rng.integers(0, 10, 500, dtype=np.uint8)))"}, fixes={
        # Keras ≥ 2.11's optimizers have no `lr` (Ray's example fails there under Ray too)
        'tf.keras.optimizers.SGD(lr=config["lr"]': 'tf.keras.optimizers.SGD(learning_rate=config["lr"]'})
    script = tmp_path / "tune_mnist_keras.py"
    script.write_text(source)
    proc = _run(script, tmp_path, "--smoke-test")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Best hyperparameters found were: " in proc.stdout
    from hpctrain.tune import ResultGrid

    grid = ResultGrid.from_path(tmp_path / "results" / "exp")
    assert len(grid) == 10 and not grid.errors               # num_samples=10
    for trial in grid:
        frame = trial.metrics_dataframe                      # stopped at iteration 2
        assert list(frame["_training_iteration"]) == [1, 2]
        assert ((frame["mean_accuracy"] >= 0) & (frame["mean_accuracy"] <= 1)).all()
        assert 32 <= trial.config["hidden"] < 512
        assert trial.checkpoint is None                      # checkpoint_on=[]


@pytest.mark.slow
def test_the_horovod_tune_example_runs(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("horovod.torch")
    pytest.importorskip("pandas")
    source = ray_port.port(_example("ray/train/examples/horovod/horovod_tune_example.py"), {})
    script = tmp_path / "horovod_tune_example.py"
    script.write_text(source)
    proc = _run(script, tmp_path, "--smoke-test")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Best hyperparameters found were: " in proc.stdout
    assert "'fail_fast': ...}): not supported here" in proc.stderr
    from hpctrain.tune import ResultGrid

    (sweep,) = os.listdir(tmp_path / "results")
    grid = ResultGrid.from_path(tmp_path / "results" / sweep)
    assert len(grid) == 2 and not grid.errors                # num_samples=2
    for trial in grid:
        assert len(trial.metrics_dataframe) == 5             # num_steps=5 reports
        assert 0.1 <= trial.config["train_loop_config"]["lr"] <= 1
