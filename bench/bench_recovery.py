#!/usr/bin/env python
"""Recovery after the scheduler's warning, on the real test Slurm cluster.

    python bench/bench_recovery.py                 # the full bench (about 7 min)
    python bench/bench_recovery.py --quick         # 2 preemptions, no hold run (~2.5 min)
    python bench/bench_recovery.py --no-hold-run   # skip the run that waits out Slurm's hold
    python bench/bench_recovery.py --json out.json # also write every timestamp as JSON

Needs the test cluster (``bash scripts/slurm-cluster.sh start``: nodes n1, n2, partition
debug). Every job is a 2-node × 2-worker hpctrain job (``bench/_recovery_loop.py``: a
deterministic DDP loop, 0.1 s per step, whose rank 0 appends ``time.time()`` of each event
to a trace file). The bench sends the warning itself, ``scancel --signal=USR1 --batch
<id>`` (what ``#SBATCH --signal=B:USR1@N`` does before the time limit), and follows the job
with ``scontrol show job`` every ``--poll`` seconds.

Figures (see bench/README.md, "bench_recovery.py"):

1. warning → first report of the resumed training, Slurm's requeue hold released at once
   by the bench (``scontrol update jobid=<id> starttime=now`` as soon as the requeued job
   is PENDING); median of ``--preemptions`` (default 5) preemptions of one job, broken
   down: → supervisor has the signal, → ranks agreed to stop, → every rank stopped with its
   checkpoint committed, → attempt ended, → job requeued, → PENDING, → RUNNING again, →
   next attempt started, → first resumed report.
2. the same with the hold left alone (Slurm's BeginTime delay, 2-2.5 min here), 1 sample.
3. training steps lost per preemption: steps the stopped attempt trained that the resumed
   attempt trains again, ``last step trained before the stop − first step of the resumed
   attempt + 1`` (0 = nothing retrained), for the on-demand loop, a loop that checkpoints
   every 10 steps and ignores the warning, and one whose checkpoint interval (100 steps)
   is longer than the stop deadline (stopped at the deadline).
4. the anchor: a bare ``sbatch`` job of the same shape doing by hand the set-up the
   resumed training does (``bench/_recovery_bare.py``: srun, ``import torch``, a Gloo
   process group, DDP of the same model, the same checkpoint file loaded, one step
   reported), run after the on-demand loop so that it loads the checkpoint that loop
   committed; RUNNING (again) → first report side by side, stage by stage, and the ratios.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

LOOP = os.path.join(HERE, "_recovery_loop.py")
NODES, PER_NODE = 2, 2
STEP_SLEEP = 0.1
_SUBMITTED = re.compile(r"submitted slurm job (\d+)")
ACTIVE = ("RUNNING", "PENDING", "COMPLETING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD",
          "REQUEUE_FED", "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT")

JOB_TOML = """\
site = "test-cluster"

[job]
entrypoint = "{loop}:loop"

[scaling]
num_nodes = {nodes}
workers_per_node = {per_node}

[run]
name = "{name}"
storage_path = "{storage}"

[failure]
warning_time = "{warning_time}"

