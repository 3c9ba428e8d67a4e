"""The TensorBoard callback writes its event files with a public writer (tensorboardX's
SummaryWriter, not tensorboard's private record writer), and TensorBoard's own reader
reads them back: every numeric metric a scalar at its report's iteration."""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap
import types

import pytest
from helpers import ROOT

pytest.importorskip("tensorboardX", reason="hpctrain[tracking] is not installed")
pytest.importorskip("tensorboard", reason="TensorBoard's reader is in the dev extra")

WRITE = textwrap.dedent("""\
    import os, sys, types
    from hpctrain.callbacks import TensorBoardLoggerCallback

    cb = TensorBoardLoggerCallback()
    cb.setup(types.SimpleNamespace(path=sys.argv[1]))
    cb.on_results([{"loss": 2.0, "acc": 0.5, "_training_iteration": 1, "_timestamp": 100.0},
                   {"loss": 1.5, "nested": {"m": 3}, "_training_iteration": 2,
                    "_timestamp": 101.0, "note": "text"}])
    cb.on_end("FINISHED")
    private = [m for m in sys.modules if m.startswith("tensorboard.summary.writer")
               or m == "tensorflow"]
    print(private)
    print(os.getpid())
    """)


def test_tensorboards_reader_reads_the_callbacks_events_back(tmp_path):
    p = subprocess.run([sys.executable, "-c", WRITE, str(tmp_path)], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 0, p.stderr
    private, pid = p.stdout.strip().splitlines()
    assert private == "[]", f"the writer imported {private}"
    files = glob.glob(str(tmp_path / "tensorboard" / "events.out.tfevents.*"))
    assert len(files) == 1 and files[0].endswith(f".{pid}"), files  # one file per process

    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("notf"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(tmp_path / "tensorboard"))
    ea.Reload()
    scalars = {tag: [(s.step, s.wall_time, s.value) for s in ea.Scalars(tag)]
               for tag in ea.Tags()["scalars"]}
    assert scalars == {"loss": [(1, 100.0, 2.0), (2, 101.0, 1.5)], "acc": [(1, 100.0, 0.5)],
                       "nested/m": [(2, 101.0, 3.0)]}
