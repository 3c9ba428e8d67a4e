"""Helpers for tests that run against the real test Slurm cluster
(``scripts/slurm-cluster.sh``: Debian's slurm-wlm, nodes n1, n2 on this machine)."""
import os
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_cluster() -> None:
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "slurm-cluster.sh"), "start"],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"the test Slurm cluster did not start:\n{p.stdout}\n{p.stderr}")


def sbatch(script: str, *, timeout: float = 120.0, cwd: str = "/tmp") -> str:
    """Submit a batch script (text) from ``cwd``, wait until the job left the queue; return
    its id. Job state comes from squeue (this cluster has no accounting, like many real
    ones)."""
    p = subprocess.run(["sbatch", "--parsable"], input=script, capture_output=True, text=True,
                       check=True, cwd=cwd)
    job_id = p.stdout.strip().split(";")[0]
    for _ in range(int(timeout / 0.5)):
        q = subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True)
        if not q.stdout.strip():
            return job_id
        time.sleep(0.5)
    subprocess.run(["scancel", job_id])
    raise TimeoutError(f"Slurm job {job_id} still queued or running after {timeout} s")


def squeue_state(job_id: str):
    """``(state, reason)`` of a job from squeue, or None once it left the queue."""
    q = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %r"], capture_output=True,
                       text=True)
    line = q.stdout.strip()
    if not line:
        return None
    state, _, reason = line.partition(" ")
    return state, reason


class HoldReleaser:
    """Releases Slurm's hold on a requeued job (PENDING, reason BeginTime, ~120 s on this
    Slurm) with ``scontrol update jobid=<id> starttime=now`` — a background thread, for
    tests that requeue jobs many times.

    It waits ``settle_s`` after the hold appears: released at once, the new instance was
    seen to start before the nodes finished ending the old one, and slurmctld then killed
    it for good ("Killing non-startable batch JobId=…: Job credential revoked"). The hold
    is there for that reason on real clusters too."""

    def __init__(self, job_id: str, poll_s: float = 0.2, settle_s: float = 1.5):
        import threading

        self.job_id = job_id
        self.releases = 0
        self._stop = threading.Event()
        self._poll_s = poll_s
        self._settle_s = settle_s
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        held_since = None
        while not self._stop.is_set():
            st = squeue_state(self.job_id)
            if st is not None and st[0] == "PENDING" and "BeginTime" in st[1]:
                held_since = held_since or time.monotonic()
                if time.monotonic() - held_since >= self._settle_s:
                    subprocess.run(["scontrol", "update", f"jobid={self.job_id}",
                                    "starttime=now"], capture_output=True)
                    self.releases += 1
                    held_since = None
            else:
                held_since = None
            self._stop.wait(self._poll_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def wait_gone(job_id: str, timeout: float) -> None:
    """Wait until the job left the queue; cancel it and fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while squeue_state(job_id) is not None:
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id])
            raise TimeoutError(f"Slurm job {job_id} still queued or running after {timeout} s")
        time.sleep(0.5)
