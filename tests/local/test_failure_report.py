"""One failure report: four ranks raising the same error show its traceback once on the
console (the other ranks one line each), the error names every rank that raised it, the
worker entry's own frames are gone, and each rank's log keeps its whole traceback."""
import glob
import os
import subprocess
import sys
import textwrap

import pytest

from helpers import ROOT

SCRIPT = textwrap.dedent('''
    import sys, torch.distributed as dist
    from hpctrain import RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    def lookup(key):
        return {"a": 1}[key]

    def train_func(config):
        dist.barrier(); lookup("b")  # every rank raises (none is still starting)

    TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=4),
                 run_config=RunConfig(name="fails", storage_path=sys.argv[1])).fit()
''')


@pytest.mark.slow
def test_four_ranks_raising_the_same_error_show_one_traceback_with_their_ranks(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    storage = tmp_path / "runs"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    p = subprocess.run([sys.executable, str(script), str(storage)], capture_output=True,
                       text=True, timeout=180, cwd=tmp_path, env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    # the user's frame: once in the ranks' echo, once in the error fit() raised (it was 5)
    assert out.count(f'File "{script}", line 10, in train_func') == 2, out
    assert out.count("[the same traceback as rank") == 3, out
    assert "ranks 0-3 raised the same error" in out
    assert "worker/entry.py" not in out and "call_train_func" not in out
    logs = sorted(glob.glob(str(storage / "fails" / "logs" / "*" / "rank-*.out")))
    assert len(logs) == 4
    for log in logs:  # every rank's log keeps its own traceback, whole
        text = open(log).read()
        assert "Traceback (most recent call last):" in text and "KeyError: 'b'" in text
        assert 'in lookup' in text
