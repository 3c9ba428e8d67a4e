"""Rendering for everyday operations (issue 17): nodes derived from a site's GPUs per
node, a site's GPU launcher options left out of CPU jobs, the launch line shown in the
script, node minimums. Exact directive and comment lines, as in test_render.py."""
import os
import sys

import pytest

from hpctrain.errors import ConfigError
from test_render import RUN, config_error, directives, load, render

PY = sys.executable


def launch_comment(script: str) -> list:
    """The lines under "Each attempt starts the ranks with:", without the comment lead."""
    lines = script.splitlines()
    at = lines.index("#     Each attempt starts the ranks with:")
    out = []
    for line in lines[at + 1:]:
        if not line.startswith("#       "):
            break
        out.append(line[len("#       "):])
    return out


GPU = '[scheduler]\naccount = "m1"\n[scaling]\nuse_gpu = true\nnum_workers = {n}\n'


def test_eight_gpu_workers_on_four_gpu_nodes_take_two_nodes(tmp_path):
    script = render(tmp_path, GPU.format(n=8), site="perlmutter")
    assert directives(script)[1:5] == ["--nodes=2", "--ntasks-per-node=4",
                                       "--cpus-per-task=32", "--gpus-per-node=4"]
    assert launch_comment(script) == [
        f"srun --kill-on-bad-exit=1 --nodes=2 --ntasks=8 --ntasks-per-node=4 "
        f"--cpus-per-task=32 --gpu-bind=none {PY} -m hpctrain.worker {RUN}"]


def test_six_gpu_workers_spread_evenly_and_four_fit_one_node(tmp_path):
    script = render(tmp_path, GPU.format(n=6), site="perlmutter")
    assert directives(script)[1:3] == ["--nodes=2", "--ntasks-per-node=3"]
    script = render(tmp_path, GPU.format(n=4), site="juwels-booster")
    assert directives(script)[1:3] == ["--nodes=1", "--ntasks-per-node=4"]


def test_gpu_workers_that_cannot_fill_nodes_evenly_are_refused(tmp_path):
    e = config_error(tmp_path, GPU.format(n=7), site="perlmutter")
    assert e.message == ("scaling.num_workers: 7 workers × 1 GPU(s) need 2 nodes of 4 GPUs "
                         "(constraint 'gpu' of site 'perlmutter'), but do not spread evenly "
                         "over 2 nodes")
    assert e.hint.startswith("use a multiple of 2 workers (up to 8), or set scaling.num_nodes")
    assert e.file.endswith("job.toml")


def test_a_worker_needing_more_gpus_than_a_node_has_is_refused(tmp_path):
    e = config_error(tmp_path, GPU.format(n=2) + "gpus_per_worker = 8\n", site="juwels-booster")
    assert e.message == ("scaling.gpus_per_worker: each worker asks for 8 GPUs but nodes of "
                         "site 'juwels-booster' have 4")


def test_explicit_nodes_are_kept(tmp_path):
    script = render(tmp_path, GPU.format(n=8) + "num_nodes = 4\n", site="perlmutter")
    assert directives(script)[1:3] == ["--nodes=4", "--ntasks-per-node=2"]


def test_a_cpu_job_gets_none_of_the_sites_gpu_launcher_options(tmp_path):
    body = ('[scheduler]\naccount = "m1"\nconstraint = "cpu"\n'
            '[scaling]\nnum_workers = 4\nnum_nodes = 2\n')
    script = render(tmp_path, body, site="perlmutter")
    assert "--gpus-per-node" not in script
    assert launch_comment(script) == [
        f"srun --kill-on-bad-exit=1 --nodes=2 --ntasks=4 --ntasks-per-node=2 "
        f"--cpus-per-task=32 {PY} -m hpctrain.worker {RUN}"]
    # the same job with GPUs keeps them
    gpu = render(tmp_path, body.replace('"cpu"', '"gpu"') + "use_gpu = true\n",
                 site="perlmutter")
    assert "--gpu-bind=none" in launch_comment(gpu)[0]


