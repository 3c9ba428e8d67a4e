"""PBS recovery: the supervisor's own walltime timer, the coordinated stop and the job
resubmitting itself (``qsub -W depend=afterany:$PBS_JOBID job.sh``), up to the line we
can reach here.

No PBS server can be installed on these machines (shared/notes/pbs-facts.md), so qsub,
qstat and qdel are the fakes in tests/support/fake_pbs/, and ``FakePbs.run`` plays MoM: it runs
the job's script with bash from ``$HOME`` with the batch ``PBS_*`` variables, only once
the job is queued (a successor stays held until its predecessor ended), and kills the
job's processes at its walltime like MoM (SIGTERM, SIGKILL 10 s later, Exit_status -29).
Everything on hpctrain's side is real: ``hpctrain submit``, the rendered script (which
stamps ``HPCTRAIN_JOB_STARTED`` itself, so the timer runs on the real clock), Open MPI's
``mpirun`` starting two Gloo ranks of ``workloads.on_demand``, the stop file, the
agreement at a report, the checkpoint commit, ``state.json`` and the inner qsub.
"""
import contextlib
import os
import subprocess
import sys

import pytest

import workloads
from helpers import (SUPPORT, assert_same_state, cli, final_state, needs_mpirun, pbs_job_file,
                     run_state)
from hpctrain import RunConfig, ScalingConfig
from hpctrain.torch import TorchTrainer

FAKE_DIR = os.path.join(SUPPORT, "fake_pbs")
sys.path.insert(0, FAKE_DIR)
import _fakepbs as fakepbs  # noqa: E402

HOST = os.uname().nodename
#: The test's own limit on one allocation (the walltimes below are 24-60 s).
RUN_TIMEOUT = 150