[config]
steps = 1000000
sleep = {sleep}
every = {every}
ignore_warning = {ignore}
trace = "{trace}"
"""

# The loops measured for figure 3: (key, label, every, ignore_warning, warning_time).
LOOPS = {
    "on_demand": ("checkpoint on demand (should_checkpoint())", 0, False, "30s"),
    "every10": ("every 10 steps, ignores the warning", 10, True, "20s"),
    "every100": ("every 100 steps, ignores the warning", 100, True, "10s"),
}


#: [env] of every hpctrain job (``--fork-ranks`` sets HPCTRAIN_FORK_RANKS=1)
EXTRA_ENV: Dict[str, str] = {}


class BenchError(RuntimeError):
    pass


# -- Slurm ------------------------------------------------------------------------------------
def sh(argv: List[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def job_info(job_id: str) -> Dict[str, str]:
    """``scontrol show job -o`` as a dict ({} once the job is gone)."""
    out = sh(["scontrol", "show", "job", "-o", job_id])
    if out.returncode != 0:
        return {}
    return dict(kv.split("=", 1) for kv in out.stdout.split() if "=" in kv)


def cluster_problem() -> Optional[str]:
    for exe in ("sbatch", "scontrol", "scancel", "sinfo"):
        if shutil.which(exe) is None:
            return f"{exe} not installed (start the test cluster: bash scripts/slurm-cluster.sh start)"
    try:
        out = sh(["sinfo", "-h", "-o", "%P %a"], timeout=20)
    except subprocess.TimeoutExpired:
        return "sinfo timed out: is slurmctld running? (bash scripts/slurm-cluster.sh start)"
    if out.returncode != 0 or "up" not in out.stdout:
        return ("no Slurm cluster reachable (sinfo: " + (out.stderr.strip() or "no partition up")
                + "); start it with: bash scripts/slurm-cluster.sh start")
    return None


class Jobs:
    """Every job this bench submitted: cancelled at the end, also on error."""

    def __init__(self) -> None:
        self.ids: List[str] = []

    def add(self, job_id: str) -> str:
        self.ids.append(job_id)
        return job_id

    def cancel(self, job_id: str, wait_s: float = 30.0) -> None:
        sh(["scancel", job_id])
        deadline = time.time() + wait_s
        while time.time() < deadline and job_info(job_id).get("JobState") in ACTIVE:
            time.sleep(0.2)

    def foreign(self) -> List[str]:
        """Jobs in the queue that this bench did not submit ("id name state")."""
        out = sh(["squeue", "-h", "-o", "%i %j %T"]).stdout.split("\n")
        return [l.strip() for l in out if l.strip() and l.split()[0] not in self.ids]

    def wait_quiet(self, wait_s: float, log, threshold: float = 0.2) -> None:
        """Wait up to ``wait_s`` seconds until no other job is in the queue and other
        processes used less than ``threshold`` cores over the last 2 s."""
        deadline = time.time() + wait_s
        said = False
        while True:
            load = foreign_now()
            time.sleep(2.0)
            others, cores = self.foreign(), foreign_cores(load) or 0.0
            if (not others and cores < threshold) or time.time() >= deadline:
                return
            if not said:
                log(f"  waiting up to {wait_s:.0f} s for a quiet machine (other jobs: "
                    f"{'; '.join(others) or 'none'}; other processes: {cores:.2f} cores)")
                said = True

    def cancel_all(self) -> None:
        if self.ids:
            sh(["scancel", *self.ids])
            deadline = time.time() + 30
            while time.time() < deadline and any(
                    job_info(j).get("JobState") in ACTIVE for j in self.ids):
                time.sleep(0.2)


# -- other load on this machine --------------------------------------------------------------
class ForeignCpu:
    """CPU used by processes that are neither this bench (and its children) nor its Slurm
    jobs (their environment names one of its job ids) nor the cluster's daemons: other
    jobs, test suites, builds. A thread samples ``/proc`` every ``interval`` s; the CPU a
    process used after its last sample is missed, so this undercounts short processes."""

    DAEMONS = ("slurmd", "slurmctld", "slurmstepd", "munged")

    def __init__(self, jobs: "Jobs", interval: float = 0.5) -> None:
        import threading

        self.jobs = jobs
        self.interval = interval
        self.tick = os.sysconf("SC_CLK_TCK")
        self.me = os.getpid()
        self.seen: Dict[Tuple[int, int], Tuple[str, float]] = {}  # (pid, start) → (kind, cpu)
        self.total = 0.0  # foreign CPU seconds so far
        self.top: Dict[str, float] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sample(first=True)
        self._thread = threading.Thread(target=self._loop, name="foreign-cpu", daemon=True)
        self._thread.start()

    def _stat(self, pid: str):
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:
            return None
        comm = text[text.index("(") + 1:text.rindex(")")]
        rest = text.rsplit(")", 1)[1].split()
        return comm, int(rest[1]), (int(rest[11]) + int(rest[12])) / self.tick, int(rest[19])

    def _kind(self, pid: int, comm: str, ppid: int, stats: Dict[int, Any]) -> str:
        """"ours", "foreign", or "job:<id>" (decided at each sample: the bench may learn
        a job id after the job's first processes appeared)."""
        if comm in self.DAEMONS or pid == self.me or ppid == 2 or pid <= 2:
            return "ours"
        p, hops = ppid, 0
        while p > 1 and hops < 50:  # a descendant of this bench (sbatch, scontrol, …)
            if p == self.me:
                return "ours"
            p = stats[p][1] if p in stats else 0
            hops += 1
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            return "foreign"
        for kv in env:
            if kv.startswith(b"SLURM_JOB_ID="):
                return "job:" + kv[13:].decode()
        return "foreign"

    def _sample(self, first: bool = False) -> None:
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = self._stat(name)
                if st:
                    stats[int(name)] = st
        with self._lock:
            for pid, (comm, ppid, cpu, start) in stats.items():
                key = (pid, start)
                if key not in self.seen:
                    # a process born since the last sample: all its CPU is new
                    self.seen[key] = (self._kind(pid, comm, ppid, stats),
                                      cpu if first else 0.0)
                kind, last = self.seen[key]
                foreign = kind == "foreign" or (kind.startswith("job:")
                                                and kind[4:] not in self.jobs.ids)
                if foreign and cpu > last:
                    self.total += cpu - last
                    self.top[comm] = self.top.get(comm, 0.0) + cpu - last
                self.seen[key] = (kind, cpu)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._sample()
            except Exception:  # noqa: BLE001 - a measurement aid, never fatal
                pass

    def now(self) -> Tuple[float, float]:
        """(time, foreign CPU seconds so far)."""
        with self._lock:
            return time.time(), self.total

    @staticmethod
    def cores(a: Tuple[float, float], b: Tuple[float, float]) -> float:
        return (b[1] - a[1]) / (b[0] - a[0]) if b[0] > a[0] else 0.0

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


FOREIGN: Optional[ForeignCpu] = None


def foreign_now() -> Optional[Tuple[float, float]]:
    return FOREIGN.now() if FOREIGN else None


def foreign_cores(since: Optional[Tuple[float, float]]) -> Optional[float]:
    return ForeignCpu.cores(since, FOREIGN.now()) if FOREIGN and since else None


# -- the anchor: a bare job doing the same set-up -----------------------------------------
BARE = os.path.join(HERE, "_recovery_bare.py")
#: the stages each task of the bare job prints (bench/_recovery_bare.py), in order
BARE_STAGES = ("process", "imported", "group", "loaded", "reported", "cpu")


def anchor_checkpoint(work: str, run_dir: Optional[str]) -> str:
    """The ``state.pt`` the anchor loads: the newest checkpoint the on-demand run committed
    (the very file its resumed attempts loaded), else one saved here of the same shape."""
    found = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "checkpoint_*", "state.pt"))) \
        if run_dir else []
    if found:
        return found[-1]
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model(torch.randn(4, 8)).sum().backward()
    opt.step()  # (momentum buffers, as in a resumed state)
    path = os.path.join(work, "bare", "state.pt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": 0}, path)
    return path