def test_the_job_files_own_gpu_launcher_options_also_leave_cpu_jobs(tmp_path):
    body = ('[scheduler]\nkind = "slurm"\nlauncher_args = ["--gpus-per-task", "1", '
            '"--cpu-bind=cores"]\n[scaling]\nnum_workers = 2\n')
    assert launch_comment(render(tmp_path, body)) == [
        f"srun --kill-on-bad-exit=1 --nodes=1 --ntasks=2 --ntasks-per-node=2 "
        f"--cpu-bind=cores {PY} -m hpctrain.worker {RUN}"]


def test_the_launch_line_of_a_pbs_job_names_the_dialect(tmp_path):
    body = '[scheduler]\naccount = "p1"\n[scaling]\nnum_workers = 4\nworkers_per_node = 2\n'
    script = render(tmp_path, body, site="generic-pbs")
    line, note = launch_comment(script)
    assert line.endswith(f" {PY} -m hpctrain.worker {RUN}")
    assert '"$PBS_NODEFILE"' in line
    assert note.startswith("(the mpiexec dialect is read from `mpiexec --version` in the job;")


def test_polaris_launch_line_is_pals_throughout(tmp_path):
    """Polaris's launcher_args are PALS's (--depth, --cpu-bind): the comment shows PALS's
    -n/--ppn with them, whatever MPI this machine has, not Open MPI's --map-by beside them."""
    body = ('[scheduler]\naccount = "p1"\n[scheduler.directives]\nfilesystems = "home"\n'
            '[scaling]\nnum_workers = 8\nuse_gpu = true\n')
    assert launch_comment(render(tmp_path, body, site="polaris")) == [
        f'mpiexec -n 8 --ppn 4 --hostfile "$PBS_NODEFILE" --depth=8 --cpu-bind depth '
        f"{PY} -m hpctrain.worker {RUN}",
        "(the mpiexec dialect is read from `mpiexec --version` in the job; shown: pals, as "
        "its launcher_args say; Open MPI adds -x NAME per variable)"]


@pytest.mark.parametrize("gpus, per_task", [(1, "--gpus-per-task=1"), (2, "--gpus-per-task=2")])
def test_frontier_gpu_launch_line_has_each_option_once(tmp_path, gpus, per_task):
    body = GPU.format(n=8) + f"gpus_per_worker = {gpus}\n"
    line, = launch_comment(render(tmp_path, body, site="frontier"))
    nodes = 8 * gpus // 8
    assert line == (f"srun --kill-on-bad-exit=1 --nodes={nodes} --ntasks=8 "
                    f"--ntasks-per-node={8 // nodes} {per_task} --cpus-per-task=7 "
                    f"--gpu-bind=closest {PY} -m hpctrain.worker {RUN}")


def test_a_job_files_srun_option_replaces_hpctrains_own(tmp_path):
    body = ('[scheduler]\nkind = "slurm"\nlauncher_args = ["--cpus-per-task", "6"]\n'
            '[scaling]\nnum_workers = 2\ncpus_per_worker = 4\n')
    assert launch_comment(render(tmp_path, body)) == [
        f"srun --kill-on-bad-exit=1 --nodes=1 --ntasks=2 --ntasks-per-node=2 "
        f"--cpus-per-task 6 {PY} -m hpctrain.worker {RUN}"]


def test_the_launch_line_comment_is_what_the_batch_step_runs(tmp_path):
    """The comment and the supervisor's launcher build the argv from one function."""
    from hpctrain.launchers import launcher_for
    from hpctrain.launchers.srun import srun_argv

    spec = load(tmp_path, GPU.format(n=8), site="perlmutter")
    launcher = launcher_for(spec)
    argv = srun_argv(nodes=launcher.nodes, workers_per_node=launcher.workers_per_node,
                     cpus_per_worker=launcher.cpus_per_worker,
                     gpus_per_worker=launcher.gpus_per_worker, extra_args=launcher.extra_args,
                     command=[PY, "-m", "hpctrain.worker", RUN])
    from hpctrain.schedulers import BatchRequest

    assert launch_comment(BatchRequest(spec, RUN).materialize()) == [" ".join(argv)]


# --------------------------------------------------------------------------- site facts
def exports(script: str) -> dict:
    return dict(l[len("export "):].split("=", 1) for l in script.splitlines()
                if l.startswith("export ") and not l.startswith("export HPCTRAIN_JOB_STARTED"))


