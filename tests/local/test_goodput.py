"""Goodput from the run's own records: a local run stopped twice by the warning signal
and started again (three allocations, with a wait between them) is broken down into
queue, start-up, checkpoint, lost work and productive time that add up to its wall time."""
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import cli, run_state, wait_for, workload, write_job
from hpctrain.rundir.goodput import PARTS, goodput
from hpctrain.rundir.layout import RunDir, read_results
from hpctrain.cli.views import GOODPUT_LABELS, plot_goodput

WAIT_S = 2.0  # between a stop and the next start: the "queue" of the next allocation


def _rows(run):
    return read_results(os.path.join(run, "result.json")) if os.path.exists(
        os.path.join(run, "result.json")) else []


@pytest.fixture(scope="module")
def requeued_twice(tmp_path_factory):
    """A run stopped twice by the warning signal and started again (three allocations)."""
    tmp_path = tmp_path_factory.mktemp("goodput")
    job = write_job(tmp_path, "gp", entrypoint=workload("health_workloads:steady"),
                    storage=tmp_path / "runs", site="local", verbose=0,
                    scaling={"num_workers": 1}, config={"steps": 24, "step_s": 0.25})
    run = str(tmp_path / "runs" / "gp")
    for stop_after in (4, 12):  # reports done when the warning comes
        p = subprocess.Popen([sys.executable, "-m", "hpctrain.cli", "run", job],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: len(_rows(run)) >= stop_after, 120, "reports", proc=p)
        p.send_signal(signal.SIGUSR1)
        assert p.wait(60) == 75, p.stderr.read()
        time.sleep(WAIT_S)
    cli("run", job)
    return run


def test_the_breakdown_adds_up_to_the_wall_time_across_two_requeues(requeued_twice):
    run = requeued_twice
    state = run_state(run)
    assert [a["outcome"] for a in state["attempts"]] == ["PREEMPTED", "PREEMPTED", "FINISHED"]
    kept = {os.path.basename(r.path): r.metadata for r in RunDir(run).list_checkpoints()}
    report = goodput(state, read_results(RunDir(run).result_file), kept)
    wall = state["attempts"][-1]["ended"] - state["created"]
    total = report["total"]
    assert abs(total["wall"] - wall) < 0.01
    assert abs(sum(total[k] for k in PARTS) - wall) < 0.02
    for a in report["attempts"]:
        assert all(a[k] >= 0 for k in PARTS), a
        assert abs(sum(a[k] for k in PARTS) - a["wall"]) < 0.01
    first, second, third = report["attempts"]
    assert first["queue"] < 1.0 and second["queue"] >= WAIT_S and third["queue"] >= WAIT_S
    # 24 steps of 0.25 s each were done once (a clean stop loses none; the start of the
    # first report of an attempt is known to a second)
    assert 24 * 0.25 - 3 <= total["productive"] + total["checkpoint"] <= wall
    assert total["checkpoint"] < total["productive"]
    assert all(a["startup"] > 0 for a in report["attempts"])
    shown = cli("results", run).stdout
    assert f"goodput {report['goodput']:.1%} of {total['wall']:.1f} s wall time" in shown
    assert f"  attempt 2 (PREEMPTED, job {second['job_id']}" in shown


def test_plot_goodput_draws_a_stacked_bar_per_attempt_that_adds_up_to_the_wall_time(
        requeued_twice, tmp_path):
    """``hpctrain plot RUN --goodput`` writes the figure (PNG or SVG); the bars' numbers,
    read back from the figure, are each attempt's parts and add up to the run's wall
    time."""
    run = requeued_twice
    state = run_state(run)
    wall = state["attempts"][-1]["ended"] - state["created"]
    out = tmp_path / "goodput.svg"
    shown = cli("plot", run, "--goodput", "-o", str(out)).stdout
    assert out.read_text().lstrip().startswith("<?xml") and "<svg" in out.read_text()
    assert shown.splitlines()[-1] == f"wrote {out}"
    assert shown.startswith("goodput: gp (3 attempts: ")
    drawn = plot_goodput([run], str(tmp_path / "goodput.png"))["gp"]
    assert (tmp_path / "goodput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(drawn) == ["attempt 1", "attempt 2", "attempt 3"]
    report = goodput(state, read_results(RunDir(run).result_file),
                     {os.path.basename(r.path): r.metadata
                      for r in RunDir(run).list_checkpoints()})
    for bar, a in zip(drawn.values(), report["attempts"]):
        assert list(bar) == list(GOODPUT_LABELS)  # every part, bottom to top
        assert bar == pytest.approx({k: a[k] for k in GOODPUT_LABELS}, abs=1e-9)
        assert abs(sum(bar.values()) - a["wall"]) < 0.01
    assert abs(sum(sum(bar.values()) for bar in drawn.values()) - wall) < 0.02
    assert drawn["attempt 2"]["queue"] >= WAIT_S


def test_plot_goodput_refuses_metric_and_goodput_together(requeued_twice):
    bad = cli("plot", requeued_twice, "--goodput", "--metric", "step", check=False)
    assert bad.returncode == 2
    assert ("hpctrain plot: expected --metric M (curves) or --goodput (the goodput "
            "breakdown), not both") in bad.stderr