def bare_job(work: str, jobs: Jobs, poll: float, state_pt: str,
             timeout: float = 120.0) -> Dict[str, Any]:
    """A bare ``sbatch`` job of the same shape doing by hand what the resumed training
    does (srun, torch, Gloo process group, DDP, the same checkpoint loaded, one step
    reported): sbatch → RUNNING (polled) and rank 0's time of each stage."""
    out_dir = os.path.join(work, "bare")
    os.makedirs(out_dir, exist_ok=True)
    script = os.path.join(out_dir, "bare.sh")
    py = shlex.quote(sys.executable)
    with open(script, "w") as f:
        f.write(f"""#!/bin/bash
#SBATCH --job-name=bench-recovery-bare
#SBATCH --nodes={NODES}
#SBATCH --ntasks-per-node={PER_NODE}
#SBATCH --partition=debug
#SBATCH --time=00:05:00
#SBATCH --output={out_dir}/bare-%j.out
echo "batch $(date +%s.%N)"
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 12000))
srun {py} {shlex.quote(BARE)} {shlex.quote(state_pt)} {out_dir}/results-$SLURM_JOB_ID.jsonl {STEP_SLEEP}
""")
    others = set(jobs.foreign())
    load = foreign_now()
    t0 = time.time()
    p = sh(["sbatch", "--parsable", script], cwd=out_dir)
    if p.returncode != 0:
        raise BenchError(f"sbatch refused the bare job: {p.stderr.strip()}")
    job_id = jobs.add(p.stdout.strip().split(";")[0])
    running = None
    while True:
        now = time.time()
        state = job_info(job_id).get("JobState")
        if running is None and state in ("RUNNING", "COMPLETING", "COMPLETED"):
            running = now
        if state not in ACTIVE:
            break
        if now - t0 > timeout:
            raise BenchError(f"bare job {job_id} still {state} after {timeout:.0f} s")
        time.sleep(poll)
    log = os.path.join(out_dir, f"bare-{job_id}.out")
    text = open(log).read() if os.path.exists(log) else ""
    tasks = {int(m[0]): [float(v) for v in m[1:]]
             for m in re.findall(r"^bare (\d+) (\S+) (\S+) (\S+) (\S+) (\S+) (\S+)$", text,
                                re.M)}
    batch = re.findall(r"^batch (\S+)", text, re.M)
    if state != "COMPLETED" or len(tasks) != NODES * PER_NODE:
        raise BenchError(f"bare job {job_id} ended {state} with {len(tasks)} of "
                         f"{NODES * PER_NODE} tasks:\n{text[-2000:]}")
    rec: Dict[str, Any] = {"job_id": job_id, "submitted": t0, "running": running,
                           "batch": float(batch[0]) if batch else None}
    rec.update(zip(BARE_STAGES, tasks[0]))  # rank 0's, as hpctrain's trace
    rec["imported_all"] = max(t[1] for t in tasks.values())
    rec.update(to_running=running - t0, to_reported=rec["reported"] - t0,
               running_to_reported=rec["reported"] - running,
               foreign_jobs=sorted(others | set(jobs.foreign())),
               foreign_cores=foreign_cores(load))
    return rec


