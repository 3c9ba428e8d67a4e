"""hpctrain against a real OpenPBS 23.06 server: scripts/pbs-server.sh builds it from its
source tarball and starts a server and two MoMs (hosts pbsn1, pbsn2) in network
namespaces of their own; scripts/test.sh starts it when the tarball is there.

Nothing here is faked: `hpctrain submit | status | cancel | sweep` call the server's own
qsub/qstat/qdel (through the client commands in $HPCTRAIN_PBS_DIR/bin), MoM runs the
rendered job script under a login shell from $HOME, Open MPI's mpirun starts the ranks
from PBS_NODEFILE, the job resubmits itself with `qsub -W depend=afterany`, MoM kills at
the walltime. Each test leaves the server as it found it (job history on, no queue
default walltime). Without a running server these tests are skipped, saying why; the
fake-based PBS tests (test_pbs_flow.py, test_pbs_recovery.py, test_pbs_submitit.py)
run either way. The tests share one server: they run one after another (tests/conftest.py
puts them in one xdist group) under /tmp/pbs-server.lock.
"""
import json
import os
import subprocess
import sys
import time

import pytest

import workloads
from helpers import (ROOT, SUPPORT, assert_same_state, cli, final_state, pbs_job_file,
                     run_state, wait_for)
from hpctrain import RunConfig, ScalingConfig
from hpctrain.rundir.layout import read_results
from hpctrain.torch import TorchTrainer

#: A bound on one test's jobs (a loaded 2-core machine), not a speed check.
JOB_TIMEOUT = 420

pytestmark = [pytest.mark.slow, pytest.mark.cluster("pbs")]


class Server:
    """The test side of the real server: its qmgr and qstat."""

    def __init__(self, bin_dir):
        self.bin = bin_dir

    def qmgr(self, command, check=True):
        return subprocess.run([os.path.join(self.bin, "qmgr"), "-c", command],
                              capture_output=True, text=True, check=check)

    def job(self, job_id):
        """``qstat -f -F json -x`` of one job (history on), {} when unknown."""
        p = subprocess.run([os.path.join(self.bin, "qstat"), "-f", "-F", "json", "-x", job_id],
                           capture_output=True, text=True)
        try:
            return json.loads(p.stdout).get("Jobs", {}).get(job_id, {})
        except ValueError:
            return {}

    def active_jobs(self):
        p = subprocess.run([os.path.join(self.bin, "qselect")], capture_output=True, text=True)
        return p.stdout.split()


