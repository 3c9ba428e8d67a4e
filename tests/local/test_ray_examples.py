"""Ray's own example scripts, ported mechanically (tests/support/ray_port.py) and run as
a user runs them: ``python example.py --smoke-test``. The pinned copies are named in
tests/support/ray_examples/MANIFEST.json; without them the test is skipped."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ray_port

HERE = os.path.dirname(os.path.abspath(__file__))
PINNED = os.environ.get("HPCTRAIN_RAY_EXAMPLES") or os.path.join(
    HERE, "..", "support", "ray_examples")
MANIFEST = json.load(open(os.path.join(HERE, "..", "support", "ray_examples",
                                       "MANIFEST.json")))["examples"]
ROOT = os.path.dirname(os.path.dirname(HERE))


def _pinned(name):
    path = os.path.join(PINNED, name)
    if not os.path.exists(path):
        pytest.skip(f"the pinned copy of Ray's {MANIFEST[name]['source']} (commit "
                    f"{MANIFEST[name]['commit'][:10]}) is not in {PINNED}")
    text = open(path).read()
    assert len(text) == MANIFEST[name]["chars"], f"{path} is not the pinned version"
    return text


def _run(script, tmp_path, *args):
    env = dict(os.environ, HPCTRAIN_STORAGE_PATH=str(tmp_path / "results"),
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
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
    source = ray_port.port(_pinned("torch_regression_example.py"), {
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
