"""PBS submission and job state (hpctrain.schedulers.pbs_submitit): qsub output, qstat JSON.

No PBS server can be installed from the package registries these machines reach, so
these tests run against fake ``qsub``/``qstat``/``qdel`` executables (tests/support/fake_pbs/),
put first on PATH. They stand in for a server we cannot install and reproduce the
outputs and exit codes recorded from a live OpenPBS 23.06 server in
``shared/notes/pbs-facts.md`` (job id on qsub's stdout; ``qstat -f -F json`` layout;
exit 153 for an unknown id, 35 for a finished job without ``-x``, no job at all for
``-x`` on a server without history; 256+N for a job killed by signal N, -29 for a
walltime kill). tests/cluster/test_pbs_server.py runs the same paths against a real server.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from submitit.core import utils

from hpctrain.schedulers import pbs_submitit as pbs
from hpctrain.schedulers.pbs_submitit import (
    PbsExecutor, PbsInfoWatcher, PbsJob, parse_qsub_output, pbs_state,
)
from helpers import SUPPORT

FAKE_DIR = Path(SUPPORT) / "fake_pbs"
_spec = importlib.util.spec_from_file_location("_fakepbs", FAKE_DIR / "_fakepbs.py")
assert _spec is not None and _spec.loader is not None
fakepbs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fakepbs)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A fresh fake server; a fresh watcher so job ids (1.pbshost...) never collide across tests."""
    server = fakepbs.FakePbs.install(
        tmp_path / "pbs_state", monkeypatch,
        clear=("PBS_", "OMPI_", "PMI_", "PALS_"),
        clear_names=("SGE_ROOT", "MPI_LOCALRANKID"))
    monkeypatch.setattr(PbsJob, "watcher", PbsInfoWatcher(delay_s=1))
    return server


def _qstat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["qstat", "-f", "-F", "json", *args], capture_output=True, check=False)


# ------------------------------------------------------------------ pure functions

@pytest.mark.parametrize("job, expected", [
    ({"job_state": "Q"}, "PENDING"),
    ({"job_state": "H"}, "PENDING"),
    ({"job_state": "W"}, "PENDING"),
    ({"job_state": "T"}, "PENDING"),
    ({"job_state": "S"}, "PENDING"),
    ({"job_state": "U"}, "PENDING"),
    ({"job_state": "R"}, "RUNNING"),
    ({"job_state": "B"}, "RUNNING"),
    ({"job_state": "E"}, "COMPLETING"),
    ({"job_state": "M"}, "UNKNOWN"),
    ({}, "UNKNOWN"),
    ({"job_state": "F", "Exit_status": 0, "substate": 92}, "COMPLETED"),
    ({"job_state": "X", "Exit_status": 0}, "COMPLETED"),
    ({"job_state": "F", "Exit_status": -29, "substate": 93}, "TIMEOUT"),
    ({"job_state": "F", "Exit_status": "-29"}, "TIMEOUT"),
    ({"job_state": "F", "Exit_status": -28}, "TIMEOUT"),
    ({"job_state": "F", "Exit_status": 256 + 15, "substate": 91}, "CANCELLED"),
    ({"job_state": "F", "Exit_status": 256 + 15}, "CANCELLED"),
    ({"job_state": "F", "substate": 91}, "CANCELLED"),  # qdel of a queued job: no exit status
    ({"job_state": "F", "Exit_status": 256 + 9, "substate": 91}, "CANCELLED"),
    # qdel of a job that stopped cleanly on the SIGTERM (live OpenPBS 23.06)
    ({"job_state": "F", "Exit_status": 0, "substate": 91}, "CANCELLED"),
    ({"job_state": "F", "Exit_status": 256 + 9, "substate": 93}, "FAILED"),
    ({"job_state": "F", "Exit_status": 256 + 11}, "FAILED"),
    ({"job_state": "F", "Exit_status": -27}, "OUT_OF_MEMORY"),
    ({"job_state": "F", "Exit_status": 1, "substate": 93}, "FAILED"),
    ({"job_state": "F", "Exit_status": 255}, "FAILED"),
    ({"job_state": "F", "Exit_status": -3}, "FAILED"),
    ({"job_state": "F", "substate": 92}, pbs.FINISHED),
])
def test_pbs_state_table(job, expected):
    assert pbs_state(job) == expected


def test_done_states_agree_with_submitit():
    watcher = PbsInfoWatcher()
    for state, done in [("PENDING", False), ("RUNNING", False), ("COMPLETING", False), ("UNKNOWN", False),
                        ("COMPLETED", True), ("FAILED", True), ("CANCELLED", True), ("TIMEOUT", True),
                        ("OUT_OF_MEMORY", True), (pbs.FINISHED, True)]:
        watcher._info_dict["7.s"] = {"State": state}
        watcher._registered.add("7.s")
        assert watcher.is_done("7.s", mode="cache") is done, state