@pytest.fixture
def pbs(tmp_path, monkeypatch):
    return fakepbs.FakePbs.install(
        tmp_path / "pbs_state", monkeypatch,
        clear=("PBS_", "SLURM_", "OMPI_", "PMI_", "PALS_", "HPCTRAIN_"))


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Where `hpctrain submit` runs (it becomes PBS_O_WORKDIR; the job starts in $HOME)."""
    d = tmp_path / "workdir"
    d.mkdir()
    monkeypatch.chdir(d)
    return str(d)


def job_file(tmp_path, storage, name, *, config, walltime, warning, failure=""):
    return pbs_job_file(tmp_path, storage, name, function="on_demand", config=config,
                        time_=walltime, warning=warning, failure=[failure] if failure else ())


def run_job(pbs, run, job_id, **kw):
    """Run one allocation as MoM would; it must end as the batch step says it does."""
    proc = pbs.run(job_id, hosts=[HOST], mpiprocs=2, timeout=RUN_TIMEOUT, **kw)
    log = os.path.join(run, "logs", f"pbs-{job_id}.out")
    text = open(log).read() if os.path.exists(log) else "(no job log)"
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}\n--- {log}:\n{text}"
    job = pbs.jobs()[job_id]
    assert job["job_state"] == "F" and job["Exit_status"] == 0
    return text


@contextlib.contextmanager
def following(tmp_path, run):
    """`hpctrain status RUN --follow` in the background, as a user on the login node
    would watch the run; yields (process, path of its output)."""
    path = tmp_path / f"follow-{os.path.basename(run)}.txt"
    with open(path, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hpctrain.cli", "status", run, "--follow"],
                                stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc, path
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def read_state(run):
    return run_state(run)


def records(run, name):
    """Lines of test-out/<name> as tuples of words (ints where they are ints)."""
    path = os.path.join(run, "test-out", name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(int(w) if w.lstrip("-").isdigit() else w for w in line.split())
                for line in f if line.strip()]


def checkpoint_step(run, name):
    import torch

    return torch.load(os.path.join(run, "checkpoints", name, "state.pt"))["step"]


def assert_resubmitted(pbs, run, state, after, workdir, job_sh):
    """The run says REQUEUED and the job submitted a successor of itself: exactly job.sh,
    depending on ``after`` (held until it ended), from PBS_O_WORKDIR. Returns its id."""
    assert state["status"] == "REQUEUED", state
    assert "stopped_because" not in state
    sub = state["submissions"][-1]
    assert {k: sub[k] for k in ("scheduler", "script", "after")} == {
        "scheduler": "pbs", "script": "job.sh", "after": after}
    new = sub["job_id"]
    rec = pbs.submission(new)
    assert rec["argv"][:2] == ["-W", f"depend=afterany:{after}"]
    # (qsub reads a private copy of the job.sh that was checked: the same bytes)
    assert len(rec["argv"]) == 3 and os.path.basename(rec["argv"][2]) == "job.sh"
    assert rec["script"] == job_sh
    assert rec["cwd"] == workdir  # the inner qsub ran from PBS_O_WORKDIR, not $HOME
    assert rec["state_at_submit"] == "H"  # held: its predecessor was still running
    job = pbs.jobs()[new]
    assert job["job_state"] == "Q" and "depend" not in job  # released when the predecessor ended
    return new


# ------------------------------------------------------------------ the chain

#: 40 s of training: more than two allocations of the chain's walltime can hold (the timer
#: warns 20 s after the job started, ranks start 3 s or more after it: <= ~70 steps each).
CHAIN = {"steps": 160, "sleep": 0.25, "every": 0}


@needs_mpirun
@pytest.mark.slow
def test_timer_stop_and_self_resubmission_chain_to_the_end(tmp_path, storage, pbs, workdir):
    """A training longer than its walltime: every allocation is warned by the supervisor's
    own timer, both ranks stop at the same step right after committing a checkpoint, the
    job resubmits itself, the next allocation resumes from exactly that checkpoint; no
    iteration is lost or repeated and the result is bit-identical to an uninterrupted run.
    """
    job = job_file(tmp_path, storage, "chain", config=CHAIN, walltime="00:00:30",
                   warning="10s")
    assert "submitted pbs job 1.pbshost" in cli("submit", job).stdout
    run = os.path.join(storage, "chain")
    with open(os.path.join(run, "job.sh"), "rb") as f:
        job_sh = f.read()
    assert pbs.submission("1.pbshost")["script"] == job_sh

    chain = ["1.pbshost"]
    with following(tmp_path, run) as (follower, follow_out):
        for _ in range(10):  # 3 allocations; more on a loaded machine
            log = run_job(pbs, run, chain[-1])
            assert "the supervisor's timer warns at" in log
            state = read_state(run)
            if state["status"] == "FINISHED":
                break
            chain.append(assert_resubmitted(pbs, run, state, chain[-1], workdir, job_sh))
            assert f"submitted job {chain[-1]} to continue after job {chain[-2]}" in log
        else:
            pytest.fail(f"no FINISHED after {len(chain)} allocations: {read_state(run)}")
        # the follower went from job to job and ends with the run
        assert follower.wait(timeout=60) == 0, follow_out.read_text()
    followed = follow_out.read_text()
    for before, after in zip(chain, chain[1:]):
        assert f"job {before} resubmitted itself as job {after}; following that one" in followed

    n = len(chain)
    assert n >= 3, f"the training fitted in {n} allocation(s); the test needs >= 3"
    assert sorted(pbs.jobs()) == sorted(chain)  # no stray submission
    state = read_state(run)
    assert state["job_ids"] == chain
    assert [s["job_id"] for s in state["submissions"]] == chain
    assert state["requeues"] == n - 1 and state["failures"] == 0
    assert state.get("idle_allocations") == 0
    attempts = state["attempts"]
    assert [a["job_id"] for a in attempts] == chain  # one attempt per allocation
    assert [a["outcome"] for a in attempts] == ["PREEMPTED"] * (n - 1) + ["FINISHED"]

    warned = {r: records(run, f"warned-rank-{r}.txt") for r in (0, 1)}
    starts = {r: records(run, f"starts-rank-{r}.txt") for r in (0, 1)}
    # the warning reached both ranks at the same step, once per stopped allocation
    assert warned[0] == warned[1]
    assert [a for a, _ in warned[0]] == list(range(1, n))
    stop_step = {a: s for a, s in warned[0]}
    assert starts[0] == starts[1]
    assert [s[0] for s in starts[0]] == list(range(1, n + 1))
    assert [s[4] for s in starts[0]] == chain  # each attempt ran in its own job
    assert starts[0][0][1:3] == (0, "-") and attempts[0]["resumed_from"] is None

    for k in range(1, n):  # attempt k stopped, attempt k+1 resumed
        a, nxt = attempts[k - 1], attempts[k]
        assert a["stopped_at_deadline"] is False, a
        assert "the supervisor's timer" in a["warning"]
        assert a["stopped_iterations"] == [stop_step[k] + 1]  # both ranks, same report
        ck = a["stop_checkpoint"]
        assert ck and checkpoint_step(run, ck) == stop_step[k]  # committed at the stop
        assert os.path.basename(nxt["resumed_from"]) == ck
        _, start, resumed, _, _ = starts[0][k]
        assert resumed == ck
        assert start == stop_step[k] + 1  # zero iterations lost, none repeated

    from hpctrain.rundir.layout import read_results

    steps = [row["step"] for row in read_results(os.path.join(run, "result.json"))]
    assert steps == list(range(CHAIN["steps"]))

    status = cli("status", run).stdout
    assert "run chain: FINISHED" in status and f"requeues {n - 1}" in status
    for job_id in chain:
        assert f"pbs job {job_id}: COMPLETED" in status

    # sleep only paces the loop; the weights do not depend on it
    local = TorchTrainer(workloads.on_demand, train_loop_config=dict(CHAIN, sleep=0.0),
                         scaling_config=ScalingConfig(num_workers=2),
                         run_config=RunConfig(name="local", storage_path=storage,
                                              verbose=0)).fit()
    assert records(local.path, "warned-rank-0.txt") == []
    assert_same_state(final_state(run), final_state(local.path))


# ------------------------------------------------------------------ no requeue

LONG = {"steps": 10_000, "sleep": 0.2, "every": 0}
#: Walltime of the one-allocation tests: the timer warns 14 s after the job started,
#: room for the ranks to start on a loaded 2-core machine.
SHORT_WALLTIME = "00:00:24"


@needs_mpirun
@pytest.mark.slow
def test_requeue_false_ends_stopped_with_the_committed_checkpoint(tmp_path, storage, pbs,
                                                                   workdir):
    job = job_file(tmp_path, storage, "norequeue", config=LONG, walltime=SHORT_WALLTIME,
                   warning="10s", failure="requeue = false")
    cli("submit", job)
    run = os.path.join(storage, "norequeue")
    with following(tmp_path, run) as (follower, follow_out):
        log = run_job(pbs, run, "1.pbshost")
        assert "not requeued: failure.requeue is false" in log
        assert follower.wait(timeout=60) == 75, follow_out.read_text()  # EXIT_STOPPED

    state = read_state(run)
    assert state["status"] == "STOPPED"
    assert state["stopped_because"] == "failure.requeue is false"
    assert not state.get("requeues")
    assert list(pbs.jobs()) == ["1.pbshost"]  # no resubmission
    assert [s["job_id"] for s in state["submissions"]] == ["1.pbshost"]
    (attempt,) = state["attempts"]
    assert attempt["outcome"] == "PREEMPTED" and attempt["stopped_at_deadline"] is False
    (stop,) = records(run, "warned-rank-0.txt")
    assert records(run, "warned-rank-1.txt") == [stop]
    ck = attempt["stop_checkpoint"]
    assert ck and checkpoint_step(run, ck) == stop[1]

    assert "stopped because failure.requeue is false" in cli("status", run).stdout
    results = cli("results", run).stdout
    assert "STOPPED" in results and ck in results

    from hpctrain import Result
    from hpctrain.rundir.commit import verify_checkpoint

    result = Result.from_path(run)
    assert os.path.basename(result.checkpoint.path) == ck
    assert verify_checkpoint(result.checkpoint.path) == []


# ------------------------------------------------------------------ qsub refuses

#: More steps than one SHORT_WALLTIME allocation can run (at most ~65 at 0.2 s).
SHORT = {"steps": 80, "sleep": 0.2, "every": 0}


@needs_mpirun
@pytest.mark.slow
def test_refused_resubmission_stops_the_run_and_a_new_submission_resumes_it(
        tmp_path, storage, pbs, workdir):
    job = job_file(tmp_path, storage, "refused", config=SHORT, walltime=SHORT_WALLTIME,
                   warning="10s")
    cli("submit", job)
    run = os.path.join(storage, "refused")
    with open(os.path.join(run, "job.sh"), "rb") as f:
        job_sh = f.read()
    # inside the job, qsub refuses (e.g. the user's queue limit is reached)
    refusing = tmp_path / "refusing-bin"
    refusing.mkdir()
    (refusing / "qsub").write_text("#!/bin/sh\necho 'qsub: would exceed the queue per-user "
                                   "limit' >&2\nexit 38\n")
    (refusing / "qsub").chmod(0o755)
    log = run_job(pbs, run, "1.pbshost",
                  extra_env={"PATH": f"{refusing}{os.pathsep}{os.environ['PATH']}"})
    assert "requeueing failed" in log

    state = read_state(run)
    assert state["status"] == "STOPPED"
    assert state["stopped_because"].startswith("requeueing failed: qsub refused the "
                                               "resubmission")
    assert "per-user limit" in state["stopped_because"]
    assert list(pbs.jobs()) == ["1.pbshost"]
    assert [s["job_id"] for s in state["submissions"]] == ["1.pbshost"]
    (attempt,) = state["attempts"]
    ck = attempt["stop_checkpoint"]
    (stop,) = records(run, "warned-rank-0.txt")
    assert records(run, "warned-rank-1.txt") == [stop]

    from hpctrain.rundir.commit import verify_checkpoint
    from hpctrain.rundir.layout import RunDir

    latest = RunDir(run).latest_checkpoint()
    assert os.path.basename(latest.path) == ck
    assert verify_checkpoint(latest.path) == []
    assert checkpoint_step(run, ck) == stop[1]
    assert "stopped because requeueing failed" in cli("status", run).stdout

    # "the run is STOPPED and resumes when submitted again" (here with a longer walltime)
    out = cli("submit", job, "--set", "scheduler.time=00:01:00").stdout
    assert "submitted pbs job 2.pbshost" in out
    with open(os.path.join(run, "job.sh"), "rb") as f:
        job_sh = f.read()
    assert b"#PBS -l walltime=00:01:00\n" in job_sh
    sub = pbs.submission("2.pbshost")
    assert sub["script"] == job_sh and not any(a.startswith("depend=") for a in sub["argv"])
    run_job(pbs, run, "2.pbshost")
    state = read_state(run)
    assert state["status"] == "FINISHED", state
    assert state["job_ids"] == ["1.pbshost", "2.pbshost"]
    assert os.path.basename(state["attempts"][1]["resumed_from"]) == ck
    assert records(run, "starts-rank-0.txt")[1][1:3] == (stop[1] + 1, ck)
    assert records(run, "warned-rank-0.txt") == [stop]  # not warned again
    from hpctrain.rundir.layout import read_results

    steps = [row["step"] for row in read_results(os.path.join(run, "result.json"))]
    assert steps == list(range(SHORT["steps"]))  # none lost, none repeated
    assert list(pbs.jobs()) == ["1.pbshost", "2.pbshost"]
    assert "stopped_because" not in state     # the old reason does not outlive the stop
    assert not state.get("requeues")          # the refused resubmission does not count


# ------------------------------------------------------------------ deadline

@needs_mpirun
@pytest.mark.slow
def test_loop_that_ignores_the_warning_is_stopped_at_the_deadline_before_the_walltime(
        tmp_path, storage, pbs, workdir):
    """A loop that never checkpoints (not even on demand) is stopped at the deadline,
    early enough for the job to end cleanly and resubmit itself before MoM's walltime
    kill; the allocation counts as one without progress."""
    config = dict(LONG, ignore_warning=True)
    job = job_file(tmp_path, storage, "deadline", config=config, walltime=SHORT_WALLTIME,
                   warning="10s")
    cli("submit", job)
    run = os.path.join(storage, "deadline")
    with open(os.path.join(run, "job.sh"), "rb") as f:
        job_sh = f.read()
    log = run_job(pbs, run, "1.pbshost")  # exit 0, not -29: ended before the walltime
    assert "did not commit a checkpoint by the deadline" in log
    state = read_state(run)
    assert assert_resubmitted(pbs, run, state, "1.pbshost", workdir, job_sh) == "2.pbshost"
    (attempt,) = state["attempts"]
    assert attempt["outcome"] == "PREEMPTED" and attempt["stopped_at_deadline"] is True
    assert attempt["stop_checkpoint"] is None
    assert records(run, "warned-rank-0.txt") == []  # it ignored should_checkpoint()
    from hpctrain.rundir.layout import RunDir

    assert RunDir(run).latest_checkpoint() is None
    assert state["idle_allocations"] == 1 and state["requeues"] == 1
    # the user ends the chain: `hpctrain cancel` deletes the queued successor
    assert "cancelled pbs job 2.pbshost" in cli("cancel", run).stdout
    assert pbs.jobs()["2.pbshost"]["job_state"] == "F"
    assert "pbs job 2.pbshost: CANCELLED" in cli("status", run).stdout


# ------------------------------------------------------------------ cheap checks

def test_pbs_script_stamps_its_start_and_holds_the_warning_before_the_set_up(tmp_path,
                                                                               storage):
    job = job_file(tmp_path, storage, "render", config=SHORT, walltime="00:00:40",
                   warning="15s")
    with open(job, "a") as f:
        f.write('[setup]\ncommands = ["echo set-up"]\n')
    script = cli("render", job).stdout
    lines = script.splitlines()

    def at(line):
        assert line in lines, script
        return lines.index(line)

    started = at('export HPCTRAIN_JOB_STARTED="$(date +%s)"')
    assert at("#PBS -l walltime=00:00:40") < started
    assert at("#PBS -r y") < started
    assert started < at("trap 'export HPCTRAIN_WARNED=1' USR1") < at('cd "$PBS_O_WORKDIR"')
    assert at('cd "$PBS_O_WORKDIR"') < at("echo set-up") < at("trap '' USR1")
    assert at("trap '' USR1") < next(i for i, l in enumerate(lines)
                                      if l.startswith("exec ") and "hpctrain.cli.batch" in l)
    assert 'warning_time = "15s"' in script  # the embedded spec carries the warning


def test_fake_mom_runs_only_queued_jobs_and_kills_at_the_walltime(tmp_path, pbs, monkeypatch):
    """The fake's MoM, which the tests above rely on: a held successor cannot run, and a
    job still running at its walltime gets SIGTERM, SIGKILL after kill_delay, -29; PBS's
    own output file (no -o) lands where qsub ran, as <name>.o<seq>."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#PBS -l walltime=00:00:01\ntrap 'echo got TERM' TERM\n"
                      "while true; do sleep 0.1; done\n")

    def qsub(*args):
        return subprocess.run(["qsub", *args, str(script)], capture_output=True, text=True,
                              check=True).stdout.strip()

    first = qsub()
    second = qsub("-W", f"depend=afterany:{first}")
    assert pbs.jobs()[second]["job_state"] == "H"
    with pytest.raises(RuntimeError, match="state H"):
        pbs.run(second)
    proc = pbs.run(first, kill_delay=1, timeout=30)
    assert proc.returncode == -29 and "got TERM" in proc.stdout
    assert "got TERM" in (tmp_path / "job.sh.o1").read_text()
    assert pbs.jobs()[first]["Exit_status"] == -29
    assert pbs.jobs()[second]["job_state"] == "Q"