@pytest.fixture
def pbs(pbs_server, monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith(("PBS_", "SLURM_", "OMPI_", "PMI_", "PALS_", "HPCTRAIN_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", f"{pbs_server}{os.pathsep}{os.environ['PATH']}")
    workdir = tmp_path / "workdir"  # where qsub runs: PBS_O_WORKDIR
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    server = Server(pbs_server)
    server.qmgr("set server job_history_enable=true")
    try:
        yield server
    finally:
        left = server.active_jobs()
        if left:
            # a plain qdel: the batch step stops its ranks on the SIGTERM (the launcher runs
            # in a session of its own, which MoM's SIGKILL of the job's session misses)
            subprocess.run([os.path.join(pbs_server, "qdel"), *left], capture_output=True)
            deadline = time.monotonic() + 60
            while server.active_jobs() and time.monotonic() < deadline:
                time.sleep(1)
        server.qmgr("set server job_history_enable=true")
        server.qmgr("unset queue workq resources_default.walltime", check=False)


def job_file(tmp_path, storage, name, *, function="deterministic", config, time_="00:05:00",
             warning=None, launcher="mpirun", max_failures=0, setup=None):
    return pbs_job_file(tmp_path, storage, name, function=function, config=config, time_=time_,
                        warning=warning, failure=[f"max_failures = {max_failures}"],
                        launcher=launcher, setup=setup, pythonpath=True)


def read_state(run):
    return run_state(run)


def submitted_id(out):
    line = next(line for line in out.splitlines() if "submitted pbs job" in line)
    return line.split("submitted pbs job ")[1].split()[0]


def assert_no_pbs_output_in(workdir):
    """PBS's own <name>.o<seq> files went to the run's logs, not where qsub ran."""
    assert os.listdir(workdir) == []


@pytest.mark.parametrize("history", [True, False], ids=["history-on", "history-off"])
def test_submit_and_follow_to_the_end(tmp_path, storage, pbs, history):
    """OpenPBS's default keeps no job history: qstat -x then answers no job at all; the
    run is still followed to its end and its job shown as ended."""
    if not history:
        pbs.qmgr("set server job_history_enable=false")
    job = job_file(tmp_path, storage, "follow", config={"epochs": 2})
    p = cli("submit", job, "--follow", timeout=JOB_TIMEOUT)
    job_id = submitted_id(p.stdout)
    run = os.path.join(storage, "follow")
    state = read_state(run)
    assert state["status"] == "FINISHED" and state["job_ids"] == [job_id]
    assert [a["outcome"] for a in state["attempts"]] == ["FINISHED"]
    assert f"job {job_id}: {'COMPLETED' if history else 'ENDED'}" in p.stderr
    status = cli("status", run).stdout
    assert "run follow: FINISHED" in status
    assert f"pbs job {job_id}: {'COMPLETED' if history else 'ENDED'}" in status
    assert_no_pbs_output_in(os.getcwd())
    assert os.path.exists(os.path.join(run, "logs", f"{job_id}.OU"))


#: 25 s of training: more than one 40 s allocation holds (the timer warns 25 s after the
#: job started, 15 s before its walltime; the ranks start some seconds after the job, and
#: get 7.5 s from the warning to commit their checkpoint on a loaded machine).
CHAIN = {"steps": 100, "sleep": 0.25, "every": 0}
WALLTIME, WARNING = "00:00:40", "15s"


def assert_chained_to_the_end(run):
    state = read_state(run)
    assert state["status"] == "FINISHED", state
    n = len(state["attempts"])
    assert n >= 2 and state["requeues"] == n - 1
    assert [a["outcome"] for a in state["attempts"]] == ["PREEMPTED"] * (n - 1) + ["FINISHED"]
    assert [s["job_id"] for s in state["submissions"]] == state["job_ids"]
    for a in state["attempts"][:-1]:
        assert "the supervisor's timer" in a["warning"] and a["stopped_at_deadline"] is False
    from hpctrain.rundir.layout import read_results

    steps = [row["step"] for row in read_results(os.path.join(run, "result.json"))]
    assert steps == list(range(CHAIN["steps"]))  # nothing lost, nothing repeated
    return state


@pytest.mark.parametrize("history", [True, False], ids=["history-on", "history-off"])
def test_chain_across_walltimes(tmp_path, storage, pbs, history):
    if not history:
        pbs.qmgr("set server job_history_enable=false")
    job = job_file(tmp_path, storage, "chain", function="on_demand", config=CHAIN,
                   time_=WALLTIME, warning=WARNING)
    p = cli("submit", job, "--follow", timeout=JOB_TIMEOUT)
    run = os.path.join(storage, "chain")
    state = assert_chained_to_the_end(run)
    chain = state["job_ids"]
    for before, after in zip(chain, chain[1:]):
        assert f"job {before} resubmitted itself as job {after}" in p.stderr
        if history:
            assert pbs.job(after)["Exit_status"] == 0
    assert_no_pbs_output_in(os.getcwd())


def test_walltime_from_the_queue_arms_the_timer(tmp_path, storage, pbs):
    """No time in the spec: the queue's default walltime limits the job all the same,
    and the batch step reads it from the server (Resource_List.walltime)."""
    pbs.qmgr(f"set queue workq resources_default.walltime={WALLTIME}")
    job = job_file(tmp_path, storage, "queuetime", function="on_demand", config=CHAIN,
                   time_=None, warning=WARNING)
    assert "#PBS -l walltime" not in cli("render", job).stdout
    cli("submit", job, "--follow", timeout=JOB_TIMEOUT)
    run = os.path.join(storage, "queuetime")
    state = assert_chained_to_the_end(run)
    log = open(os.path.join(run, "logs", f"pbs-{state['job_ids'][0]}.out")).read()
    assert "the supervisor's timer warns at" in log


#: Both MoMs of the test server, one rank each: run directories under /tmp are shared
#: (the two hosts are namespaces of one machine), which a site file must say.
TWO_NODES = {"num_workers": 2, "workers_per_node": 1}


@pytest.fixture
def tm_site(tmp_path, monkeypatch):
    """A site whose PBS has no PALS and an MPI without TM: its launcher is pbsdsh."""
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "pbs-tm.toml").write_text(
        '[site]\nscheduler = "pbs"\n[limits]\nshared_paths = ["/tmp"]\n'
        '[scheduler]\nlauncher = "pbsdsh"\n[scheduler.directives]\n"-r" = "y"\n'
        '"-j" = "oe"\n')
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(sites))
    return "pbs-tm"