@pytest.mark.parametrize("text, job_id", [
    ("1.pbshost\n", "1.pbshost"),
    ("  42.pbs01.example.org  ", "42.pbs01.example.org"),
    ("17", "17"),
    ("2[].pbshost\n", "2[].pbshost"),
    ("2[0].pbshost", "2[0].pbshost"),
    (b"3.pbshost\n", "3.pbshost"),
    ("site banner\n5.pbshost\n", "5.pbshost"),
])
def test_parse_qsub_output(text, job_id):
    assert parse_qsub_output(text) == job_id


@pytest.mark.parametrize("text", ["", "\n", "qsub: Unknown queue", "Submitted batch job 12", "1.pbs host", "x1.pbs"])
def test_parse_qsub_output_refuses_garbage(text):
    with pytest.raises(utils.FailedSubmissionError, match="could not read a PBS job id"):
        parse_qsub_output(text)


# ------------------------------------------------------------------ qstat JSON

def test_qstat_single_job_is_parsed(fake, tmp_path):
    script = tmp_path / "a.sh"
    script.write_text("#!/bin/bash\n#PBS -N hello\n#PBS -l walltime=00:05:00\ntrue\n")
    job_id = subprocess.run(["qsub", str(script)], capture_output=True, text=True, check=True).stdout.strip()
    assert job_id == "1.pbshost"
    proc = _qstat("-x", job_id)
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert set(data) == {"timestamp", "pbs_version", "pbs_server", "Jobs"}
    info = PbsInfoWatcher().read_info(proc.stdout)
    assert info[job_id]["State"] == "PENDING"
    assert info[job_id]["job_state"] == "Q"
    assert info[job_id]["Job_Name"] == "hello"
    assert info[job_id]["Resource_List.walltime"] == "00:05:00"
    fake.finish(job_id, 0)
    info = PbsInfoWatcher().read_info(_qstat("-x", job_id).stdout)
    assert info[job_id]["State"] == "COMPLETED"
    assert info[job_id]["Exit_status"] == "0"


ARRAY_QSTAT = {  # the layout qstat -f -F json -t prints for an array and its subjobs
    "timestamp": 1763779200, "pbs_version": "23.06.06", "pbs_server": "pbshost",
    "Jobs": {
        "2[].pbshost": {"Job_Name": "arr", "job_state": "B", "substate": 70, "array": "True",
                        "array_indices_submitted": "0-2", "array_indices_remaining": "2",
                        "Resource_List": {"ncpus": 1, "walltime": "00:01:00"}},
        "2[0].pbshost": {"Job_Name": "arr", "job_state": "X", "substate": 92, "Exit_status": 0,
                         "array_id": "2[].pbshost", "array_index": 0},
        "2[1].pbshost": {"Job_Name": "arr", "job_state": "R", "substate": 42,
                         "array_id": "2[].pbshost", "array_index": 1},
        "2[2].pbshost": {"Job_Name": "arr", "job_state": "Q", "substate": 10,
                         "array_id": "2[].pbshost", "array_index": 2},
    },
}


def test_qstat_array_with_subjobs_is_parsed():
    info = PbsInfoWatcher().read_info(json.dumps(ARRAY_QSTAT))
    assert {k: v["State"] for k, v in info.items()} == {
        "2[].pbshost": "RUNNING", "2[0].pbshost": "COMPLETED",
        "2[1].pbshost": "RUNNING", "2[2].pbshost": "PENDING",
    }
    assert info["2[0].pbshost"]["array_id"] == "2[].pbshost"
    assert info["2[].pbshost"]["Resource_List.ncpus"] == "1"


def test_qstat_unknown_id_exits_153_with_header_only(fake):
    proc = _qstat("-x", "99.pbshost")
    assert proc.returncode == 153
    assert set(json.loads(proc.stdout)) == {"timestamp", "pbs_version", "pbs_server"}
    assert b"Unknown Job Id 99.pbshost" in proc.stderr
    assert PbsInfoWatcher().read_info(proc.stdout) == {}
    # A job never seen stays UNKNOWN (not done): qsub said it exists.
    watcher = PbsInfoWatcher(delay_s=1)
    assert watcher.get_state("99.pbshost", mode="force") == "UNKNOWN"
    assert not watcher.is_done("99.pbshost", mode="cache")


def test_seen_job_that_left_the_server_is_done(fake, tmp_path):
    """History off (OpenPBS's default): qstat -x gives no job at all, exit 0, even for a
    running one; without -x a finished job is unknown (153); it was seen running, so done."""
    fake.configure(history=False)
    script = tmp_path / "a.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    job_id = PbsExecutor(tmp_path / "logs").submit_script(script).job_id
    fake.set(job_id, job_state="R", substate=42)
    refused = _qstat("-x", job_id)
    assert refused.returncode == 0 and b'"Jobs"' not in refused.stdout
    assert refused.stderr.decode() == f"qstat: PBS is not configured to maintain job history {job_id}\n"
    watcher = PbsInfoWatcher(delay_s=1)
    assert watcher.get_state(job_id, mode="force") == "RUNNING"
    fake.finish(job_id, 0)
    assert job_id not in fake.jobs()
    assert _qstat(job_id).returncode == 153
    assert watcher.get_state(job_id, mode="force") == pbs.FINISHED
    assert watcher.is_done(job_id, mode="cache")
    assert watcher.get_info(job_id, mode="cache")["job_state"] == "R"  # last info kept