def test_timer_arms_only_on_pbs_from_the_scripts_start_stamp(tmp_path, storage, monkeypatch):
    from hpctrain.allocation.job import warning_timer
    from hpctrain.schedulers.base import warning_seconds
    from hpctrain.spec import load_job_spec

    def spec(walltime, warning=None):
        return load_job_spec(job_file(tmp_path, storage, "t", config=SHORT,
                                      walltime=walltime, warning=warning))

    s = spec("00:00:40", "15s")
    assert warning_seconds(s) == 15
    monkeypatch.setenv("HPCTRAIN_JOB_STARTED", "1000000")
    assert warning_timer("pbs", s.scheduler.walltime_s, 15, os.environ) == 1000000 + 40 - 15
    assert warning_timer("slurm", s.scheduler.walltime_s, 15, os.environ) is None  # Slurm sends its own warning
    assert warning_timer(None, s.scheduler.walltime_s, 15, os.environ) is None
    monkeypatch.setenv("HPCTRAIN_JOB_STARTED", "")
    assert warning_timer("pbs", s.scheduler.walltime_s, 15, os.environ) is None  # a script by hand without the stamp
    # the default warning shrinks to a quarter of a short walltime (at least 10 s)
    assert warning_seconds(spec("00:00:40")) == 10
    assert warning_seconds(spec("00:02:00")) == 30
    assert warning_seconds(spec("01:00:00")) == 120
    # a warning set on purpose that leaves less than half of the walltime is refused
    p = cli("render", job_file(tmp_path, storage, "t", config=SHORT, walltime="00:00:40",
                               warning="25s"), check=False)
    assert p.returncode != 0 and "failure.warning_time" in p.stderr


@needs_mpirun
@pytest.mark.slow
def test_walltime_from_the_queue_arms_the_timer(tmp_path, storage, pbs, workdir):
    """No time in the spec: the server gives the job its queue's default walltime
    (Resource_List.walltime), which limits it all the same; the batch step reads it from
    qstat and warns before it (the default warning shrunk to fit), then resubmits."""
    job = job_file(tmp_path, storage, "queuetime", config=CHAIN, walltime=None, warning=None)
    assert "#PBS -l walltime" not in cli("render", job).stdout
    cli("submit", job)
    run = os.path.join(storage, "queuetime")
    resources = pbs.jobs()["1.pbshost"]["Resource_List"]
    pbs.set("1.pbshost", Resource_List={**resources, "walltime": "00:00:30"})
    log = run_job(pbs, run, "1.pbshost")
    assert "the supervisor's timer warns at" in log and "10 s before the walltime ends" in log
    state = read_state(run)
    assert state["status"] == "REQUEUED" and state["attempts"][0]["outcome"] == "PREEMPTED"
    assert "the supervisor's timer" in state["attempts"][0]["warning"]
