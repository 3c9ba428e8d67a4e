"""PBS as a submitit plugin (hpctrain.schedulers.pbs_submitit).

No PBS server can be installed from the package registries these machines reach, so
these tests run against fake ``qsub``/``qstat``/``qdel`` executables (tests/fake_pbs/),
put first on PATH. They stand in for a server we cannot install and reproduce the
outputs and exit codes recorded from a live OpenPBS 23.06 server in
``shared/notes/pbs-facts.md`` (job id on qsub's stdout; ``qstat -f -F json`` layout;
exit 153 for an unknown id, 35 for a finished job without ``-x``; 256+N for a job
killed by signal N, -29 for a walltime kill; a job starts in ``$HOME``). What a job
runs is real: the generated script is executed with bash, and submitit's pickled
function runs and returns through the pickle round trip.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import submitit
from submitit.core import plugins, utils

from hpctrain.schedulers import pbs_submitit as pbs
from hpctrain.schedulers.pbs_submitit import (
    PbsExecutor, PbsInfoWatcher, PbsJob, PbsJobEnvironment, parse_qsub_output, pbs_state,
)

FAKE_DIR = Path(__file__).parent / "fake_pbs"
_spec = importlib.util.spec_from_file_location("_fakepbs", FAKE_DIR / "_fakepbs.py")
assert _spec is not None and _spec.loader is not None
fakepbs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fakepbs)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A fresh fake server; a fresh watcher so job ids (1.pbshost...) never collide across tests."""
    server = fakepbs.FakePbs.install(
        tmp_path / "pbs_state", monkeypatch,
        clear=("PBS_", "SUBMITIT_", "OMPI_", "PMI_", "PALS_"),
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


# ------------------------------------------------------------------ plugin + executor

def test_auto_executor_resolves_pbs_through_the_entry_point(fake, tmp_path):
    assert plugins.get_executors()["pbs"] is PbsExecutor
    assert isinstance(plugins.get_job_environments()["pbs"], PbsJobEnvironment)
    ex = submitit.AutoExecutor(tmp_path / "logs", cluster="pbs")
    assert isinstance(ex._executor, PbsExecutor)
    assert PbsExecutor.name() == "pbs"


def test_affinity(fake, monkeypatch):
    assert PbsExecutor.affinity() == 1  # a qsub, but nothing says PBS (could be something else)
    monkeypatch.setenv("PBS_EXEC", "/opt/pbs")
    assert PbsExecutor.affinity() == 2
    monkeypatch.setenv("SGE_ROOT", "/opt/sge")  # Grid Engine's qsub
    assert PbsExecutor.affinity() == -1
    monkeypatch.delenv("SGE_ROOT")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert PbsExecutor.affinity() == -1


def _directive_lines(script: bytes) -> list:
    return [line for line in script.decode().splitlines() if line.startswith("#PBS")]


def test_submit_real_function_runs_through_pickle(fake, tmp_path, monkeypatch):
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    folder = tmp_path / "logs"
    ex = submitit.AutoExecutor(folder, cluster="pbs")
    ex.update_parameters(name="addjob", timeout_min=10, cpus_per_task=2, gpus_per_node=1, mem_gb=4,
                         pbs_queue="workq", pbs_account="proj", pbs_place="pack",
                         pbs_setup=["export HELLO_FROM_SETUP=1"])

    def add_and_look(a, b):  # nested: cloudpickle ships it by value
        import os as _os
        return a + b, _os.getcwd(), _os.environ.get("HELLO_FROM_SETUP")

    job = ex.submit(add_and_look, 2, 3)
    assert isinstance(job, PbsJob)
    assert job.job_id == "1.pbshost"
    sub = fake.submission(job.job_id)
    assert Path(sub["argv"][-1]).name.startswith(".submission_file_")  # submitit renames it after qsub
    assert sub["cwd"] == str(workdir)
    assert _directive_lines(sub["script"]) == [
        "#PBS -N addjob",
        "#PBS -q workq",
        "#PBS -A proj",
        "#PBS -l select=1:ncpus=2:mpiprocs=1:ngpus=1:mem=4gb",
        "#PBS -l place=pack",
        "#PBS -l walltime=00:10:00",
        f"#PBS -o {folder}/",
        f"#PBS -e {folder}/",
        "#PBS -r y",
    ]
    assert sub["script"] == job.paths.submission_file.read_bytes()
    text = sub["script"].decode()
    assert 'cd "$PBS_O_WORKDIR"' in text
    assert f"-u -m submitit.core._submit {folder}" in text
    assert "mpiexec" not in text
    assert job.state == "PENDING"

    # Run the script as MoM would (from $HOME, PBS_* set): submitit's _submit unpickles
    # the function, runs it and pickles the result.
    proc = fake.run(job.job_id)
    assert proc.returncode == 0, proc.stderr
    assert job.result() == (5, str(workdir), "1")
    assert job.get_info()["State"] == "COMPLETED"  # get_info forces a qstat
    assert "Starting with JobEnvironment(job_id=1.pbshost" in job.stdout()  # submitit logs to stdout
    assert job.paths.stdout == folder / "1.pbshost_0_log.out" and job.paths.stdout.exists()


def test_payload_command_alone_runs_the_pickle(fake, tmp_path):
    """The script's payload, without PBS and without the script: python -m submitit.core._submit."""
    folder = tmp_path / "logs"
    ex = PbsExecutor(folder)
    job = ex.submit(pow, 2, 10)
    env = dict(os.environ, PBS_JOBID=job.job_id, PBS_ENVIRONMENT="PBS_BATCH", SUBMITIT_EXECUTOR="pbs",
               PBS_O_WORKDIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-u", "-m", "submitit.core._submit", str(folder)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert job.result() == 1024


def test_failure_in_the_job_raises_with_its_trace(fake, tmp_path):
    ex = PbsExecutor(tmp_path / "logs")

    def boom():
        raise ValueError("exploded in the job")

    job = ex.submit(boom)
    proc = fake.run(job.job_id)
    assert proc.returncode != 0
    with pytest.raises(utils.FailedJobError, match="exploded in the job"):
        job.result()
    assert job.state == "FAILED"


def test_multi_node_script_uses_mpiexec_and_scatter(fake, tmp_path):
    ex = PbsExecutor(tmp_path / "logs")
    ex.update_parameters(nodes=2, tasks_per_node=4, cpus_per_task=8, gpus_per_node=4, walltime="1h30m",
                         additional_parameters={"filesystems": "home:eagle"})
    job = ex.submit(abs, -1)
    script = fake.submission(job.job_id)["script"]
    assert "#PBS -l select=2:ncpus=32:mpiprocs=4:ngpus=4" in _directive_lines(script)
    assert "#PBS -l place=scatter" in _directive_lines(script)
    assert "#PBS -l walltime=01:30:00" in _directive_lines(script)
    assert "#PBS -l filesystems=home:eagle" in _directive_lines(script)
    assert 'mpiexec -n 8 --hostfile "$PBS_NODEFILE" ' in script.decode()
    assert job.num_tasks == 8
    job.cancel()


@pytest.mark.parametrize("params, match", [
    ({"queue": "work q"}, "cannot go on a #PBS line"),
    ({"job_name": "a\nb"}, "cannot go on a #PBS line"),
    ({"additional_parameters": {"x": "1'"}}, "cannot go on a #PBS line"),
    ({"setup": ["echo a\necho b"]}, "newline"),
    ({"nodes": 0}, "positive integer"),
    ({"walltime": "60"}, "bare number"),
    ({"partition": "x"}, "Unavailable parameter"),
])
def test_bad_parameters_are_refused(fake, tmp_path, params, match):
    ex = PbsExecutor(tmp_path / "logs")
    with pytest.raises(ValueError, match=match):
        ex.update_parameters(**params)


def test_paths_are_quoted_in_the_body_and_refused_in_directives(fake, tmp_path):
    quoted = pbs._shell_path_with_jobid("/tmp/a b/%j/%j_0_log.out")
    assert quoted == "'/tmp/a b/'\"${PBS_JOBID}\"/\"${PBS_JOBID}\"_0_log.out"
    out = subprocess.run(["bash", "-c", f"PBS_JOBID='1[2].s'; printf %s {quoted}"],
                         capture_output=True, text=True, check=True).stdout
    assert out == "/tmp/a b/1[2].s/1[2].s_0_log.out"
    text = pbs._make_qsub_string("cmd", "/tmp/runs/%j")
    assert "#PBS -o /tmp/runs/" in text.splitlines()  # PBS's own files: the id-independent part
    assert 'exec >>/tmp/runs/"${PBS_JOBID}"/"${PBS_JOBID}"_0_log.out' in text
    with pytest.raises(ValueError, match="cannot go on a #PBS line"):
        pbs._make_qsub_string("cmd", tmp_path / "with space")
    with pytest.raises(ValueError, match="newline"):
        pbs._shell_path_with_jobid("/tmp/a\nb")


def test_cancel_calls_qdel_and_state_becomes_cancelled(fake, tmp_path, monkeypatch):
    ex = PbsExecutor(tmp_path / "logs")
    queued = ex.submit(abs, -1)
    running = ex.submit(abs, -2)
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
    monkeypatch.setattr(PbsJob, "_results_timeout_s", 0)
    with pytest.raises(utils.UncompletedJobError, match="CANCELLED"):
        queued.result()


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
    sub = fake.submission(job.job_id)
    assert sub["script"] == content
    assert sub["cwd"] == str(run_dir)  # qsub ran from the script's directory
    assert sub["argv"] == [str(script)]
    assert fake.jobs()[job.job_id]["Job_Name"] == "hpctrain-run"
    assert job.state == "PENDING"
    chained = ex.submit_script(script, extra_args=["-W", f"depend=afterany:{job.job_id}"])
    assert fake.submission(chained.job_id)["argv"] == ["-W", f"depend=afterany:{job.job_id}", str(script)]
    assert chained.get_info()["job_state"] == "H"
    with pytest.raises(FileNotFoundError):
        ex.submit_script(run_dir / "missing.sh")


def test_submit_script_reports_qsub_errors(fake, tmp_path, monkeypatch):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("FAKE_PBS_STATE", str(tmp_path / "a_file" / "state"))  # the fake qsub fails
    with pytest.raises(utils.FailedSubmissionError, match="exited"):
        PbsExecutor(tmp_path / "logs").submit_script(script)


# ------------------------------------------------------------------ inside the job

def test_job_environment_from_pbs_and_mpi_variables(fake, tmp_path, monkeypatch):
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("n2\nn2\nn1\nn1\n")
    env = PbsJobEnvironment()
    assert not env.activated()
    monkeypatch.setenv("PBS_JOBID", "7.pbshost")
    assert not env.activated()
    monkeypatch.setenv("PBS_ENVIRONMENT", "PBS_BATCH")
    monkeypatch.setenv("PBS_NODEFILE", str(nodefile))
    assert env.activated()
    assert env.job_id == "7.pbshost"
    assert env.hostnames == ["n2", "n1"] and env.num_nodes == 2
    assert (env.global_rank, env.local_rank, env.num_tasks) == (0, 0, 1)
    monkeypatch.setenv("PMI_RANK", "3")
    monkeypatch.setenv("PMI_SIZE", "4")
    monkeypatch.setenv("MPI_LOCALRANKID", "1")
    assert (env.global_rank, env.local_rank, env.num_tasks) == (3, 1, 4)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert (env.global_rank, env.local_rank) == (2, 0)
    monkeypatch.setenv("PALS_NODEID", "1")
    assert env.node == 1
    monkeypatch.setenv("PBS_JOBID", "2[1].pbshost")
    monkeypatch.setenv("PBS_ARRAY_ID", "2[].pbshost")
    monkeypatch.setenv("PBS_ARRAY_INDEX", "1")
    assert env.job_id == "2[1].pbshost"
    assert (env.array_job_id, env.array_task_id) == ("2[].pbshost", "1")
    monkeypatch.setenv("_TEST_CLUSTER_", "pbs")
    assert isinstance(submitit.JobEnvironment(), PbsJobEnvironment)


def test_signal_handler_times_from_the_script_start(fake, monkeypatch):
    delayed = utils.DelayedSubmission(abs, 1)
    delayed.set_timeout(60, 3)
    paths = utils.JobPaths("/tmp/x", job_id="1.pbshost")
    monkeypatch.setenv("SUBMITIT_PBS_START", str(int(time.time()) - 60 * 59))
    handler = pbs.PbsSignalHandler(PbsJobEnvironment(), paths, delayed)
    assert handler.effective_lead_s == 120
    assert handler.has_timed_out()  # 1 min left < 2 min lead
    monkeypatch.setenv("SUBMITIT_PBS_START", str(int(time.time()) - 60 * 10))
    handler = pbs.PbsSignalHandler(PbsJobEnvironment(), paths, delayed)
    assert not handler.has_timed_out()
    short = utils.DelayedSubmission(abs, 1)
    short.set_timeout(5, 3)
    assert pbs.PbsSignalHandler(PbsJobEnvironment(), paths, short).effective_lead_s == 30


def test_requeue_resubmits_after_itself_and_the_handle_follows(fake, tmp_path, monkeypatch):
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    folder = tmp_path / "logs"
    job = PbsExecutor(folder).submit(divmod, 17, 5)
    first = job.job_id
    fake.set(first, job_state="R", substate=42)
    # Inside the running job (rank 0), after the checkpoint was written:
    monkeypatch.chdir(tmp_path)
    for name, value in {"PBS_JOBID": first, "PBS_ENVIRONMENT": "PBS_BATCH", "SUBMITIT_FOLDER": str(folder),
                        "PBS_O_WORKDIR": str(workdir)}.items():
        monkeypatch.setenv(name, value)
    env = PbsJobEnvironment()
    env._requeue(countdown=2)
    env._requeue(countdown=2)  # a second signal does not submit twice
    for name in ("PBS_JOBID", "PBS_ENVIRONMENT", "SUBMITIT_FOLDER", "PBS_O_WORKDIR"):
        monkeypatch.delenv(name)
    second = "2.pbshost"
    assert sorted(fake.jobs()) == [first, second]
    sub = fake.submission(second)
    assert sub["argv"][:2] == ["-W", f"depend=afterany:{first}"]
    assert sub["cwd"] == str(workdir)  # from PBS_O_WORKDIR, not $HOME
    assert sub["script"] == job.paths.submission_file.read_bytes()
    assert fake.jobs()[second]["job_state"] == "H"
    assert (folder / f"{second}_submitted.pkl").exists()
    assert (folder / f"{second}_submission.sh").exists()

    fake.finish(first, 255)  # submitit's handler exits -1 after requeueing
    assert job.state == "PENDING"  # the handle followed to the successor, released from H
    assert job.job_id == second
    proc = fake.run(second)
    assert proc.returncode == 0, proc.stderr
    assert job.result() == (3, 2)


def test_timer_checkpoints_and_requeues_before_the_walltime(fake, tmp_path, monkeypatch):
    """End to end: PBS gives no warning, so the job signals itself before its walltime,
    checkpoints, resubmits itself, and the successor's result reaches the first handle."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "logs"
    ex = PbsExecutor(folder)
    ex.update_parameters(timeout_min=1)  # lead = 6 s before the limit

    class Slow(submitit.helpers.Checkpointable):  # local class: pickled by value
        def __call__(self, flag):
            import os as _os
            import time as _time
            if _os.path.exists(flag):
                return "resumed"
            open(flag, "w").close()
            _time.sleep(60)
            return "never interrupted"

    job = ex.submit(Slow(), str(tmp_path / "started"))
    first = job.job_id
    # As if the job had started 55 s ago: the self-signal (USR2) fires about 1 s in.
    proc = fake.run(first, extra_env={"SUBMITIT_PBS_START": str(int(time.time()) - 55)})
    assert proc.returncode == 255, proc.stderr  # submitit exits -1 after requeueing
    log = (folder / f"{first}_0_log.out").read_text()
    assert "this job is timed-out" in log and "Requeued job" in log
    second = "2.pbshost"
    assert fake.submission(second)["argv"][:2] == ["-W", f"depend=afterany:{first}"]
    assert fake.jobs()[second]["job_state"] == "Q"  # released when the first one ended
    assert fake.run(second).returncode == 0
    assert job.result() == "resumed"
    assert job.job_id == second