def lines_of(run, name):
    with open(os.path.join(run, "test-out", name)) as f:
        return [line.split() for line in f]


def test_two_moms_one_rank_each_through_pbsdsh_stop_resubmit_resume(tmp_path, storage, pbs,
                                                                    tm_site):
    """Issue 31: ranks on both MoMs through PBS's own task manager (pbsdsh), the way a
    PBS site without PALS starts them: a training longer than its walltime checkpoints
    at the supervisor's warning, the job resubmits itself, the next job resumes on both
    nodes, and the weights at the end are those of an uninterrupted run."""
    job = pbs_job_file(tmp_path, storage, "twonodes", function="on_demand", config=CHAIN,
                       time_=WALLTIME, warning=WARNING, failure=["max_failures = 0"],
                       launcher="pbsdsh", scaling=TWO_NODES, site=tm_site, pythonpath=True)
    script = cli("render", job).stdout
    assert "#PBS -l select=2:ncpus=1:mpiprocs=1\n#PBS -l place=scatter\n" in script
    assert "#       pbsdsh -n NODE -- /bin/sh -c '. \"$0\" && exec \"$@\"' ENV_FILE " in script
    p = cli("submit", job, "--follow", timeout=JOB_TIMEOUT)
    run = os.path.join(storage, "twonodes")
    state = assert_chained_to_the_end(run)
    for job_id in state["job_ids"]:
        hosts = [h.split("/")[0] for h in pbs.job(job_id)["exec_host"].split("+")]
        assert hosts == ["pbsn1", "pbsn2"]
        assert pbs.job(job_id)["Exit_status"] == 0
    for before, after in zip(state["job_ids"], state["job_ids"][1:]):
        assert f"job {before} resubmitted itself as job {after}" in p.stderr
    n = len(state["attempts"])
    # every attempt: rank 0 on the first MoM, rank 1 on the second
    assert lines_of(run, "hosts-rank-0.txt") == [[str(a), "pbsn1"] for a in range(1, n + 1)]
    assert lines_of(run, "hosts-rank-1.txt") == [[str(a), "pbsn2"] for a in range(1, n + 1)]
    for rank in (0, 1):  # each later attempt resumed from the checkpoint of the warning
        starts = lines_of(run, f"starts-rank-{rank}.txt")
        assert [s[2] for s in starts] == ["-"] + [
            os.path.basename(a["stop_checkpoint"]) for a in state["attempts"][:-1]]
        assert all(int(s[1]) > 0 for s in starts[1:])
    steps = [row["step"] for row in read_results(os.path.join(run, "result.json"))]
    assert steps == list(range(CHAIN["steps"]))
    launcher_out = open(os.path.join(run, "logs", state["job_ids"][0], "launcher.out")).read()
    assert " -n 0 -- /bin/sh -c " in launcher_out and " -n 1 -- /bin/sh -c " in launcher_out
    straight = TorchTrainer(workloads.on_demand, train_loop_config={**CHAIN, "sleep": 0},
                            scaling_config=ScalingConfig(num_workers=2),
                            run_config=RunConfig(name="straight", storage_path=storage,
                                                 verbose=0)).fit()
    assert_same_state(final_state(run), final_state(straight.path))


def test_mpirun_that_cannot_reach_the_second_mom_is_reported_as_the_launcher(
        tmp_path, storage, pbs, tm_site):
    """Issue 31: Open MPI without TM support starts its daemon on the second node with
    ssh, which the node refuses: the run fails with mpirun's own words, not as a rank -1
    that "left no traceback"."""
    job = pbs_job_file(tmp_path, storage, "nossh", config={"epochs": 1},
                       failure=["max_failures = 0"], launcher="mpirun", scaling=TWO_NODES,
                       site=tm_site, pythonpath=True)
    p = cli("submit", job, "--follow", timeout=JOB_TIMEOUT, check=False)
    assert p.returncode != 0
    run = os.path.join(storage, "nossh")
    state = read_state(run)
    expected = ("the launcher mpirun could not start the ranks: ssh: connect to host pbsn2 "
                "port 22: Connection refused; ORTE was unable to reliably start one or more "
                "daemons.")
    assert state["status"] == "FAILED"
    assert [(a["failed_rank"], a["error"]) for a in state["attempts"]] == [(-1, expected)]
    text = open(os.path.join(run, "error.txt")).read()
    assert text.startswith("Training failed: the launcher, attempt 1")
    assert "left no traceback" not in text
    assert 'HINT: on PBS nodes that refuse ssh, with an MPI built without PBS\'s TM support, ' \
           'set scheduler.launcher = "pbsdsh"' in text


