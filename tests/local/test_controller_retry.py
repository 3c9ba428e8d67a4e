"""Calls to a batch system's controller retry while it is busy (a wrapper command on PATH
that answers as a loaded slurmctld does, then as the real one), and only then."""
import logging
import os
import time

import pytest

from helpers import hpctrain_log_to

from hpctrain.errors import ConfigError
from hpctrain.schedulers import get_scheduler
from hpctrain.schedulers.controller import (ControllerBusyError, retry_budget,
                                            run_controller)

BUSY = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"


def flaky(bin_dir, name, *, failures, message, then="echo 4242"):
    """``bin_dir/name``: fails ``failures`` times with ``message`` on stderr, then runs
    ``then``; each call appends a line to ``bin_dir/name.calls``."""
    bin_dir.mkdir(exist_ok=True)
    calls = bin_dir / f"{name}.calls"
    script = bin_dir / name
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{calls}"\n'
        f'n=$(wc -l < "{calls}")\n'
        f'if [ "$n" -le {failures} ]; then echo "{message}" >&2; exit 1; fi\n'
        f"{then}\n")
    script.chmod(0o755)
    return calls


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    d = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}{os.environ['PATH']}")
    for var in ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "HPCTRAIN_CONTROLLER_RETRY_S"):
        monkeypatch.delenv(var, raising=False)
    return d


def test_a_busy_controller_is_asked_again_with_backoff_and_each_retry_logged(bin_dir, caplog,
                                                                            monkeypatch):
    hpctrain_log_to(caplog, monkeypatch)
    calls = flaky(bin_dir, "sbatch", failures=2, message=BUSY)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="hpctrain"):
        p = run_controller(["sbatch", "--parsable", "job.sh"], text=True)
    assert p.returncode == 0 and p.stdout == "4242\n" and p.retries == 2
    assert calls.read_text() == "--parsable job.sh\n" * 3
    assert 3.0 <= time.monotonic() - start < 10  # 1 s, then 2 s
    retries = [r.getMessage().partition(" (giving up ")
               for r in caplog.records if "transient" in r.getMessage()]
    assert [r[0] for r in retries] == [  # (the default bound at a prompt: 60 s in all)
        f"`sbatch --parsable`: {BUSY} (transient); retry 1 in 1.0 s",
        f"`sbatch --parsable`: {BUSY} (transient); retry 2 in 2.0 s"]
    assert [57 <= int(r[2].split()[0]) <= 60 for r in retries] == [True, True]


def test_a_real_refusal_is_not_retried(bin_dir):
    calls = flaky(bin_dir, "sbatch", failures=5, message=(
        "sbatch: error: Batch job submission failed: Invalid account or account/partition "
        "combination specified"))
    p = run_controller(["sbatch", "job.sh"], text=True)
    assert p.returncode == 1 and p.retries == 0 and calls.read_text().count("\n") == 1


def test_the_total_wait_is_bounded(bin_dir, monkeypatch):
    flaky(bin_dir, "qsub", failures=1000, message="qsub: cannot connect to server pbs (errno=15010)")
    monkeypatch.setenv("HPCTRAIN_CONTROLLER_RETRY_S", "2.5")
    start = time.monotonic()
    with pytest.raises(ControllerBusyError) as info:
        run_controller(["qsub", "job.sh"], raise_when_busy=True, text=True)
    assert 2.5 <= time.monotonic() - start < 5
    assert str(info.value) == (
        "`qsub job.sh`: the batch system's controller kept answering 'qsub: cannot connect "
        "to server pbs (errno=15010)' for 2.5 s (3 tries); it may be overloaded: try again "
        "later ($HPCTRAIN_CONTROLLER_RETRY_S bounds the wait)")
    # a state query gives its last answer instead (the caller says UNKNOWN)
    monkeypatch.setenv("HPCTRAIN_CONTROLLER_RETRY_S", "0")
    assert run_controller(["qsub", "x"], text=True).returncode == 1


def test_the_budget_inside_a_job_and_at_a_prompt_and_a_bad_value():
    assert retry_budget({}) == 60 and retry_budget({"SLURM_JOB_ID": "7"}) == 300
    assert retry_budget({"PBS_JOBID": "1.pbs", "HPCTRAIN_CONTROLLER_RETRY_S": "0"}) == 0
    with pytest.raises(ConfigError) as info:
        retry_budget({"HPCTRAIN_CONTROLLER_RETRY_S": "soon"})
    assert str(info.value) == ("$HPCTRAIN_CONTROLLER_RETRY_S: expected a number of seconds "
                               ">= 0, got 'soon'\nHINT: e.g. 300; 0 turns the retries off")


def test_slurm_resubmission_and_requeue_survive_a_busy_controller(bin_dir, tmp_path):
    """What the batch step calls to continue a run: sbatch --dependency, scontrol requeue."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n")
    sbatch = flaky(bin_dir, "sbatch", failures=1, message=BUSY, then="echo '77;cluster'")
    slurm = get_scheduler("slurm")
    assert slurm.resubmit(str(script), after="76") == "77"
    assert sbatch.read_text() == f"--parsable --dependency=afterany:76 {script}\n" * 2
    scontrol = flaky(bin_dir, "scontrol", failures=2, then="exit 0", message=(
        "slurm_requeue error: Unable to contact slurm controller (connect failure)"))
    assert slurm.requeue("76", str(script)) is None
    assert scontrol.read_text() == "requeue 76\n" * 3


def test_a_requeue_that_went_through_during_a_timeout_is_not_an_error(bin_dir, tmp_path):
    """The first call timed out, yet slurmctld requeued the job: the retry finds it
    pending, which is a success (a second chain must never start)."""
    calls = flaky(bin_dir, "scontrol", failures=1, message=(
        "slurm_requeue error: Socket timed out on send/recv operation"),
        then="echo 'Requeue of JobId=76 returned an error: Job is pending execution' >&2; "
             "exit 1")
    assert get_scheduler("slurm").requeue("76", str(tmp_path / "job.sh")) is None
    assert calls.read_text() == "requeue 76\n" * 2


def test_pbs_resubmission_survives_a_busy_server(bin_dir, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n")
    qsub = flaky(bin_dir, "qsub", failures=2, then="echo 12.pbshost", message=(
        "Connection refused\nqsub: cannot connect to server pbshost (errno=111)"))
    assert get_scheduler("pbs").resubmit(str(script), after=None) == "12.pbshost"
    assert qsub.read_text().count("\n") == 3
