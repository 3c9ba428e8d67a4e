"""Helpers for tests that run against the real test Slurm cluster
(``scripts/slurm-cluster.sh``: Debian's slurm-wlm, nodes n1, n2 on this machine)."""
import os
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
