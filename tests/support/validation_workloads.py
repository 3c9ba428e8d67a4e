"""Training and validation functions of the asynchronous-validation tests
(tests/local/test_validation.py, tests/cluster/test_slurm_validation.py)."""
import json
import os
import tempfile

import hpctrain
from hpctrain import Checkpoint, ValidationTaskConfig


def _checkpoint(**content):
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "state.json"), "w") as f:
        json.dump(content, f)
    return Checkpoint.from_directory(d)


def train_four(config):
    """Four checkpoints whose reported accuracy ranks them 0 > 3 > 1 > 2, and whose
    hidden quality (the validation's accuracy) ranks them 1 > 2 > 3 > 0."""
    reported = [0.9, 0.5, 0.1, 0.2]
    hidden = config.get("hidden", [0.1, 0.95, 0.3, 0.2])
    for i in range(4):
        validation = True if i else ValidationTaskConfig(fn_kwargs={"tag": "first"})
        hpctrain.report({"loss": float(4 - i), "accuracy": reported[i]},
                        checkpoint=_checkpoint(step=i, quality=hidden[i]),
                        validation=validation)


def validate_quality(checkpoint, tag="default"):
    """The validation: the checkpoint's hidden quality as its accuracy; a quality of -1
    is a checkpoint the validation cannot read."""
    with open(os.path.join(checkpoint.path, "state.json")) as f:
        state = json.load(f)
    if state["quality"] == -1:
        raise ValueError(f"cannot evaluate step {state['step']}")
    return {"accuracy": state["quality"], "tag": tag,
            "job": os.environ.get("SLURM_JOB_ID", ""), "pid": os.getpid()}


def train_validation_without_config(config):
    hpctrain.report({"loss": 1.0}, checkpoint=_checkpoint(step=0, quality=0), validation=True)


def train_one_validated(config):
    """A sweep's trial: two checkpoints, both validated; the validation's accuracy is
    the trial's x times the step."""
    for i in range(2):
        hpctrain.report({"loss": 1.0 / (i + 1), "x": config["x"]},
                        checkpoint=_checkpoint(step=i, quality=config["x"] * (i + 1)),
                        validation=True)


def train_sees_its_validation(config):
    """Reports one validated checkpoint, then keeps training until
    get_all_reported_checkpoints() shows it VALIDATED (the validation runs beside the
    training, not in it); records the statuses it saw."""
    import time

    hpctrain.report({"accuracy": 0.0}, checkpoint=_checkpoint(step=0, quality=0.7),
                    validation=True)
    seen, deadline = [], time.time() + 60
    while time.time() < deadline:
        (reported,) = hpctrain.get_all_reported_checkpoints()
        if not seen or seen[-1] != reported.status.value:
            seen.append(reported.status.value)
        if reported.status.value == "VALIDATED":
            break
        time.sleep(0.05)
    hpctrain.report({"seen": seen, "validated_accuracy": reported.metrics["accuracy"]})


def train_reads_its_metrics_file(config):
    """Two ranks; rank 0 waits (at most 20 s) until the run's metrics file says RUNNING,
    then every rank reports with a checkpoint that takes a known time to hand in."""
    import time

    ctx = hpctrain.get_context()
    seen = ""
    if ctx.get_world_rank() == 0:
        path = os.path.join(ctx.get_run_dir(), "metrics.prom")
        deadline = time.time() + 20
        while time.time() < deadline and 'controller_state="RUNNING"} 1' not in seen:
            try:
                with open(path) as f:
                    seen = f.read()
            except FileNotFoundError:
                pass
            time.sleep(0.1)
    for i in range(2):
        hpctrain.report({"i": i, "saw_running": 'controller_state="RUNNING"} 1' in seen},
                        checkpoint=_checkpoint(step=i, quality=0))


def fail_once(config):
    """Fails in its first attempt, after one report; the second attempt finishes."""
    ctx = hpctrain.get_context()
    hpctrain.report({"i": 0})
    if ctx.get_world_rank() == 0 and not os.path.exists(
            os.path.join(ctx.get_run_dir(), "failed-once")):
        open(os.path.join(ctx.get_run_dir(), "failed-once"), "w").close()
        raise RuntimeError("the first attempt fails")