def test_jean_zay_h100_jobs_get_24_cpus_per_task_and_an_h100_account(tmp_path):
    body = '[scheduler]\naccount = "abc@h100"\n[scaling]\nnum_workers = 4\nuse_gpu = true\n'
    script = render(tmp_path, body, site="jean-zay")
    assert directives(script)[1:5] == ["--nodes=1", "--ntasks-per-node=4",
                                       "--cpus-per-task=24", "--gpus-per-node=4"]
    assert "--account=abc@h100" in directives(script)
    assert "--cpus-per-task=24" in launch_comment(script)[0]


@pytest.mark.parametrize("account, message", [
    (None, "scheduler.account: constraint 'h100' requires an account of the form "
           "<project>@h100"),
    ('"abc@v100"', "scheduler.account: 'abc@v100' is not of the form <project>@h100 that "
                   "constraint 'h100' requires"),
    ('"abc"', "scheduler.account: 'abc' is not of the form <project>@h100 that "
              "constraint 'h100' requires"),
])
def test_jean_zay_refuses_a_missing_or_wrong_account(tmp_path, account, message):
    body = ("[scheduler]\n" + (f"account = {account}\n" if account else "")
            + "[scaling]\nnum_workers = 4\nuse_gpu = true\n")
    e = config_error(tmp_path, body, site="jean-zay")
    assert e.message == message
    assert "jean-zay.toml" in e.hint


def test_jean_zay_v100_takes_a_v100_account(tmp_path):
    body = ('[scheduler]\naccount = "abc@v100"\nconstraint = "v100-32g"\n'
            '[scaling]\nnum_workers = 4\nuse_gpu = true\ncpus_per_worker = 10\n')
    assert "--account=abc@v100" in directives(render(tmp_path, body, site="jean-zay"))


def test_polaris_prod_refuses_jobs_below_its_node_minimum(tmp_path):
    body = ('[scheduler]\naccount = "p1"\nqueue = "prod"\n'
            '[scaling]\nnum_nodes = {n}\nworkers_per_node = 4\n')
    e = config_error(tmp_path, body.format(n=2), site="polaris")
    assert e.message == ("scaling.num_nodes: 2 node(s) requested, but partition 'prod' takes "
                         "jobs of 10 nodes or more")
    assert e.hint.startswith("ask for more nodes, or pick a queue/partition for small jobs")
    assert "-l select=10:" in render(tmp_path, body.format(n=10), site="polaris")
    # the debug queue (the site's default) takes 2
    assert "-l select=2:" in render(tmp_path, body.format(n=2).replace('queue = "prod"\n', ""),
                                    site="polaris")


def test_juwels_rendezvous_goes_to_the_infiniband_hostname(tmp_path):
    from hpctrain.cluster_env import worker_info_from_env

    script = render(tmp_path, '[scheduler]\naccount = "p1"\n[scaling]\nnum_workers = 4\n'
                    'use_gpu = true\n', site="juwels-booster")
    env = {k: v.strip('"') for k, v in exports(script).items()}
    assert env["HPCTRAIN_MASTER_ADDR_SUFFIX"] == "i"
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "ib0"
    # what a rank of that job computes from srun's variables and the exported ones
    slurm = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "jwb[0097,0101]",
             "SLURM_JOB_NODELIST": "jwb[0097,0101]", "SLURM_NTASKS": "8",
             "SLURM_STEP_NUM_TASKS": "8", "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
             "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
             "SLURM_NODEID": "1"}
    info = worker_info_from_env({**slurm, **env}, hostname="jwb0101")
    assert info.master_addr == "jwb0097i" and info.hosts == ("jwb0097", "jwb0101")
    assert worker_info_from_env(slurm, hostname="jwb0101").master_addr == "jwb0097"


@pytest.mark.parametrize("body, message", [
    ('[limits]\nmin_nodes = -1\n', "limits.min_nodes: expected an integer ≥ 0, got -1"),
    ('[limits]\naccount_form = 3\n', 'limits.account_form: expected a string such as '
                                     '"<project>@h100", got 3'),
])
def test_new_site_keys_are_checked(tmp_path, monkeypatch, body, message):
    from hpctrain.spec import load_site

    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "mine.toml").write_text('[site]\nscheduler = "slurm"\n' + body)
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(sites))
    with pytest.raises(ConfigError) as info:
        load_site("mine")
    assert info.value.message == message
