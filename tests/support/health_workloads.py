"""Training functions that fail the same way on every attempt, for the retry budgets
(tests/local/test_budgets.py, tests/cluster/test_slurm_budgets.py). No framework: they
start fast."""
import os
import signal
import socket
import subprocess
import tempfile
import time

import hpctrain


def misbehave(config):
    """Rank 0 reports once, with a checkpoint on the attempts (0-based) listed in
    ``config["checkpoint_on"]``, then every rank fails as ``config["how"]`` says:
    ``"raise"`` (an exception of the training code), ``"kill"`` (SIGKILL: no traceback,
    as a lost node or the OOM killer), ``"hang"`` (sleeps without a report)."""
    attempt = int(os.environ["HPCTRAIN_RESTART_COUNT"])
    if attempt in config.get("checkpoint_on", []):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.txt"), "w") as f:
                f.write(str(attempt))
            hpctrain.report({"attempt": attempt},
                            checkpoint=hpctrain.Checkpoint.from_directory(d))
    else:
        hpctrain.report({"attempt": attempt})
    how = config["how"]
    if how == "raise":
        raise ValueError(f"bad batch in attempt {attempt}")
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "hang":
        time.sleep(3600)


def _node():
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def flaky_node(config):
    """One rank. Attempt 0: killed (no traceback: its node is blamed). Attempt 1 (same
    allocation): commits a checkpoint, then asks for the scheduler's warning (``scancel
    --batch --signal=USR1``) and reports until stopped: the run is continued in a new
    allocation. Attempt 2: reports where it runs and ends."""
    attempt = int(os.environ["HPCTRAIN_RESTART_COUNT"])
    if attempt == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    for step in range(200):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step.txt"), "w") as f:
                f.write(str(step))
            hpctrain.report({"attempt": attempt, "node": _node(), "step": step},
                            checkpoint=hpctrain.Checkpoint.from_directory(d))
        if attempt >= 2:
            return
        if step == 0:
            subprocess.run(["scancel", "--batch", "--signal=USR1",
                            os.environ["SLURM_JOB_ID"]], check=True)
        time.sleep(0.5)


def slow_rank(config):
    """Every rank reports ``config["steps"]`` times; before each report rank
    ``config["slow_rank"]`` works ``config["slow_s"]`` seconds, the others
    ``config["fast_s"]`` (every report is an agreement: the ranks move in lock step)."""
    slow = hpctrain.get_context().get_world_rank() == config["slow_rank"]
    for step in range(config["steps"]):
        time.sleep(config["slow_s"] if slow else config["fast_s"])
        hpctrain.report({"step": step})


def steady(config):
    """``config["steps"]`` steps of ``config["step_s"]`` seconds, a checkpoint at every
    report, resumed from the latest one; each checkpoint takes ``config["checkpoint_s"]``
    (default 0) inside ``report()``, as a framework's checkpoint written there does."""
    start = 0
    checkpoint = hpctrain.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            with open(os.path.join(d, "step.txt")) as f:
                start = int(f.read()) + 1
    for step in range(start, config["steps"]):
        time.sleep(config["step_s"])
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step.txt"), "w") as f:
                f.write(str(step))
            checkpoint = hpctrain.Checkpoint.from_directory(d)
            if config.get("checkpoint_s"):
                # the hook hpctrain.torch's state checkpoints write their files in
                checkpoint._complete = lambda: time.sleep(config["checkpoint_s"])
            hpctrain.report({"step": step}, checkpoint=checkpoint)
