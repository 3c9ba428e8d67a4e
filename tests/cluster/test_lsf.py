"""LSF (hpctrain/schedulers/lsf.py): the rendered ``#BSUB`` lines, ``bsub``/``bjobs``
through fakes on PATH, and a job's environment → ranks and hosts.

Not run against a real LSF: the directives follow IBM's bsub reference (LSF 10.1); the
fakes print what bsub and bjobs print there (``Job <id> is submitted to queue <q>.``).
"""
from __future__ import annotations

import doctest
import os
import stat
import sys
import textwrap

import pytest

from hpctrain.cluster_env import worker_info_from_env
from hpctrain.errors import ConfigError
from hpctrain.schedulers import BatchRequest, detect_scheduler, get_scheduler
from hpctrain.schedulers import lsf
from hpctrain.spec import load_job_spec
from helpers import ROOT

ENTRY = os.path.join(ROOT, "examples", "quickstart_train.py")
RUN = "/scratch/me/runs/r1"


def load(tmp_path, body="", overrides=()):
    path = tmp_path / "job.toml"
    path.write_text(f'[job]\nentrypoint = "{ENTRY}:train_func"\n' + textwrap.dedent(body))
    return load_job_spec(str(path), ["scheduler.kind=lsf", *overrides])


def render(tmp_path, body="", overrides=()):
    return BatchRequest(load(tmp_path, body, overrides), RUN).materialize()


def bsub_lines(script):
    return [l[len("#BSUB "):] for l in script.splitlines() if l.startswith("#BSUB ")]


# --------------------------------------------------------------------------- rendering
def test_default_request(tmp_path):
    script = render(tmp_path)
    assert bsub_lines(script) == [
        "-J r1", "-n 1", '-R "span[ptile=1]"', "-wa USR1", "-wt 2",
        "-o /scratch/me/runs/r1/lsf-%J.out"]
    assert "# Submit by hand with:  bsub < <this file>" in script
    assert 'exec >>"/scratch/me/runs/r1/logs/lsf-${LSB_JOBID}.out" 2>&1' in script
    assert "trap 'export HPCTRAIN_WARNED=1' USR1" in script


def test_gpu_nodes_time_queue_project_memory(tmp_path):
    script = render(tmp_path, """
        [scaling]
        num_nodes = 2
        workers_per_node = 4
        use_gpu = true
        mem_per_worker = "8G"
        accelerator_type = "V100"
        [scheduler]
        time = "01:30:00"
        queue = "batch"
        account = "abc123"
        after = "41:42"
        [failure]
        warning_signal = "SIGURG"
        warning_time = "5m"
        """)
    assert bsub_lines(script) == [
        "-J r1", "-n 8", '-R "span[ptile=4]"', '-gpu "num=4:gmodel=V100"', "-M 8GB",
        "-W 1:30", "-q batch", "-P abc123", '-w "ended(41) && ended(42)"', "-wa URG",
        "-wt 5", "-o /scratch/me/runs/r1/lsf-%J.out"]


def test_csm_whole_nodes_through_directives(tmp_path):
    # Summit/Lassen: whole nodes with -nnodes, the site's allocation flags
    script = render(tmp_path, """
        [scheduler.directives]
        "-nnodes" = 2
        "-n" = ""
        "-R" = ""
        alloc_flags = "smt4"
        """)
    assert bsub_lines(script) == [
        "-J r1", "-wa USR1", "-wt 2", "-o /scratch/me/runs/r1/lsf-%J.out", "-nnodes 2",
        '-alloc_flags "smt4"']


def test_walltime_is_rounded_up_to_minutes(tmp_path):
    assert "-W 2" in bsub_lines(render(tmp_path, '[scheduler]\ntime = "90s"\n'))
    assert "-W 36:00" in bsub_lines(render(tmp_path, '[scheduler]\ntime = "1-12:00:00"\n'))


def test_unsafe_directive_is_refused(tmp_path):
    with pytest.raises(ConfigError) as e:
        render(tmp_path, '[scheduler.directives]\n"-R" = "span[ptile=4] select[x]"\n')
    assert "scheduler.directives.-R" in str(e.value) and "HINT:" in str(e.value)


def test_sweep_array(tmp_path):
    from hpctrain.tune._sweep import render_array

    script = render_array(load(tmp_path), "/scratch/me/sweeps/s", 10, [0, 1, 2, 4],
                          max_concurrent=2, rerender="", label="s")
    lines = bsub_lines(script)
    assert lines[0] == "-J hpctrain[1-3,5]%2"
    assert "HPCTRAIN_TRIAL_INDEX=$(( 10 + LSB_JOBINDEX - 1 ))" in script
    assert get_scheduler("lsf").array_task_id("77", 4) == "77[5]"