# -- an hpctrain job --------------------------------------------------------------------------
class Trace:
    """Rank 0's trace file (bench/_recovery_loop.py), read incrementally."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pos = 0
        self.buf = ""
        self.events: List[Tuple[str, int, int, float, List[str]]] = []

    def poll(self) -> None:
        try:
            with open(self.path) as f:
                f.seek(self.pos)
                chunk = f.read()
                self.pos = f.tell()
        except FileNotFoundError:
            return
        self.buf += chunk
        *lines, self.buf = self.buf.split("\n")
        for line in lines:
            parts = line.split()
            if len(parts) >= 4:
                self.events.append((parts[0], int(parts[1]), int(parts[2]), float(parts[3]),
                                    parts[4:]))

    def find(self, kind: str, attempt: int, after: float = 0.0):
        return [e for e in self.events if e[0] == kind and e[1] == attempt and e[3] >= after]

    def first(self, kind: str, attempt: int):
        found = self.find(kind, attempt)
        return found[0] if found else None


class HpJob:
    def __init__(self, work: str, key: str, jobs: Jobs, poll: float) -> None:
        label, every, ignore, warning_time = LOOPS[key]
        self.key, self.label, self.every, self.poll = key, label, every, poll
        tag = f"{key}{'-fork' if EXTRA_ENV else ''}-{os.getpid()}"
        self.storage = os.path.join(work, "runs")
        self.run_dir = os.path.join(self.storage, tag)
        self.trace = Trace(os.path.join(work, f"trace-{tag}.txt"))
        self.toml = os.path.join(work, f"job-{tag}.toml")
        with open(self.toml, "w") as f:
            f.write(JOB_TOML.format(loop=LOOP, nodes=NODES, per_node=PER_NODE, name=tag,
                                    storage=self.storage, warning_time=warning_time,
                                    sleep=STEP_SLEEP, every=every,
                                    ignore="true" if ignore else "false",
                                    trace=self.trace.path))
            if EXTRA_ENV:  # --fork-ranks: one process per node imports, forks its ranks
                f.write("\n[env]\n" + "".join(f'{k} = "{v}"\n' for k, v in EXTRA_ENV.items()))
        p = sh([sys.executable, "-m", "hpctrain", "submit", self.toml], cwd=work)
        m = _SUBMITTED.search(p.stdout + p.stderr)
        if p.returncode != 0 or not m:
            raise BenchError(f"hpctrain submit failed (exit {p.returncode}):\n{p.stdout}"
                             f"{p.stderr}")
        self.job_id = jobs.add(m.group(1))
        self.jobs = jobs

    # -- reading the run ---------------------------------------------------------------
    def state(self) -> Dict[str, Any]:
        try:
            with open(os.path.join(self.run_dir, "state.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def stopped_times(self, attempt: int) -> List[float]:
        from hpctrain.rundir.layout import RunDir

        adir = RunDir(self.run_dir).attempt_dir(attempt)
        out = []
        for p in glob.glob(os.path.join(adir, "stopped.rank-*.json")):
            with open(p) as f:
                out.append(json.load(f)["time"])
        return out

    def log_tail(self, n: int = 30) -> str:
        logs = sorted(glob.glob(os.path.join(self.run_dir, "logs", "slurm-*.out")))
        text = "".join(open(p).read() for p in logs)
        return "\n".join(text.rstrip().splitlines()[-n:])

    def fail(self, msg: str) -> BenchError:
        return BenchError(f"{self.label} (job {self.job_id}): {msg}\n--- end of the job's "
                          f"log ---\n{self.log_tail()}")

    def current_attempt(self, timeout: float = 180.0) -> int:
        """The attempt now training (its rank 0 wrote its start line); waits for one."""
        t0 = time.time()
        while True:
            self.trace.poll()
            starts = [e for e in self.trace.events if e[0] == "start"]
            if starts:
                return starts[-1][1]
            if time.time() - t0 > timeout:
                raise self.fail(f"no attempt started within {timeout:.0f} s")
            if job_info(self.job_id).get("JobState") not in ACTIVE:
                raise self.fail("the job ended")
            time.sleep(self.poll)

    # -- waiting -------------------------------------------------------------------------
    def wait_training(self, attempt: int, seconds: float, *, min_step: Optional[int] = None,
                      timeout: float = 180.0) -> None:
        """Until ``attempt`` has reported for ``seconds`` (and reached ``min_step``)."""
        t0 = time.time()
        while True:
            self.trace.poll()
            first = self.trace.first("post", attempt)
            posts = self.trace.find("post", attempt)
            if first and time.time() - first[3] >= seconds and (
                    min_step is None or posts[-1][2] >= min_step):
                return
            if time.time() - t0 > timeout:
                raise self.fail(f"attempt {attempt} did not train for {seconds} s within "
                                f"{timeout:.0f} s")
            if job_info(self.job_id).get("JobState") not in ACTIVE:
                raise self.fail("the job ended")
            time.sleep(self.poll)

    def next_checkpoint_step(self, attempt: int) -> int:
        """The step of the next periodic checkpoint of a running attempt."""
        self.trace.poll()
        step = self.trace.find("post", attempt)[-1][2]
        return (step // self.every + 1) * self.every - 1

    def preempt(self, *, release: bool, timeout: float) -> Dict[str, Any]:
        """Send the warning; follow the job until the resumed attempt's first report."""
        attempt = self.current_attempt()
        restarts0 = int(job_info(self.job_id).get("Restarts", "0"))
        ev: Dict[str, Any] = {"attempt": attempt, "release": release}
        others = set(self.jobs.foreign())
        load = foreign_now()
        ev["warning"] = time.time()
        p = sh(["scancel", "--signal=USR1", "--batch", self.job_id])
        if p.returncode != 0:
            raise self.fail(f"scancel --signal=USR1 --batch failed: {p.stderr.strip()}")
        ev["scancel_returned"] = time.time()
        while True:
            now = time.time()
            info = job_info(self.job_id)
            state, restarts = info.get("JobState"), int(info.get("Restarts", "0") or 0)
            if restarts > restarts0:
                if "requeued" not in ev and state != "RUNNING":
                    ev["requeued"] = now
                if state == "PENDING" and "pending" not in ev:
                    ev["pending"], ev["pending_reason"] = now, info.get("Reason")
                # not in the second the nodes revoked the old instance's credential: a
                # credential issued in that same second counts as revoked (slurmd: "Job N
                # already killed, do not launch batch job") and the job ends FAILED
                if release and state == "PENDING" and "released" not in ev \
                        and now >= int(ev["pending"]) + 1.0:
                    u = sh(["scontrol", "update", f"jobid={self.job_id}", "starttime=now"])
                    if u.returncode == 0:
                        ev["released"] = time.time()
                    else:
                        ev.setdefault("release_errors", []).append(
                            [time.time(), u.stderr.strip()])
                if state == "RUNNING" and "running" not in ev:
                    ev["running"] = now
                    ev.setdefault("requeued", now)
                    ev.setdefault("pending", now)
            elif state not in ACTIVE:
                raise self.fail(f"the job ended ({state}) instead of being requeued")
            self.trace.poll()
            first = self.trace.first("post", attempt + 1)
            if first is not None:
                ev["resumed_report"] = first[3]
                break
            if now - ev["warning"] > timeout:
                raise self.fail(f"no report of attempt {attempt + 1} {timeout:.0f} s after "
                                f"the warning (job {state}, restarts {restarts})")
            time.sleep(self.poll)
        ev.setdefault("running", ev["resumed_report"])
        ev["foreign_jobs"] = sorted(others | set(self.jobs.foreign()))
        ev["foreign_cores"] = foreign_cores(load)
        st = self.state()
        rec = st["attempts"][attempt - 1]
        nxt = st["attempts"][attempt]
        if rec.get("outcome") != "PREEMPTED":
            raise self.fail(f"attempt {attempt} ended {rec.get('outcome')}, not PREEMPTED")
        ev.update(supervisor_warned=rec.get("warned_at"), ended=rec.get("ended"),
                  stopped_at_deadline=rec.get("stopped_at_deadline"),
                  stopped_iterations=rec.get("stopped_iterations"),
                  stop_checkpoint=rec.get("stop_checkpoint"),
                  next_started=nxt.get("started"), resumed_from=nxt.get("resumed_from"))
        stopped = self.stopped_times(attempt)
        ev["ranks_stopped"] = max(stopped) if len(stopped) == NODES * PER_NODE else None
        warned = [e for e in self.trace.find("warned", attempt) if e[3] >= ev["warning"]]
        ev["ranks_agreed"] = warned[0][3] if warned else None
        ev["warned_step"] = warned[0][2] if warned else None
        pres = self.trace.find("pre", attempt)
        start = self.trace.first("start", attempt + 1)
        if not pres or start is None:
            raise self.fail(f"trace incomplete for attempt {attempt} → {attempt + 1}")
        ev["last_step"] = max(e[2] for e in pres)
        ev["resume_step"] = start[2]
        ev["resumed_start"] = start[3]
        cpu_deadline = time.time() + 5.0  # written just after the first report
        while self.trace.first("cpu", attempt + 1) is None and time.time() < cpu_deadline:
            time.sleep(self.poll)
            self.trace.poll()
        cpu = self.trace.first("cpu", attempt + 1)
        ev["resumed_cpu"] = float(cpu[4][0]) if cpu else None
        enter = self.trace.first("enter", attempt + 1)
        ev["resumed_entered"] = enter[3] if enter else None
        ev["resumed_process"] = float(enter[4][0]) if enter and float(enter[4][0]) else None
        ev["resume_restart_count"] = int(start[4][0])
        ev["resume_checkpoint"] = start[4][2]
        ev["steps_after_warning"] = sum(1 for e in pres if e[3] > ev["warning"])
        ev["lost_steps"] = ev["last_step"] - ev["resume_step"] + 1
        return ev