def test_cancel_of_a_running_job(tmp_path, storage, pbs):
    job = job_file(tmp_path, storage, "cancel", function="on_demand",
                   config={"steps": 100000, "sleep": 0.1})
    job_id = submitted_id(cli("submit", job).stdout)
    run = os.path.join(storage, "cancel")
    wait_for(lambda: os.path.exists(os.path.join(run, "result.json")), JOB_TIMEOUT,
             "the training's first report")
    assert f"pbs job {job_id}: RUNNING" in cli("status", run).stdout
    assert f"cancelled pbs job {job_id}" in cli("cancel", run).stdout
    # qdel: SIGTERM (the batch step records the run INTERRUPTED), SIGKILL after kill_delay
    wait_for(lambda: pbs.job(job_id).get("job_state") == "F"
             and read_state(run)["status"] != "RUNNING", 120, "the job to end")
    assert read_state(run)["status"] == "INTERRUPTED"
    assert f"pbs job {job_id}: CANCELLED" in cli("status", run).stdout


def test_hand_submitted_run_shows_its_job_and_is_cancelled(tmp_path, storage, pbs):
    """`hpctrain render` + qsub by hand: the job records itself in the run."""
    job = job_file(tmp_path, storage, "byhand", function="on_demand",
                   config={"steps": 100000, "sleep": 0.1})
    script = tmp_path / "byhand.sh"
    script.write_text(cli("render", job).stdout)
    job_id = subprocess.run(["qsub", str(script)], capture_output=True, text=True,
                            check=True).stdout.strip()
    run = os.path.join(storage, "byhand")
    wait_for(lambda: os.path.exists(os.path.join(run, "result.json")), JOB_TIMEOUT,
             "the training's first report")
    assert f"pbs job {job_id}: RUNNING" in cli("status", run).stdout
    assert f"cancelled pbs job {job_id}" in cli("cancel", run).stdout
    # qdel: SIGTERM (the batch step records the run INTERRUPTED), SIGKILL after kill_delay
    wait_for(lambda: pbs.job(job_id).get("job_state") == "F"
             and read_state(run)["status"] != "RUNNING", 120, "the job to end")
    assert read_state(run)["status"] == "INTERRUPTED"
    assert f"pbs job {job_id}: CANCELLED" in cli("status", run).stdout


def test_failed_launcher_ends_the_run_failed(tmp_path, storage, pbs):
    """PBS's own bin/mpiexec first on PATH: hpctrain's launcher cannot tell its flavour;
    the run ends FAILED with the reason instead of staying RUNNING."""
    prefix = os.environ.get("HPCTRAIN_OPENPBS_PREFIX", "/var/cache/hpctrain/openpbs-23.06.06")
    job = job_file(tmp_path, storage, "badlauncher", config={"epochs": 1}, launcher="mpiexec",
                   setup=[f"export PATH={prefix}/bin:$PATH"])
    p = cli("submit", job, "--follow", timeout=JOB_TIMEOUT, check=False)
    assert p.returncode != 0
    run = os.path.join(storage, "badlauncher")
    state = read_state(run)
    assert state["status"] == "FAILED", state
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED"]
    assert "mpiexec" in state["attempts"][0]["error"]
    assert "run badlauncher: FAILED" in cli("status", run).stdout


def test_sigkill_of_rank_0_in_the_second_attempt_under_pbs(tmp_path, storage, pbs):
    job = job_file(tmp_path, storage, "killed", max_failures=1, config={
        "epochs": 4, "crashes": [[1, 0, 1, "sigusr2"], [2, 0, 2, "sigkill"]]})
    p = cli("submit", job, "--follow", timeout=JOB_TIMEOUT, check=False)
    assert p.returncode != 0
    state = read_state(os.path.join(storage, "killed"))
    assert [(a["failed_rank"], a["error"]) for a in state["attempts"]] == [
        (0, "rank 0 killed by signal 12"), (0, "rank 0 killed by signal 9")], state["attempts"]


