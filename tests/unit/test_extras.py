"""The install extras say what each feature needs and nothing more: `hpctrain plot` is
`[plot]` (matplotlib alone), the tracking callbacks `[tracking]` (a public TensorBoard
writer, no matplotlib); the pages that name them agree."""
from __future__ import annotations

import os

from helpers import ROOT

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib


def _extras():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def test_plot_needs_matplotlib_alone_and_tracking_no_plotting():
    extras = _extras()
    assert extras["plot"] == ["matplotlib"]
    tracking = [r.split(">")[0].split("<")[0] for r in extras["tracking"]]
    assert tracking == ["tensorboardX", "mlflow-skinny", "wandb"]
    cli = open(os.path.join(ROOT, "docs", "cli.md"), encoding="utf-8").read()
    assert "Needs matplotlib alone (`pip install '.[plot]'`)." in cli