def run_loop(work: str, key: str, jobs: Jobs, *, cycles: int, release: bool, train_s: float,
             poll: float, hold_cycle: bool = False, log=print) -> Tuple[str, List[Dict]]:
    """Submit one job of loop ``key``, preempt it ``cycles`` times (hold released), then
    once more with the hold left alone if ``hold_cycle``; cancel it. Returns its run
    directory and one record per preemption."""
    job = HpJob(work, key, jobs, poll)
    out: List[Dict[str, Any]] = []
    try:
        log(f"  {job.label}: job {job.job_id}, waiting for its first report")
        plan = [release] * cycles + ([False] if hold_cycle else [])
        for i, rel in enumerate(plan):
            attempt = job.current_attempt()
            if job.every and job.key == "every100":
                # the warning right after a periodic checkpoint: the most favourable moment
                # for a loop that the deadline stops (see the README)
                job.wait_training(attempt, 0.5)
                target = job.next_checkpoint_step(attempt)
                job.wait_training(attempt, 0.0, min_step=target, timeout=240)
            else:
                job.wait_training(attempt, train_s)
            ev = job.preempt(release=rel, timeout=90 if rel else 400)
            out.append(ev)
            log(f"    preemption {i + 1}/{len(plan)}{'' if rel else ' (hold kept)'}: "
                f"warning → resumed report {ev['resumed_report'] - ev['warning']:.2f} s, "
                f"lost {ev['lost_steps']} step(s)"
                f"{', stopped at the deadline' if ev['stopped_at_deadline'] else ''}")
    finally:
        jobs.cancel(job.job_id)
    return job.run_dir, out


