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
        f"--cpus-per-task=32 --gpu-bind=none {PY} -m hpctrain._internal.worker {RUN}"]


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
        f"--cpus-per-task=32 {PY} -m hpctrain._internal.worker {RUN}"]
    # the same job with GPUs keeps them
    gpu = render(tmp_path, body.replace('"cpu"', '"gpu"') + "use_gpu = true\n",
                 site="perlmutter")
    assert "--gpu-bind=none" in launch_comment(gpu)[0]


def test_the_job_files_own_gpu_launcher_options_also_leave_cpu_jobs(tmp_path):
    body = ('[scheduler]\nkind = "slurm"\nlauncher_args = ["--gpus-per-task", "1", '
            '"--cpu-bind=cores"]\n[scaling]\nnum_workers = 2\n')
    assert launch_comment(render(tmp_path, body)) == [
        f"srun --kill-on-bad-exit=1 --nodes=1 --ntasks=2 --ntasks-per-node=2 "
        f"--cpu-bind=cores {PY} -m hpctrain._internal.worker {RUN}"]


def test_the_launch_line_of_a_pbs_job_names_the_dialect(tmp_path):
    body = '[scheduler]\naccount = "p1"\n[scaling]\nnum_workers = 4\nworkers_per_node = 2\n'
    script = render(tmp_path, body, site="generic-pbs")
    line, note = launch_comment(script)
    assert line.endswith(f" {PY} -m hpctrain._internal.worker {RUN}")
    assert '"$PBS_NODEFILE"' in line
    assert note.startswith("(the mpiexec dialect is read from `mpiexec --version` in the job;")


def test_the_launch_line_comment_is_what_the_batch_step_runs(tmp_path):
    """The comment and the supervisor's launcher build the argv from one function."""
    from hpctrain.launchers import launcher_for
    from hpctrain.launchers.srun import srun_argv

    spec = load(tmp_path, GPU.format(n=8), site="perlmutter")
    launcher = launcher_for(spec)
    argv = srun_argv(nodes=launcher.nodes, workers_per_node=launcher.workers_per_node,
                     cpus_per_worker=launcher.cpus_per_worker,
                     gpus_per_worker=launcher.gpus_per_worker, extra_args=launcher.extra_args,
                     command=[PY, "-m", "hpctrain._internal.worker", RUN])
    from hpctrain.schedulers import BatchRequest

    assert launch_comment(BatchRequest(spec, RUN).materialize()) == [" ".join(argv)]