def pbs_sweep(tmp_path, storage, name, entrypoint, sweep):
    """A sweep's job file for the real server: one local rank per trial, on workq."""
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""
site = "generic-pbs"
[job]
entrypoint = "{os.path.join(SUPPORT, entrypoint)}"
[run]
name = "{name}"
storage_path = "{storage}"
[scaling]
num_workers = 1
[scheduler]
queue = "workq"
launcher = "local"
time = "00:05:00"
[env]
PYTHONPATH = "{ROOT}"
{sweep}""")
    return str(path)


def test_asha_on_a_pbs_job_array_stops_weak_trials_early_and_finds_the_best(
        tmp_path, storage, pbs):
    """Issue 16's trial schedulers on the real PBS server: an ASHA sweep of 4 trials as one
    PBS job array (2 at a time): the weak trials' subjobs end early and cleanly, their
    checkpoints up to the rung stay, and the best trial is the grid's best."""
    from hpctrain import tune

    import tune_sched_workloads

    path = pbs_sweep(tmp_path, storage, "pbsasha", "tune_sched_workloads.py:quality",
                     '[sweep]\nmetric = "loss"\nmode = "min"\nmax_concurrent_trials = 2\n'
                     + tune_sched_workloads.ASHA_SWEEP_TOML)
    out = cli("sweep", str(path), "--follow", timeout=JOB_TIMEOUT)
    assert "submitted pbs job array" in out.stdout
    grid = tune.ResultGrid.from_path(os.path.join(storage, "pbsasha"))
    assert [r.status for r in grid] == ["FINISHED"] * 4
    assert grid.get_best_result().config["train_loop_config"]["q"] == 0.7
    iterations = [r.metrics["_training_iteration"] for r in grid]
    assert iterations[0] == 8 and iterations[3] < 8, iterations  # q=0.1 stopped at a rung
    for r, n in zip(grid, iterations):
        state = run_state(r.path)
        assert len(state["job_ids"]) == 1 and "[" in state["job_ids"][0]  # one subjob each
        assert len(os.listdir(os.path.join(r.path, "checkpoints"))) == n
        if n < 8:
            assert "below the cutoff" in state["stopped_by"]
    assert_no_pbs_output_in(os.getcwd())


@pytest.mark.parametrize("history", [True, False], ids=["history-on", "history-off"])
def test_sweep_as_a_job_array(tmp_path, storage, pbs, history):
    from hpctrain import tune

    if not history:
        pbs.qmgr("set server job_history_enable=false")

    path = pbs_sweep(tmp_path, storage, "pbsweep", "tune_workloads.py:docs_example", """
[config]
num_epochs = 2
[sweep]
metric = "output"
mode = "max"
max_concurrent_trials = 2
[sweep.param_space]
input = {grid_search = [1, 2, 3]}
""")
    out = cli("sweep", str(path), "--follow", timeout=JOB_TIMEOUT)
    assert "submitted pbs job array" in out.stdout
    grid = tune.ResultGrid.from_path(os.path.join(storage, "pbsweep"))
    assert [r.status for r in grid] == ["FINISHED"] * 3
    assert grid.get_best_result().config == {"train_loop_config": {"input": 3}}
    assert_no_pbs_output_in(os.getcwd())


def test_a_function_backend_sweep_as_a_pbs_job_array(tmp_path, storage, pbs):
    """`job.backend = "function"` (what a Tune function trainable runs as): each subjob's
    rank imports no framework."""
    from hpctrain import tune

    path = pbs_sweep(tmp_path, storage, "pbsplain", "tune_workloads.py:frameworks_loaded", """
[sweep]
metric = "score"
mode = "max"
[sweep.param_space]
a = {grid_search = [1, 2]}
""")
    text = open(path).read()
    open(path, "w").write(text.replace("[job]\n", '[job]\nbackend = "function"\n'))
    out = cli("sweep", path, "--follow", timeout=JOB_TIMEOUT)
    assert "submitted pbs job array" in out.stdout
    grid = tune.ResultGrid.from_path(os.path.join(storage, "pbsplain"))
    assert [(r.status, r.metrics["score"], r.metrics["loaded"]) for r in grid] == [
        ("FINISHED", 2, "none"), ("FINISHED", 3, "none")]
    assert_no_pbs_output_in(os.getcwd())