# --------------------------------------------------------------------------- commands
FAKE_BSUB = """\
#!{python}
import os, sys
state = os.environ["FAKE_LSF_STATE"]
script = sys.stdin.read()
with open(os.path.join(state, "received.sh"), "w") as f:
    f.write(script)
with open(os.path.join(state, "argv"), "w") as f:
    f.write(" ".join(sys.argv[1:]))
if "-q nosuchqueue" in script:
    sys.stderr.write("nosuchqueue: No such queue. Job not submitted.\\n")
    sys.exit(255)
print("Job <4242> is submitted to queue <normal>.")
"""
FAKE_BJOBS = """\
#!{python}
import sys
job = sys.argv[-1]
if job == "4242":
    print("RUN|4*h1:4*h2")
elif job == "4243":
    print("DONE|4*h1")
else:
    sys.stderr.write(f"Job <{{job}}> is not found\\n")
    sys.exit(255)
"""


@pytest.fixture
def fake_lsf(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("bsub", FAKE_BSUB), ("bjobs", FAKE_BJOBS)):
        path = bin_dir / name
        path.write_text(text.format(python=sys.executable))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LSF_STATE", str(tmp_path))
    return tmp_path


def test_submit_sends_the_script_on_stdin_and_reads_the_job_id(tmp_path, fake_lsf):
    script = tmp_path / "job.sh"
    script.write_text(render(tmp_path))
    sched = get_scheduler("lsf")
    sched.check_available()
    assert sched.submit(str(script)) == "4242"
    assert (fake_lsf / "received.sh").read_text() == script.read_text()
    assert (fake_lsf / "argv").read_text() == ""
    assert sched.resubmit(str(script), after="4241") == "4242"
    assert (fake_lsf / "argv").read_text() == "-w ended(4241)"


def test_refused_submission_is_a_clear_error(tmp_path, fake_lsf):
    script = tmp_path / "job.sh"
    script.write_text(render(tmp_path, '[scheduler]\nqueue = "nosuchqueue"\n'))
    with pytest.raises(ConfigError) as e:
        get_scheduler("lsf").submit(str(script))
    assert "bsub refused the job: nosuchqueue: No such queue" in str(e.value)
    assert "HINT:" in str(e.value)


def test_state_from_bjobs(fake_lsf):
    sched = get_scheduler("lsf")
    running, done, gone = sched.state("4242"), sched.state("4243"), sched.state("99")
    assert (running.state, running.done, running.nodes) == ("RUNNING", False, "4*h1:4*h2")
    assert (done.state, done.done) == ("COMPLETED", True)
    assert (gone.state, gone.done) == ("ENDED", True)


def test_bsub_missing_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="'bsub' is not on PATH"):
        get_scheduler("lsf").check_available()


# --------------------------------------------------------------------------- environment
def test_job_environment_gives_ranks_and_hosts():
    env = {"LSB_JOBID": "4242", "LSB_MCPU_HOSTS": "h1 2 h2 2",
           "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    assert detect_scheduler(env) == "lsf"
    info = worker_info_from_env(env, hostname="h2")
    assert (info.scheduler, info.launcher, info.job_id) == ("lsf", "openmpi", "4242")
    assert (info.world_rank, info.local_rank, info.node_rank) == (3, 1, 1)
    assert (info.hosts, info.master_addr) == (("h1", "h2"), "h1")


def test_hostfile_and_array_task():
    env = {"LSB_JOBID": "77", "LSB_JOBINDEX": "5", "LSB_DJOB_HOSTFILE": "/lsf/77.hostfile",
           "PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1"}
    files = {"/lsf/77.hostfile": "b1\nb1\na9\na9\n"}
    info = worker_info_from_env(env, hostname="a9", read_file=files.__getitem__)
    assert (info.job_id, info.hosts, info.node_rank) == ("77[5]", ("b1", "a9"), 1)


def test_mpiexec_is_the_default_launcher_with_the_lsf_hostfile(tmp_path):
    spec = load(tmp_path, "[scaling]\nnum_workers = 4\nnum_nodes = 2\n")
    assert spec.scheduler.launcher_name == "mpiexec"
    assert get_scheduler("lsf").hostfile_var == "LSB_DJOB_HOSTFILE"


def test_docstring_examples():
    assert doctest.testmod(lsf, optionflags=doctest.ELLIPSIS).failed == 0
