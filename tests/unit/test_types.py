"""The type checker in the test command: mypy, strict on the public API's modules (the
``[tool.mypy]`` section of pyproject.toml names them), must pass; and what it buys a
user: a wrongly typed argument to a trainer is caught before anything runs."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from helpers import ROOT

pytest.importorskip("mypy", reason="mypy is in the dev extra (pip install -e '.[dev]')")


def _mypy(*args: str, cwd: str = ROOT) -> subprocess.CompletedProcess:
    # MYPYPATH: this checkout's hpctrain, whatever an editable install points at
    env = dict(os.environ, MYPYPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=280)


def test_the_public_api_type_checks_strictly():
    p = _mypy("--config-file", os.path.join(ROOT, "pyproject.toml"))
    assert p.returncode == 0, f"mypy found type errors:\n{p.stdout}{p.stderr}"
    assert "Success: no issues found" in p.stdout


def test_a_user_script_with_a_wrong_argument_type_is_caught(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        from hpctrain import RunConfig, ScalingConfig
        from hpctrain.torch import TorchTrainer

        def train_func(config: dict) -> None:
            pass

        trainer = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
                               run_config="exp")
        status: int = trainer.submit().status()
        """))
    p = _mypy("--config-file", os.path.join(ROOT, "pyproject.toml"), str(script),
              cwd=str(tmp_path))
    assert p.returncode == 1, p.stdout + p.stderr
    assert 'Argument "run_config" to "TorchTrainer" has incompatible type "str"; ' \
           'expected "RunConfig | None"' in p.stdout, p.stdout
    assert 'Incompatible types in assignment (expression has type "JobStatus", variable ' \
           'has type "int")' in p.stdout, p.stdout
