"""The lines a user sees while a sweep runs go through logging (the ``hpctrain.progress``
logger) and still show by default exactly as print() showed them; an application
silences or routes them with logging alone."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from helpers import ROOT

SCRIPT = textwrap.dedent("""\
    import logging, sys
    import hpctrain
    from hpctrain import RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer
    from hpctrain.tune import TuneConfig, Tuner

    def train(config):
        hpctrain.report({"x": config["a"]})

    mode = sys.argv[2]
    if mode == "quiet":
        logging.getLogger("hpctrain.progress").setLevel(logging.WARNING)
    elif mode == "routed":
        routed = logging.getLogger("hpctrain.progress")
        handler = logging.FileHandler(sys.argv[3])
        handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        routed.handlers[:] = [handler]
    trainer = TorchTrainer(train, scaling_config=ScalingConfig(num_workers=0))
    Tuner(trainer, param_space={"train_loop_config": {"a": 1}},
          tune_config=TuneConfig(max_concurrent_trials=1),
          run_config=RunConfig(name="sw", storage_path=sys.argv[1])).fit()
    """)


def _sweep(tmp_path, mode, *extra):
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / mode), mode, *extra],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 0, p.stderr
    return p


def test_a_sweeps_progress_lines_show_by_default_and_obey_logging(tmp_path):
    p = _sweep(tmp_path, "default")
    sweep = tmp_path / "default" / "sw"
    assert p.stdout.splitlines() == [
        f"[hpctrain] sweep sw: 1 of 1 trials to run here, 1 at a time ({sweep})"]
    assert p.stderr.splitlines() == ["[hpctrain] trial_00000 FINISHED (1 of 1): x=1"]

    quiet = _sweep(tmp_path, "quiet")
    assert quiet.stdout == "" and quiet.stderr == ""

    log = tmp_path / "progress.log"
    routed = _sweep(tmp_path, "routed", str(log))
    assert routed.stdout == "" and routed.stderr == ""
    assert log.read_text().splitlines() == [
        f"hpctrain.progress INFO [hpctrain] sweep sw: 1 of 1 trials to run here, 1 at a time "
        f"({tmp_path / 'routed' / 'sw'})",
        "hpctrain.progress INFO [hpctrain] trial_00000 FINISHED (1 of 1): x=1"]
