"""Training functions for the scheduler and search tests (tests/local/test_tune_schedulers.py,
tests/cluster/test_slurm_tune_schedulers.py): toy objectives, one report (with a checkpoint of
the state) per step."""
import json
import os
import time

import hpctrain



#: A job file's ASHA sweep over ``quality`` (4 trials, q best first; 8 reports each).
ASHA_SWEEP_TOML = """[sweep.scheduler]
type = "asha"
max_t = 8
grace_period = 1
reduction_factor = 2
[sweep.param_space]
q = {grid_search = [0.7, 0.5, 0.3, 0.1]}
steps = 8
"""


def _restored(default):
    ckpt = hpctrain.get_checkpoint()
    if ckpt is None:
        return dict(default)
    with ckpt.as_directory() as d:
        with open(os.path.join(d, "state.txt")) as f:
            step, value = f.read().split()
    return {"step": int(step), "value": float(value)}


def _save(state):
    d = hpctrain.get_context().get_checkpoint_staging_dir()
    with open(os.path.join(d, "state.txt"), "w") as f:
        f.write(f"{state['step']} {state['value']}")
    return hpctrain.Checkpoint.from_directory(d)


def quality(config):
    """loss = (1 - q) + 1/step: trials with a higher ``q`` are better at every step (the
    ranking at any rung is the final ranking); with ``delay``, weaker trials start later. ``steps`` reports, one checkpoint each;
    ``sleep`` seconds between them."""
    state = _restored({"step": 0, "value": 0.0})
    if state["step"] == 0:  # weaker trials start later (``delay`` s per 0.1 of q missing)
        time.sleep(config.get("delay", 0.0) * round((1.0 - config["q"]) * 10))
    for step in range(state["step"] + 1, config.get("steps", 8) + 1):
        time.sleep(config.get("sleep", 0.0))
        loss = (1.0 - config["q"]) + 1.0 / step
        hpctrain.report({"loss": loss, "q": config["q"]},
                        checkpoint=_save({"step": step, "value": loss}))


def climb(config):
    """PBT's toy: ``value`` grows by ``lr`` per step while lr ≤ 2 and falls by lr above
    it. A population started at low lrs reaches a high ``value`` only by exploiting and
    perturbing lr upwards. With ``meet`` (a directory) and ``population``, a trial's first
    start waits (60 s at most) until the whole population has started: on a loaded machine
    the trials' processes start seconds apart, and a trial that ends before the others
    reach their first perturbation leaves them nothing but its final state to exploit."""
    state = _restored({"step": 0, "value": 0.0})
    if state["step"] == 0 and config.get("meet"):
        _meet(config["meet"], config["population"])
    value = state["value"]
    for step in range(state["step"] + 1, config.get("steps", 24) + 1):
        time.sleep(config.get("sleep", 0.0))
        lr = config["lr"]
        value += lr if lr <= 2.0 else -lr
        hpctrain.report({"value": value, "lr": lr},
                        checkpoint=_save({"step": step, "value": value}))


def climb_ranks(config):
    """``climb`` on every rank of a trainer (rank 0 saves the checkpoints), with each
    process's start and end times appended to ``config["log"]`` (one line each: the
    trial's name, the rank, the time)."""
    ctx = hpctrain.get_context()
    _log_time(config["log"], ctx)  # (an attempt stopped for an exploit logs no end)
    state = _restored({"step": 0, "value": 0.0})
    if state["step"] == 0 and config.get("meet"):
        _meet(config["meet"], config["population"], config.get("meet_timeout", 60.0))
    value = state["value"]
    for step in range(state["step"] + 1, config["steps"] + 1):
        time.sleep(config["sleep"])
        lr = config["lr"]
        value += lr if lr <= 2.0 else -lr
        checkpoint = _save({"step": step, "value": value}) if ctx.get_world_rank() == 0 else None
        hpctrain.report({"value": value, "lr": lr}, checkpoint=checkpoint)
    _log_time(config["log"], ctx)


def _log_time(path, ctx):
    with open(path, "a") as f:
        f.write(json.dumps({"trial": ctx.get_trial_name(), "rank": ctx.get_world_rank(),
                            "time": time.time()}) + "\n")


def _meet(directory, population, timeout=60.0):
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, str(os.getpid())), "w").close()
    deadline = time.monotonic() + timeout
    while len(os.listdir(directory)) < population and time.monotonic() < deadline:
        time.sleep(0.05)


def quadratic(config):
    """Optuna's toy: loss = (x - 3)^2 + (y + 1)^2, reported twice."""
    for _ in range(2):
        time.sleep(config.get("sleep", 0.0))
        hpctrain.report({"loss": (config["x"] - 3) ** 2 + (config["y"] + 1) ** 2})