def test_finished_without_history_option_exits_35_and_is_done(fake, tmp_path):
    """A qstat that refuses -x: the watcher retries without it; a finished job then exits 35."""
    fake.configure(reject_x=True)
    assert _qstat("-x", "1.pbshost").returncode == 2
    script = tmp_path / "a.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    job_id = PbsExecutor(tmp_path / "logs").submit_script(script).job_id
    watcher = PbsInfoWatcher(delay_s=1)
    assert watcher.get_state(job_id, mode="force") == "PENDING"
    assert watcher._use_history is False
    fake.finish(job_id, 0)
    proc = _qstat(job_id)
    assert proc.returncode == 35
    assert b"Job has finished, use -x" in proc.stderr
    assert watcher.get_state(job_id, mode="force") == pbs.FINISHED


def test_watcher_batches_ids_and_attributes_errors(fake, tmp_path):
    script = tmp_path / "a.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    ex = PbsExecutor(tmp_path / "logs")
    a, b = ex.submit_script(script).job_id, ex.submit_script(script).job_id
    watcher = PbsInfoWatcher(delay_s=1)
    watcher.register_job(a)
    watcher.register_job(b)
    watcher.register_job("77.pbshost")
    assert watcher._make_command() == ["qstat", "-f", "-F", "json", "-x", a, b, "77.pbshost"]
    fake.finish(a, 1)
    watcher.update()
    assert watcher.get_state(a, mode="cache") == "FAILED"
    assert watcher.get_state(b, mode="cache") == "PENDING"
    assert watcher.get_state("77.pbshost", mode="cache") == "UNKNOWN"
    assert watcher.num_calls == 1


# ------------------------------------------------------------------ submission

def test_executor_needs_pbs_commands_on_path(fake, monkeypatch, tmp_path):
    PbsExecutor(tmp_path / "logs")  # the fake's qsub and qstat
    monkeypatch.setenv("SGE_ROOT", "/opt/sge")  # Grid Engine's qsub
    with pytest.raises(RuntimeError, match="Could not find PBS"):
        PbsExecutor(tmp_path / "logs")
    monkeypatch.delenv("SGE_ROOT")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RuntimeError, match="Could not find PBS"):
        PbsExecutor(tmp_path / "logs")


def test_submit_script_submits_the_exact_bytes(fake, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    script = run_dir / "job.sh"
    content = ("#!/bin/bash\n#PBS -N hpctrain-run\n#PBS -l select=1:ncpus=4\n#PBS -l walltime=00:30:00\n"
               "# résumé: non-ASCII, CRLF and a trailing space stay as they are \r\n"
               'cd "$PBS_O_WORKDIR"\nexec python -m hpctrain worker\n').encode()
    script.write_bytes(content)
    ex = PbsExecutor(tmp_path / "logs")
    job = ex.submit_script(script)
    assert isinstance(job, PbsJob)
    sub = fake.submission(job.job_id)
    assert sub["script"] == content
    assert sub["cwd"] == str(run_dir)  # qsub ran from the script's directory
    assert sub["argv"] == [str(script)]
    assert fake.jobs()[job.job_id]["Job_Name"] == "hpctrain-run"
    assert job.state == "PENDING"
    assert ex.submit_script(script, cwd=str(tmp_path)).job_id == "2.pbshost"
    assert fake.submission("2.pbshost")["cwd"] == str(tmp_path)  # it becomes PBS_O_WORKDIR
    chained = ex.submit_script(script, extra_args=["-W", f"depend=afterany:{job.job_id}"])
    assert fake.submission(chained.job_id)["argv"] == ["-W", f"depend=afterany:{job.job_id}", str(script)]
    assert chained.get_info()["job_state"] == "H"
    with pytest.raises(FileNotFoundError):
        ex.submit_script(run_dir / "missing.sh")
    with pytest.raises(ValueError, match="newline"):
        ex.submit_script(script, extra_args=["-N", "a\nb"])


def test_submit_script_reports_qsub_errors(fake, tmp_path, monkeypatch):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("FAKE_PBS_STATE", str(tmp_path / "a_file" / "state"))  # the fake qsub fails
    with pytest.raises(utils.FailedSubmissionError, match="exited"):
        PbsExecutor(tmp_path / "logs").submit_script(script)


def test_cancel_calls_qdel_and_state_becomes_cancelled(fake, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    ex = PbsExecutor(tmp_path / "logs")
    queued = ex.submit_script(script)
    running = ex.submit_script(script)
    fake.set(running.job_id, job_state="R", substate=42)
    assert running.get_info()["State"] == "RUNNING"
    queued.cancel()
    running.cancel()
    assert (Path(os.environ["FAKE_PBS_STATE"]) / "qdel.log").read_text().split() == [
        queued.job_id, running.job_id]
    assert queued.get_info()["State"] == "CANCELLED"
    assert queued.get_info()["substate"] == "91" and "Exit_status" not in queued.get_info()
    assert running.get_info()["Exit_status"] == str(256 + signal.SIGTERM)
    assert queued.state == running.state == "CANCELLED"
    assert queued.done() and running.done()
