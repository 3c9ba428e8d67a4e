"""Goodput from the run's own records: a local run stopped twice by the warning signal
and started again (three allocations, with a wait between them) is broken down into
queue, start-up, checkpoint, lost work and productive time that add up to its wall time."""
import os
import signal
import subprocess
import sys
import time

from helpers import cli, run_state, wait_for, workload, write_job
from hpctrain._internal.rundir.goodput import PARTS, goodput
from hpctrain._internal.rundir.layout import RunDir, read_results

WAIT_S = 2.0  # between a stop and the next start: the "queue" of the next allocation


def _rows(run):
    return read_results(os.path.join(run, "result.json")) if os.path.exists(
        os.path.join(run, "result.json")) else []


def test_the_breakdown_adds_up_to_the_wall_time_across_two_requeues(tmp_path):
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