# -- summaries --------------------------------------------------------------------------------
def med(values: List[Optional[float]]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def spread(values: List[Optional[float]]) -> str:
    values = [v for v in values if v is not None]
    if len(values) < 2:
        return ""
    return f"{min(values):.2f}–{max(values):.2f}"


BREAKDOWN = [  # (label, event, relative to)
    ("warning → supervisor has the signal", "supervisor_warned", "warning"),
    ("warning → rank 0 sees should_checkpoint()", "ranks_agreed", "warning"),
    ("warning → every rank stopped, checkpoint committed", "ranks_stopped", "warning"),
    ("warning → attempt ended (srun step gone)", "ended", "warning"),
    ("warning → job requeued (left RUNNING)", "requeued", "warning"),
    ("warning → PENDING", "pending", "warning"),
    ("warning → RUNNING again", "running", "warning"),
    ("warning → supervisor starts the next attempt", "next_started", "warning"),
    ("warning → rank 0's worker process started", "resumed_process", "warning"),
    ("warning → rank 0 enters the training function (process group up)",
     "resumed_entered", "warning"),
    ("warning → rank 0 has its DDP model and the checkpoint loaded", "resumed_start",
     "warning"),
    ("warning → first report of the resumed training", "resumed_report", "warning"),
    ("  RUNNING again → first resumed report", "resumed_report", "running"),
]


# The restart inside the new allocation against the anchor, stage by stage:
# (label, hpctrain's event, relative to, the bare job's event, relative to).
RESTART_VS_ANCHOR = [
    ("RUNNING (again) → rank 0's process started", "resumed_process", "running",
     "process", "running"),
    ("  process started → training function entered (process group up)", "resumed_entered",
     "resumed_process", "group", "process"),
    ("  → DDP built and checkpoint loaded", "resumed_start", "resumed_entered",
     "loaded", "group"),
    ("  → first report (one step)", "resumed_report", "resumed_start", "reported", "loaded"),
    ("RUNNING (again) → first report", "resumed_report", "running", "reported", "running"),
]
# The anchor's own rows (rank 0's stages; bench/_recovery_bare.py).
ANCHOR_BREAKDOWN = [
    ("RUNNING → rank 0's task process started", "process", "running"),
    ("  → torch imported", "imported", "process"),
    ("  → process group up", "group", "imported"),
    ("  → DDP built and checkpoint loaded", "loaded", "group"),
    ("  → first step reported (JSON line)", "reported", "loaded"),
    ("RUNNING → first step reported", "reported", "running"),
]


def print_fork_comparison(plain: List[Dict], forked: List[Dict]) -> None:
    """``--compare-fork``: the break-down of both modes side by side, medians, ratios."""
    print("\nfast restarts: one interpreter per rank (today) against ranks forked by a node "
          "zygote (HPCTRAIN_FORK_RANKS=1), same bench run, hold released; medians of "
          f"{len(plain)} and {len(forked)} preemptions")
    print(f"{'':68s} {'today':>8s} {'forked':>8s} {'ratio':>7s}")
    for label, event, base in BREAKDOWN:
        a, b = med(durations(plain, event, base)), med(durations(forked, event, base))
        if a is None or b is None:
            continue
        print(f"{label:68s} {a:7.2f}s {b:7.2f}s {b / a if a else float('nan'):6.2f}×")
    a = med(durations(plain, "resumed_report", "warning"))
    b = med(durations(forked, "resumed_report", "warning"))
    if a and b:
        print(f"warning → first resumed report, forked / today = {b / a:.2f}× (target ≤ 0.5×: "
              f"{'met' if b / a <= 0.5 else 'NOT met'})")
    stuck = sum(1 for c in forked if c.get("stopped_at_deadline"))
    if stuck:
        print(f"WARNING: {stuck} forked preemption(s) stopped at the deadline")


def durations(cycles: List[Dict], event: str, base: str) -> List[Optional[float]]:
    return [c[event] - c[base] if c.get(event) is not None and c.get(base) is not None
            else None for c in cycles]


def build_rows(bare: List[Dict], fast: List[Dict], hold: List[Dict],
               loops: Dict[str, List[Dict]]) -> Tuple[List[List[str]], List[List[str]], Dict]:
    rows: List[List[str]] = []
    summary: Dict[str, Any] = {}

    def add(label: str, values: List[Optional[float]], key: str = "", unit: str = "s",
            note: str = "") -> Optional[float]:
        m = med(values)
        n = len([v for v in values if v is not None])
        rows.append([label, unit, "—" if m is None else f"{m:.2f}", spread(values),
                     str(n), note])
        if key:
            summary[key] = m
        return m

    def section(title: str) -> None:
        rows.append([f"[b]{title}[/b]", "", "", "", "", ""])

    bare_start = None
    if bare:
        section("anchor: bare sbatch + srun of the same set-up by hand (torch, Gloo process "
                "group, DDP, the same checkpoint loaded, one step; 2 nodes × 2 tasks)")
        add("sbatch → RUNNING", [b["to_running"] for b in bare], "bare_to_running")
        for label, event, base in ANCHOR_BREAKDOWN:
            add(label, durations(bare, event, base), f"bare_{base}_to_{event}")
        add("RUNNING → every task imported torch (the former anchor)",
            durations(bare, "imported_all", "running"), "bare_running_to_imported")
        bare_start = add("sbatch → first step reported (bare job start)",
                         [b["to_reported"] for b in bare], "bare_start")
        add("  CPU of other processes meanwhile", [b.get("foreign_cores") for b in bare],
            unit="cores")
    for title, cycles, tag in (
            ("on-demand loop, Slurm's requeue hold released at once", fast, "released"),
            ("on-demand loop, Slurm's requeue hold kept (BeginTime)", hold, "hold")):
        if not cycles:
            continue
        section(title)
        for label, event, base in BREAKDOWN:
            if tag == "hold" and event == "pending":
                add(label, durations(cycles, event, base), f"{tag}_{event}",
                    note="reason " + ", ".join(sorted({str(c.get('pending_reason'))
                                                       for c in cycles})))
                continue
            key = f"{tag}_{event}" if base == "warning" else f"{tag}_{base}_to_{event}"
            add(label, durations(cycles, event, base), key)
        if tag == "hold":
            add("  Slurm's hold: PENDING → RUNNING", durations(cycles, "running", "pending"),
                "hold_pending_to_running")
        else:
            add("  PENDING → released (scontrol update starttime=now)",
                durations(cycles, "released", "pending"), "released_pending_to_release")
        add("  CPU of other processes meanwhile", [c.get("foreign_cores") for c in cycles],
            unit="cores")
    # ratios
    ratio_rows: List[List[str]] = []

    def ratio(label: str, a: Optional[float], b: Optional[float], key: str) -> None:
        r = a / b if a is not None and b else None
        summary[key] = r
        ratio_rows.append([label, "—" if a is None else f"{a:.2f} s",
                           "—" if b is None else f"{b:.2f} s", "—" if r is None else f"{r:.2f}×"])

    fast_total = summary.get("released_resumed_report")
    hold_total = summary.get("hold_resumed_report")
    if fast and bare:
        for label, event, base, bevent, bbase in RESTART_VS_ANCHOR:
            ratio(label, med(durations(fast, event, base)),
                  med(durations(bare, bevent, bbase)), f"ratio_{base}_to_{event}")
        ratio("rank 0's CPU time, process start → first report (load-independent)",
              med([c.get("resumed_cpu") for c in fast]), med([b.get("cpu") for b in bare]),
              "ratio_rank0_cpu")
        ratio("warning → resumed report (hold released) / sbatch → first step (bare)",
              fast_total, bare_start, "ratio_released_vs_bare")
    if hold and bare:
        ratio("warning → resumed report (hold kept) / sbatch → first step (bare)", hold_total,
              bare_start, "ratio_hold_vs_bare")
    if hold and fast:
        ratio("warning → resumed report: hold kept / hold released", hold_total, fast_total,
              "ratio_hold_vs_released")
    # lost steps
    lost_rows: List[List[str]] = []
    for key, cycles in loops.items():
        if not cycles:
            continue
        label, every, ignore, warning_time = LOOPS[key]
        lost = [c["lost_steps"] for c in cycles]
        after = [c["steps_after_warning"] for c in cycles]
        stop = durations(cycles, "ended", "warning")
        deadline = sum(1 for c in cycles if c["stopped_at_deadline"])
        summary[f"lost_{key}"] = med(lost)
        lost_rows.append([label, warning_time, str(len(cycles)),
                          f"{deadline} of {len(cycles)}",
                          f"{med(after):.0f}" + (f" ({min(after)}–{max(after)})"
                                                 if len(after) > 1 else ""),
                          f"{med(stop):.2f}", " ".join(str(v) for v in lost),
                          f"{med(lost):g}"])
    return rows, ratio_rows, lost_rows, summary


def print_report(header: List[str], rows, ratio_rows, lost_rows, notes: List[str]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200, highlight=False)
    for line in header:
        console.print(escape(line))
    t = Table(title="1-2. recovery after the warning (seconds from the warning, or as named)",
              title_justify="left")
    for col, just in (("figure", "left"), ("unit", "left"), ("median", "right"),
                      ("min–max", "right"), ("n", "right"), ("note", "left")):
        t.add_column(col, justify=just)
    for r in rows:
        t.add_row(r[0] if r[0].startswith("[b]") else escape(r[0]),
                  *[escape(x) for x in r[1:]])
    console.print(t)
    if ratio_rows:
        t = Table(title="4. against a bare job doing the same set-up (medians; target for "
                        "RUNNING (again) → first report: ≤ 1.2×)", title_justify="left")
        for col, just in (("ratio", "left"), ("hpctrain", "right"), ("anchor", "right"),
                          ("×", "right")):
            t.add_column(col, justify=just)
        for r in ratio_rows:
            t.add_row(*[escape(x) for x in r])
        console.print(t)
    if lost_rows:
        t = Table(title="3. training steps lost per preemption (trained before the stop, "
                        "trained again after the resume; target 0 on demand)",
                  title_justify="left")
        for col, just in (("loop", "left"), ("warning_time", "right"),
                          ("preemptions", "right"), ("stopped at deadline", "right"),
                          ("steps after warning", "right"), ("warning → ended (s)", "right"),
                          ("lost, each", "right"), ("lost, median", "right")):
            t.add_column(col, justify=just)
        for r in lost_rows:
            t.add_row(*[escape(x) for x in r])
        console.print(t)
    for note in notes:
        console.print(escape(note))


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preemptions", type=int, default=None,
                   help="preemptions with the hold released (default 5, --quick 2)")
    p.add_argument("--baseline", type=int, default=None,
                   help="bare jobs for the anchor (default 5, --quick 2)")
    p.add_argument("--periodic", type=int, default=None,
                   help="preemptions of each periodic loop (default 2, --quick 1; 0 skips)")
    p.add_argument("--fork-ranks", action="store_true",
                   help="HPCTRAIN_FORK_RANKS=1 in the jobs' [env]: one process per node "
                        "imports torch once and forks the node's ranks (fast restarts)")
    p.add_argument("--compare-fork", action="store_true",
                   help="after the on-demand preemptions, the same number again with "
                        "HPCTRAIN_FORK_RANKS=1, and a table of both with their ratios")
    p.add_argument("--no-hold-run", action="store_true",
                   help="skip the preemption that waits out Slurm's hold (~2 min)")
    p.add_argument("--quick", action="store_true",
                   help="fewer preemptions, no hold run (about 2.5 min)")
    p.add_argument("--train-s", type=float, default=2.0,
                   help="seconds of training after each (re)start before the warning "
                        "(default %(default)s)")
    p.add_argument("--poll", type=float, default=0.1,
                   help="seconds between two looks at the job (default %(default)s)")
    p.add_argument("--wait-idle", type=float, default=None, metavar="S",
                   help="before each job, wait up to S seconds until no other job is in "
                        "the queue (default 120, --quick 30)")
    p.add_argument("--dir", default=tempfile.gettempdir(),
                   help="where run directories, traces and job files go (default "
                        "%(default)s; must be visible to the cluster's nodes)")
    p.add_argument("--keep", action="store_true", help="keep that directory")
    p.add_argument("--json", metavar="FILE", help="write every timestamp here as JSON")
    args = p.parse_args(argv)
    preemptions = args.preemptions if args.preemptions is not None else (2 if args.quick else 5)
    baseline = args.baseline if args.baseline is not None else (2 if args.quick else 5)
    periodic = args.periodic if args.periodic is not None else (1 if args.quick else 2)
    hold_run = not (args.no_hold_run or args.quick)
    if args.fork_ranks:
        EXTRA_ENV["HPCTRAIN_FORK_RANKS"] = "1"
        EXTRA_ENV["HPCTRAIN_ZYGOTE_VERBOSE"] = "1"  # each rank's end in launcher.out
    wait_idle = args.wait_idle if args.wait_idle is not None else (30 if args.quick else 120)
    cmdline = shlex.join([os.path.basename(sys.executable)] + [
        os.path.relpath(sys.argv[0]) if sys.argv[0] else "bench/bench_recovery.py"]
        + sys.argv[1:])

    problem = cluster_problem()
    if problem:
        print(f"bench_recovery: {problem}", file=sys.stderr)
        return 2

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    t0 = time.time()
    load0 = os.getloadavg()[0]
    os.makedirs(args.dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="hpctrain-bench-recovery-", dir=args.dir)
    jobs = Jobs()
    global FOREIGN
    FOREIGN = ForeignCpu(jobs)
    load_all = FOREIGN.now()
    notes: List[str] = []
    others = jobs.foreign()
    if others:
        notes.append("other jobs were in the queue when the bench started: "
                     + "; ".join(others))
    bare: List[Dict] = []
    forked: List[Dict] = []
    fast: List[Dict] = []
    hold: List[Dict] = []
    loops: Dict[str, List[Dict]] = {}
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    try:
        log(f"bench_recovery: working in {work}")
        jobs.wait_quiet(wait_idle, log)
        log(f"on-demand loop: {preemptions} preemption(s) with the hold released"
            + (", then 1 with the hold kept (~2 min)" if hold_run else ""))
        run_dir, cycles = run_loop(work, "on_demand", jobs, cycles=preemptions, release=True,
                                   train_s=args.train_s, poll=args.poll,
                                   hold_cycle=hold_run, log=log)
        fast = [c for c in cycles if c["release"]]
        hold = [c for c in cycles if not c["release"]]
        loops["on_demand"] = cycles
        if args.compare_fork and not args.fork_ranks:
            EXTRA_ENV.update(HPCTRAIN_FORK_RANKS="1", HPCTRAIN_ZYGOTE_VERBOSE="1")
            try:
                jobs.wait_quiet(wait_idle, log)
                log(f"on-demand loop, ranks forked by a node zygote: {preemptions} "
                    "preemption(s) with the hold released")
                _, fc = run_loop(work, "on_demand", jobs, cycles=preemptions, release=True,
                                 train_s=args.train_s, poll=args.poll, hold_cycle=False,
                                 log=log)
            finally:
                EXTRA_ENV.clear()
            forked = [c for c in fc if c["release"]]
        if baseline:
            # after the on-demand run: the anchor loads the checkpoint it committed
            state_pt = anchor_checkpoint(work, run_dir)
            log(f"anchor: {baseline} bare jobs doing the same set-up, loading {state_pt}")
            jobs.wait_quiet(wait_idle, log)
            bare_job(work, jobs, args.poll, state_pt)  # warm-up: page cache, slurmd
            for i in range(baseline):
                b = bare_job(work, jobs, args.poll, state_pt)
                bare.append(b)
                log(f"  bare job {b['job_id']}: RUNNING → first step "
                    f"{b['running_to_reported']:.2f} s")
        if periodic:
            for key in ("every10", "every100"):
                jobs.wait_quiet(wait_idle, log)
                log(f"{LOOPS[key][0]}: {periodic} preemption(s), hold released")
                _, loops[key] = run_loop(work, key, jobs, cycles=periodic, release=True,
                                         train_s=args.train_s, poll=args.poll, log=log)
    except KeyboardInterrupt:
        print("bench_recovery: interrupted; cancelling its jobs", file=sys.stderr)
        jobs.cancel_all()
        return 130
    except BenchError as e:
        print(f"bench_recovery: FAILED: {e}", file=sys.stderr)
        jobs.cancel_all()
        print(f"(its files are kept in {work})", file=sys.stderr)
        return 1
    finally:
        jobs.cancel_all()
        other_cores = foreign_cores(load_all)
        FOREIGN.stop()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)

    top = sorted(FOREIGN.top.items(), key=lambda kv: -kv[1])[:4]
    notes.append(f"other processes used {other_cores:.2f} cores on average during the bench"
                 + (" (most: " + ", ".join(f"{k} {v:.0f} s" for k, v in top) + ")"
                    if top and other_cores >= 0.05 else ""))
    busy = [c.get("foreign_cores") for c in bare + [c for v in loops.values() for c in v]]
    busy = [b for b in busy if b is not None]
    if busy and max(busy) > 0.2:
        notes.append(f"WARNING: other processes used up to {max(busy):.2f} cores during a "
                     "measurement (this machine has "
                     f"{os.cpu_count()}): the timings of those samples are too high")
    disturbed = sorted({j for cycles in [bare, *loops.values()] for c in cycles
                        for j in c.get("foreign_jobs", [])})
    if disturbed:
        notes.append("WARNING: other jobs were in the queue during the measurements (they "
                     "share this machine's CPUs and move the timings): " + "; ".join(disturbed))
    # checks: the resumed attempt must start where the committed checkpoint says
    for key, cycles in loops.items():
        for c in cycles:
            if c["resume_restart_count"] != c["attempt"]:
                notes.append(f"{key}: attempt {c['attempt'] + 1} reports restart count "
                             f"{c['resume_restart_count']}, expected {c['attempt']}")
            if key == "on_demand" and (c["stopped_at_deadline"] or c["lost_steps"] != 0):
                notes.append(f"on_demand: preemption of attempt {c['attempt']} lost "
                             f"{c['lost_steps']} step(s) (deadline: {c['stopped_at_deadline']})")

    from hpctrain import __version__

    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    slurm = sh(["sbatch", "--version"]).stdout.strip()
    nodes = sh(["sinfo", "-h", "-N", "-o", "%N:%c"]).stdout.split()
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
            cpu = m.group(1).strip() if m else cpu
    except OSError:
        pass
    header = [
        f"command: {cmdline}",
        f"machine: nproc {os.cpu_count()} ({cpu}), Linux {platform.release()}; "
        f"{slurm}, test cluster nodes {' '.join(sorted(set(nodes)))} (CPUs each); python "
        f"{platform.python_version()}, torch {torch_version}, hpctrain {__version__}",
        f"jobs: {NODES} nodes × {PER_NODE} workers (srun), bench/_recovery_loop.py, "
        f"{STEP_SLEEP} s sleep per step; warning = scancel --signal=USR1 --batch; job state "
        f"polled every {args.poll} s; {len(fast)} preemption(s) hold released, {len(hold)} "
        f"hold kept, {len(bare)} bare jobs; bench took {time.time() - t0:.0f} s; load average "
        f"{load0:.1f} before, {os.getloadavg()[1]:.1f} over its last 5 min",
    ]
    rows, ratio_rows, lost_rows, summary = build_rows(bare, fast, hold, loops)
    if not hold_run:
        notes.append("hold kept: skipped (" + ("--quick" if args.quick else "--no-hold-run")
                     + ")")
    print_report(header, rows, ratio_rows, lost_rows, notes)
    if forked:
        print_fork_comparison(fast, forked)
    if args.json:
        doc = {"command": cmdline, "header": header, "notes": notes, "summary": summary,
               "bare": bare, "released": fast, "hold": hold, "loops": loops,
               "jobs": jobs.ids}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
