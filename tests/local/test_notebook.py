"""``fit()`` from a Jupyter notebook: a real kernel (ipykernel) runs the notebook through
nbclient, as ``jupyter nbconvert --execute`` does, and the executed notebook is read back."""
import json
import textwrap

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("ipywidgets")

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

SETUP = """\
import time
import warnings
import hpctrain
from hpctrain import RunConfig, ScalingConfig
from hpctrain.torch import TorchTrainer

# the test machine has sbatch on PATH: this notebook trains here on purpose
warnings.filterwarnings("ignore", category=hpctrain.errors.LoginNodeWarning)

def train_func(config):
    # defined in the notebook (its __main__): cloudpickle carries it to the ranks
    if hpctrain.get_context().get_world_rank() == 0:
        print("hello from rank 0", flush=True)
    for i in range(4):
        hpctrain.report({"loss": 1.0 / (i + 1), "step": i})
        time.sleep(0.3)

def fit(name):
    return TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(name=name, storage_path=STORAGE)).fit()
"""

FIT = """\
result = fit("nb-widgets")
print("final loss", result.metrics["loss"])
"""

# the kernel as it is without ipywidgets: rich would warn on every refresh
FIT_WITHOUT_IPYWIDGETS = """\
import sys, warnings
sys.modules["ipywidgets"] = None
warnings.simplefilter("always")
result = fit("nb-plain")
print("final loss", result.metrics["loss"])
"""


def _stream(cell, name="stdout"):
    return "".join(o["text"] for o in cell.outputs
                   if o["output_type"] == "stream" and o["name"] == name)


def _html_in_widgets(nb):
    """The HTML that rich drew into each ipywidgets Output (nbclient keeps the widgets'
    state, with their outputs, in the notebook's metadata, as Jupyter saves it)."""
    state = nb.metadata["widgets"][WIDGET_STATE]["state"]
    return {model_id: [o["data"]["text/html"] for o in w["state"].get("outputs", [])
                       if "text/html" in o.get("data", {})]
            for model_id, w in state.items() if w["model_name"] == "OutputModel"}


def test_fit_in_a_notebook_draws_rich_live_table_and_plain_lines_without_ipywidgets(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"STORAGE = {str(tmp_path / 'runs')!r}\n" + SETUP),
                nbformat.v4.new_code_cell(FIT),
                nbformat.v4.new_code_cell(FIT_WITHOUT_IPYWIDGETS)]
    # kernel "python3": ipykernel's own spec, or jupyter_client's built-in one for the
    # interpreter that runs the tests when none is installed; PYTHONPATH is inherited
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=120,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError when a cell fails
    _, widgets_cell, plain_cell = nb.cells

    # with ipywidgets: the progress is one Output widget showing rich's table
    views = [o for o in widgets_cell.outputs
             if o["output_type"] == "display_data" and WIDGET_VIEW in o["data"]]
    assert len(views) == 1, json.dumps(widgets_cell.outputs, indent=1)[:3000]
    html = _html_in_widgets(nb)[views[0]["data"][WIDGET_VIEW]["model_id"]]
    assert len(html) == 1  # redrawn in place: the last table is what is kept
    table = html[0]
    assert "hpctrain · nb-widgets" in table
    for column in ("iteration", "elapsed", "loss", "step", "checkpoint"):
        assert column in table
    assert "0.25" in table  # the last report: loss 1/4 at iteration 4
    out = _stream(widgets_cell)
    assert "[hpctrain] iter" not in out
    assert "(rank 0) hello from rank 0" in out  # the ranks' output stays cell text
    assert out.rstrip().endswith("final loss 0.25")
    assert _stream(widgets_cell, "stderr") == ""

    # without ipywidgets: plain progress lines, and no warning about ipywidgets
    assert not [o for o in plain_cell.outputs if o["output_type"] == "display_data"]
    out = _stream(plain_cell)
    assert "[hpctrain] iter 4 | " in out and "loss=0.25" in out
    assert out.rstrip().endswith("final loss 0.25")
    assert "ipywidgets" not in _stream(plain_cell, "stderr")
