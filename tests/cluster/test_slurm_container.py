"""Ranks inside a real container on the test Slurm cluster: Charliecloud's ch-run (the
runtime this machine can run; scripts/container-image.sh builds its image) starts each of
2 ranks on 2 nodes in a minimal Debian image that holds no Python of its own — the host's
interpreter and the checkout are bound in through [container] binds. The training
checkpoints on a preemption warning, is requeued, and resumes inside the container."""
import getpass
import json
import os
import shlex
import subprocess
import sys
import time

import pytest

from helpers import (SUPPORT, cli, container_image, host_python_binds, run_state, wait_for,
                     workload, write_job)
from slurm import HoldReleaser, wait_gone
from test_slurm_recovery import assert_chain_is_lossless, lines

pytestmark = [pytest.mark.slow, pytest.mark.cluster("slurm")]


@pytest.mark.timeout(600)
def test_two_ranks_on_two_nodes_train_in_a_container_through_a_warning_and_a_resume(
        request, tmp_path, storage):
    binds = host_python_binds()
    image = container_image(*binds, storage)
    request.addfinalizer(lambda: os.removedirs(image + storage))  # (and its empty parents)
    job = write_job(
        tmp_path, "boxed", site="test-cluster", entrypoint=workload("workloads:contained"),
        storage=storage, scaling={"num_nodes": 2, "workers_per_node": 1},
        scheduler={"time": "00:10:00"}, failure='warning_time = "60s"',
        # the batch step and the ranks import this hpctrain; ch-run needs $USER
        env={"PYTHONPATH": os.pathsep.join(
            [SUPPORT, *[d for d in binds if os.path.isdir(os.path.join(d, "hpctrain"))]]), "USER": getpass.getuser()},
        container=(f'runtime = "charliecloud"\nimage = {json.dumps(image)}\n'
                   f'python = {json.dumps(sys.executable)}\nbinds = {{'
                   + ", ".join(f"{json.dumps(d)} = true" for d in binds) + "}"),
        config={"steps": 300, "sleep": 0.05, "every": 0, "sleep_attempts": 1})
    run = os.path.join(storage, "boxed")

    # the rendered script shows the exact command each rank runs: srun, then ch-run
    script = cli("render", job).stdout
    wrapper = ["ch-run", f"--bind={storage}:{storage}",
               *[f"--bind={d}:{d}" for d in binds], image, "--"]
    launch = ("srun --kill-on-bad-exit=1 --nodes=2 --ntasks=2 --ntasks-per-node=1 "
              + shlex.join([*wrapper, sys.executable, "-m", "hpctrain.worker", run]))
    assert f"#       {launch}\n" in script

    job_id = cli("submit", job).stdout.split("submitted slurm job ")[1].split()[0]
    releaser = HoldReleaser(job_id)
    try:
        wait_for(lambda: os.path.exists(os.path.join(run, "test-out", "starts-rank-1.txt")),
                 120, "both ranks to start")
        time.sleep(2)  # mid-training
        subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], check=True)
        wait_gone(job_id, 300)
    finally:
        releaser.stop()
        subprocess.run(["scancel", job_id])
    # warned at the same step on both ranks, checkpointed, requeued, resumed right after
    assert_chain_is_lossless(run, 1, ranks=2)
    assert run_state(run)["status"] == "FINISHED"
    # every rank of both attempts ran in the image, one on each node
    where = lines(run, "container", 2)
    marker = "hpctrain test image (bookworm, minbase)".split()
    assert [w[0] for w in where[0]] == ["1", "2"] and [w[0] for w in where[1]] == ["1", "2"]
    assert all(w[2:] == marker for rows in where.values() for w in rows), where
    assert {w[1] for w in where[0]} | {w[1] for w in where[1]} == {"n1", "n2"}
    assert all(where[0][i][1] != where[1][i][1] for i in range(2)), where
