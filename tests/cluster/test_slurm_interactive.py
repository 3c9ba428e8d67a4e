"""`hpctrain run` and a Python fit() inside `salloc -N2 --ntasks-per-node=2` on the test cluster: the ranks
run on the allocation's two nodes with srun, not all on the node the command runs on."""
import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT, SUPPORT, workload, write_job

pytestmark = pytest.mark.cluster("slurm")

SALLOC = ["salloc", "-N2", "--ntasks-per-node=2", "-p", "debug", "-t", "5"]


def salloc(*command, cwd):
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{SUPPORT}")  # this checkout's hpctrain
    return subprocess.run([*SALLOC, *command], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def ranks(run):
    out = os.path.join(run, "test-out")
    return sorted((json.load(open(os.path.join(out, n))) for n in os.listdir(out)
                   if n.startswith("info-rank-")), key=lambda i: i["rank"])


def test_hpctrain_run_inside_salloc_uses_both_nodes_with_srun(tmp_path, storage):
    job = write_job(tmp_path, "inter", entrypoint=workload("workloads:deterministic_with_info"),
                    storage=storage, scaling={"num_workers": 4}, config={"epochs": 2})
    p = salloc(sys.executable, "-m", "hpctrain", "run", job, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    job_id = p.stderr.split("Granted job allocation ")[1].split()[0]
    assert (f"[hpctrain] inside slurm allocation {job_id} (n1, n2): 4 workers on 2 "
            "node(s) with srun\n") in p.stdout
    assert "run FINISHED" in p.stdout and "login node" not in p.stderr
    info = ranks(os.path.join(storage, "inter"))
    assert [(i["rank"], i["node"], i["local_rank"]) for i in info] == [
        (0, "n1", 0), (1, "n1", 1), (2, "n2", 0), (3, "n2", 1)]
    assert {i["master_addr"] for i in info} == {"n1"}


def test_a_python_fit_inside_salloc_uses_both_nodes(tmp_path, storage):
    script = tmp_path / "train.py"
    script.write_text(
        "import workloads\n"
        "from hpctrain import RunConfig, ScalingConfig\n"
        "from hpctrain.torch import TorchTrainer\n"
        "r = TorchTrainer(workloads.deterministic_with_info, train_loop_config={'epochs': 1},\n"
        "                 scaling_config=ScalingConfig(num_workers=2),\n"
        f"                 run_config=RunConfig(name='py', storage_path={storage!r})).fit()\n"
        "print('status', r.metrics['epoch'])\n")
    p = salloc(sys.executable, str(script), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 workers on 2 node(s) with srun" in p.stdout and "status 0" in p.stdout
    assert [i["node"] for i in ranks(os.path.join(storage, "py"))] == ["n1", "n2"]
