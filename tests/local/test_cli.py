"""The command line and the examples, run as a user runs them (real processes)."""
import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT

QUICKSTART = os.path.join(ROOT, "examples", "quickstart.toml")


def hpctrain(*args, cwd=None, timeout=180):
    return subprocess.run([sys.executable, "-m", "hpctrain", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout)


def test_quickstart_runs_and_learns(storage):
    p = hpctrain("run", QUICKSTART, "--set", f"run.storage_path={storage}",
                 "--set", "config.epochs=2", "--set", "run.name=qs")
    assert p.returncode == 0, p.stderr
    assert "run FINISHED" in p.stdout
    rows = [json.loads(l) for l in open(os.path.join(storage, "qs", "result.json"))]
    assert [r["epoch"] for r in rows] == [0, 1]
    assert rows[1]["accuracy"] > 0.6 and rows[1]["loss"] < rows[0]["loss"]
    assert sorted(os.listdir(os.path.join(storage, "qs", "checkpoints"))) == [
        "checkpoint_000000", "checkpoint_000001"]
    # results shows the run
    r = hpctrain("results", os.path.join(storage, "qs"))
    assert r.returncode == 0 and "FINISHED" in r.stdout and "checkpoint_000001" in r.stdout
    # a finished run of the same name is not silently overwritten
    again = hpctrain("run", QUICKSTART, "--set", f"run.storage_path={storage}", "--set", "run.name=qs")
    assert again.returncode == 2 and "already exists" in again.stderr


def test_validate_prints_the_resolved_spec():
    p = hpctrain("validate", QUICKSTART, "--set", "scaling.num_workers=4")
    assert p.returncode == 0, p.stderr
    assert "num_workers = 4" in p.stdout and "quickstart_train.py:train_func" in p.stdout


@pytest.mark.parametrize("body, expected", [
    pytest.param('[job\nentrypoint = "x"', ["invalid TOML", "line 1"], id="malformed"),
    pytest.param('[job]\nentrypoint = "t.py:train"\n[scaling]\nnum_worker = 2\n',
                 ["scaling.num_worker", "num_workers"], id="unknown-key"),
    pytest.param('[job]\nentrypoint = "t.py:train"\n[scaling]\nnum_workers = "two"\n',
                 ["scaling.num_workers", "expected an integer"], id="wrong-type"),
    pytest.param('[job]\nentrypoint = "t.py:nope"\n', ["job.entrypoint", "no function 'nope'"],
                 id="missing-function"),
    pytest.param('[job]\nentrypoint = "missing.py:train"\n', ["job.entrypoint", "file not found"],
                 id="missing-file"),
    pytest.param('[scaling]\nnum_workers = 2\n', ["job.entrypoint"], id="no-entrypoint"),
    pytest.param('[job]\nentrypoint = "t.py:train"\n[run]\nname = "../escape"\n',
                 ["run.name", "letters, digits"], id="unsafe-name"),
])
def test_bad_job_files_are_refused_and_nothing_starts(tmp_path, body, expected):
    (tmp_path / "t.py").write_text("def train(config):\n    pass\n")
    job = tmp_path / "job.toml"
    storage = tmp_path / "runs"
    job.write_text(body)
    p = hpctrain("run", str(job), "--set", f"run.storage_path={storage}", cwd=str(tmp_path))
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert str(job) in p.stderr
    for text in expected:
        assert text in p.stderr
    assert not storage.exists()  # no run directory was created


def test_ported_ray_quickstart_example(storage):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "torch_ddp_mlp.py"),
                        "--epochs", "1", "--storage", storage], capture_output=True, text=True,
                       timeout=180)
    assert p.returncode == 0, p.stderr
    assert "accuracy after 1 epochs" in p.stdout


def test_import_and_cli_do_not_import_frameworks():
    code = ("import sys, hpctrain, hpctrain.cli, hpctrain.torch, hpctrain.spec, hpctrain.train\n"
            "import hpctrain.train.torch, hpctrain.train.horovod, hpctrain.train.tensorflow\n"
            "from hpctrain.xgboost import XGBoostTrainer\n"
            "from hpctrain.lightgbm import LightGBMTrainer, get_network_params\n"
            "from hpctrain.train.xgboost import XGBoostTrainer\n"
            "from hpctrain.train.lightgbm import LightGBMTrainer\n"
            "import hpctrain.huggingface, hpctrain.train.huggingface\n"
            "bad = [m for m in ('torch', 'tensorflow', 'mpi4py', 'horovod', 'lightning',\n"
            "                   'pytorch_lightning', 'transformers', 'accelerate', 'xgboost',\n"
            "                   'lightgbm') if m in sys.modules]\n"
            "print(bad)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_render_and_sites_work_without_any_framework_installed():
    """A login node may have no torch: rendering and listing sites must not need it."""
    example = os.path.join(ROOT, "examples", "slurm_job.toml")
    code = ("import sys\n"
            "for m in ('torch', 'tensorflow', 'mpi4py', 'horovod'):\n"
            "    sys.modules[m] = None  # importing it now fails\n"
            "from hpctrain.cli.main import main\n"
            f"sys.argv = ['hpctrain', 'render', {example!r}]\n"
            "main()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("#!/bin/bash\n") and "#SBATCH --nodes=2\n" in p.stdout


@pytest.mark.parametrize("uri", ["ftp://host/x", "sftp://host/x"])
def test_an_unknown_storage_uri_is_refused_with_a_hint_and_nothing_is_created(tmp_path, uri):
    """Was: a local ``./ftp:/host/x`` directory, silently."""
    before = sorted(os.listdir(tmp_path))
    p = hpctrain("run", QUICKSTART, "--set", f"run.storage_path={uri}", cwd=str(tmp_path))
    assert p.returncode == 2, p.stderr
    assert ("run.storage_path: expected a path on a shared filesystem or a storage URI "
            f"(s3://, gs://, gcs://, abfs://, abfss://, hdfs://), got {uri!r}") in p.stderr
    assert "is not supported\nHINT: use a directory on the shared filesystem" in p.stderr
    assert sorted(os.listdir(tmp_path)) == before
