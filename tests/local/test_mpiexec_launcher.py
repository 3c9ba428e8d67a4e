"""The MPI launcher (hpctrain.launchers.mpiexec): argv tables for the three flavors,
flavor detection from real ``--version`` banners, and real trainings started by Open
MPI's ``mpirun`` through the supervisor (skipped only where mpirun is not installed;
scripts/slurm-cluster.sh installs openmpi-bin)."""
from __future__ import annotations

import doctest
import json
import os
import shutil
import stat
import subprocess
import sys
import time
import uuid

import pytest

import hpctrain
import workloads
from helpers import assert_same_state, final_state, needs_mpirun, run_state
from hpctrain import FailureConfig, RunConfig, ScalingConfig, TrainingFailedError
from hpctrain.rundir.layout import RunDir
from hpctrain.allocation.supervisor import AttemptPlan, Supervisor
from hpctrain.errors import ConfigError
from hpctrain.launchers import mpiexec as mpx
from hpctrain.launchers.mpiexec import (
    DEFAULT_EXPORT_PREFIXES,
    MpiexecLauncher,
    detect_flavor,
    flavor_from_version_text,
    mpiexec_argv,
)
from hpctrain.run import Run, driver_pythonpath
from hpctrain.result import result_or_raise

CMD = ["/usr/bin/python3", "-m", "hpctrain.worker", "/runs/r1"]


def test_module_doctests():
    assert doctest.testmod(mpx).failed == 0


# ------------------------------------------------------------------- argv tables

ENV = {"HPCTRAIN_JOB_ID": "42", "PYTHONPATH": "/src", "HOME": "/root", "NCCL_DEBUG": "WARN"}


@pytest.mark.parametrize("flavor, kw, expected", [
    pytest.param("openmpi", dict(executable="mpirun", num_workers=2), [
        "mpirun", "-np", "2", "-x", "HPCTRAIN_JOB_ID", "-x", "NCCL_DEBUG",
        "-x", "PYTHONPATH", *CMD], id="openmpi-minimal"),
    pytest.param("openmpi", dict(executable="/opt/ompi/bin/mpirun", num_workers=8,
                                 workers_per_node=4, hostfile="/var/spool/pbs/aux/7.pbs",
                                 extra_args=["--bind-to", "none"]), [
        "/opt/ompi/bin/mpirun", "-np", "8", "--hostfile", "/var/spool/pbs/aux/7.pbs",
        "--map-by", "ppr:4:node", "-x", "HPCTRAIN_JOB_ID", "-x", "NCCL_DEBUG",
        "-x", "PYTHONPATH", "--bind-to", "none", *CMD], id="openmpi-full"),
    pytest.param("openmpi", dict(executable="mpirun", num_workers=3, env={}), [
        "mpirun", "-np", "3", *CMD], id="openmpi-nothing-to-export"),
    pytest.param("mpich", dict(executable="mpiexec", num_workers=2), [
        "mpiexec", "-n", "2", *CMD], id="mpich-minimal"),
    pytest.param("mpich", dict(executable="mpiexec.hydra", num_workers=8, workers_per_node=4,
                               hostfile="/var/spool/pbs/aux/7.pbs",
                               extra_args=["-bind-to", "core"]), [
        "mpiexec.hydra", "-n", "8", "-ppn", "4", "-f", "/var/spool/pbs/aux/7.pbs",
        "-bind-to", "core", *CMD], id="mpich-full"),
    pytest.param("pals", dict(executable="mpiexec", num_workers=2), [
        "mpiexec", "-n", "2", *CMD], id="pals-minimal"),
    # ALCF Polaris style: 4 ranks per node, 8 cores each, bound by depth
    pytest.param("pals", dict(executable="mpiexec", num_workers=16, workers_per_node=4,
                              hostfile="/var/spool/pbs/aux/7.polaris",
                              extra_args=["--depth=8", "--cpu-bind", "depth"]), [
        "mpiexec", "-n", "16", "--ppn", "4", "--hostfile", "/var/spool/pbs/aux/7.polaris",
        "--depth=8", "--cpu-bind", "depth", *CMD], id="pals-polaris"),
    pytest.param("openmpi", dict(executable="mpirun", num_workers=2,
                                 hostfile="hosts with space.txt", env={}), [
        "mpirun", "-np", "2", "--hostfile", "hosts with space.txt", *CMD],
        id="no-shell-quoting"),
])
def test_argv_table(flavor, kw, expected):
    args = dict(workers_per_node=None, hostfile=None, extra_args=(), command=CMD, env=ENV)
    args.update(kw)
    assert mpiexec_argv(flavor, **args) == expected


def test_open_mpi_exports_exactly_the_prefixed_names_sorted():
    env = {name: "v" for name in (
        "PATH", "HOME", "LD_LIBRARY_PATH", "SLURM_JOB_ID", "PBS_JOBID", "MY_PYTHONPATH",
        "OMPI_ALLOW_RUN_AS_ROOT",           # OMPI_ is not OMP_
        "TORCH_HOME", "PYTHONUNBUFFERED", "HPCTRAIN_RUN_DIR", "MASTER_PORT", "GLOO_SOCKET_IFNAME",
        "OMP_NUM_THREADS", "NCCL_IB_DISABLE", "CUDA_VISIBLE_DEVICES", "PYTHONPATH",
        "ROCR_VISIBLE_DEVICES", "HPCTRAIN_ATTEMPT", "MASTER_ADDR")}
    argv = mpiexec_argv("openmpi", executable="mpirun", num_workers=2, workers_per_node=None,
                        hostfile=None, extra_args=(), command=CMD, env=env)
    exported = argv[3:-len(CMD)]
    assert exported[0::2] == ["-x"] * (len(exported) // 2)
    assert exported[1::2] == [
        "CUDA_VISIBLE_DEVICES", "GLOO_SOCKET_IFNAME", "HPCTRAIN_ATTEMPT", "HPCTRAIN_RUN_DIR",
        "MASTER_ADDR", "MASTER_PORT", "NCCL_IB_DISABLE", "OMP_NUM_THREADS", "PYTHONPATH",
        "PYTHONUNBUFFERED", "ROCR_VISIBLE_DEVICES", "TORCH_HOME"]
    # own prefixes replace the defaults; the other flavors never export by name
    own = mpiexec_argv("openmpi", executable="mpirun", num_workers=2, workers_per_node=None,
                       hostfile=None, extra_args=(), command=CMD, env=env,
                       export_prefixes=("PATH", "LD_"))
    assert own == ["mpirun", "-np", "2", "-x", "LD_LIBRARY_PATH", "-x", "PATH", *CMD]
    for flavor in ("mpich", "pals"):
        assert "-x" not in mpiexec_argv(flavor, executable="mpiexec", num_workers=2,
                                        workers_per_node=None, hostfile=None, extra_args=(),
                                        command=CMD, env=env)
    assert "HPCTRAIN_" in DEFAULT_EXPORT_PREFIXES and "PYTHON" in DEFAULT_EXPORT_PREFIXES


@pytest.mark.parametrize("flavor, hostfile_args", [
    ("openmpi", ["--hostfile", "/var/spool/pbs/aux/9.pbs01"]),
    ("mpich", ["-f", "/var/spool/pbs/aux/9.pbs01"]),
    ("pals", ["--hostfile", "/var/spool/pbs/aux/9.pbs01"]),
])
def test_hostfile_defaults_to_pbs_nodefile(flavor, hostfile_args):
    env = {"PBS_JOBID": "9.pbs01", "PBS_NODEFILE": "/var/spool/pbs/aux/9.pbs01"}
    launcher = MpiexecLauncher(flavor=flavor, executable="mpiexec")
    argv = launcher.argv(command=CMD, env=env, num_workers=4)
    i = argv.index(hostfile_args[0])
    assert argv[i:i + 2] == hostfile_args
    # an explicit hostfile wins; outside PBS there is none
    mine = MpiexecLauncher(flavor=flavor, hostfile="/tmp/hosts").argv(
        command=CMD, env=env, num_workers=4)
    assert mine[mine.index(hostfile_args[0]) + 1] == "/tmp/hosts"
    assert hostfile_args[0] not in MpiexecLauncher(flavor=flavor).argv(
        command=CMD, env={"PBS_NODEFILE": " "}, num_workers=4)


@pytest.mark.parametrize("kw, match", [
    pytest.param(dict(flavor="lam"), "expected one of openmpi, mpich, pals", id="flavor"),
    pytest.param(dict(num_workers=0), "num_workers", id="zero-workers"),
    pytest.param(dict(workers_per_node=0), "workers_per_node", id="zero-per-node"),
    pytest.param(dict(workers_per_node=True), "workers_per_node", id="bool-per-node"),
    pytest.param(dict(extra_args="--bind-to none"), "extra_args", id="string-extra-args"),
    pytest.param(dict(command=[]), "command", id="no-command"),
])
def test_argv_rejects_bad_values(kw, match):
    args = dict(flavor="openmpi", executable="mpirun", num_workers=2, workers_per_node=None,
                hostfile=None, extra_args=(), command=CMD, env={})
    args.update(kw)
    flavor = args.pop("flavor")
    with pytest.raises(ConfigError, match=match):
        mpiexec_argv(flavor, **args)


def test_constructor_rejects_bad_values():
    with pytest.raises(ConfigError, match="auto"):
        MpiexecLauncher(flavor="intel")
    with pytest.raises(ConfigError, match="extra_args"):
        MpiexecLauncher(flavor="pals", extra_args="--depth=8")


def _fake_launcher(tmp_path):
    """An executable that records its argv and environment, then exits 0."""
    script = tmp_path / "fake-mpirun"
    script.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                      f"json.dump({{'argv': sys.argv, 'env': dict(os.environ)}}, "
                      f"open({str(tmp_path / 'seen.json')!r}, 'w'))\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_launch_strips_torchrun_vars_and_exports_the_rank_log_dir(tmp_path):
    exe = _fake_launcher(tmp_path)
    env = {"PATH": os.environ.get("PATH", ""), "RANK": "3", "LOCAL_RANK": "1",
           "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "NODE_RANK": "1",
           "HPCTRAIN_JOB_ID": "j1", "KEEP_ME": "yes"}
    group = MpiexecLauncher(flavor="openmpi", executable=exe).launch(
        command=CMD, env=env, num_workers=2, log_dir=str(tmp_path / "logs"))
    exits = group.wait_any_failure(30)
    assert exits is not None and [(e.rank, e.returncode) for e in exits] == [(-1, 0)]
    seen = json.load(open(tmp_path / "seen.json"))
    assert seen["argv"][1:] == ["-np", "2", "-x", "HPCTRAIN_JOB_ID", "-x",
                                "HPCTRAIN_RANK_LOG_DIR", "-x", "PYTHONUNBUFFERED", *CMD]
    assert not {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                "NODE_RANK"} & set(seen["env"])
    assert seen["env"]["HPCTRAIN_RANK_LOG_DIR"] == str(tmp_path / "logs")
    assert seen["env"]["KEEP_ME"] == "yes" and env["RANK"] == "3"  # caller's dict untouched
    assert open(tmp_path / "logs" / "launcher.out").read().startswith(f"[hpctrain] {exe} -np 2")


# --------------------------------------------------------------- flavor detection

# Real `--version` banners, and where each was seen.
BANNERS = [
    # this machine: Debian 12's openmpi-bin 4.1.4 (`mpirun --version`, `mpiexec --version`)
    pytest.param("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n",
                 "openmpi", id="openmpi-4.1.4-mpirun"),
    pytest.param("mpiexec (OpenRTE) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n",
                 "openmpi", id="openmpi-4.1.4-mpiexec-openrte"),
    # Open MPI 5 dropped "OpenRTE": cp2k/cp2k issue #3700 ("Version 5 of OpenMPI gives
    # mpiexec (Open MPI) 5.0.5"), which broke a grep for OpenRTE
    pytest.param("mpiexec (Open MPI) 5.0.5\n", "openmpi", id="openmpi-5.0.5-mpiexec"),
    pytest.param("mpirun (Open MPI) 5.0.6\n\nReport bugs to https://www.open-mpi.org/community/help/\n",
                 "openmpi", id="openmpi-5.0.6-mpirun"),
    # MPICH 4.0 from Ubuntu 22.04's apt (horovod/horovod PR #3984, "detect MPICH via
    # HYDRA": the banner has no "MPICH" at all)
    pytest.param("HYDRA build details:\n"
                 "    Version:                                 4.0\n"
                 "    Release Date:                            Fri Jan 21 10:42:29 CST 2022\n"
                 "    CC:                              gcc -Wdate-time -D_FORTIFY_SOURCE=2 -g -O2 "
                 "-ffile-prefix-map=/build/mpich-0xgrG5/mpich-4.0=. -flto=auto\n"
                 "    Configure options:                       '--with-hwloc-prefix=/usr' "
                 "'--with-device=ch4:ofi'\n", "mpich", id="mpich-4.0-ubuntu"),
    # MPICH 4.3.0 from conda-forge (UPSY-group/UPSY-models issue #661, `mpirun --version`)
    pytest.param("HYDRA build details:\n"
                 "    Version:                                 4.3.0\n"
                 "    Release Date:                            Mon Feb  3 09:09:47 AM CST 2025\n"
                 "    CC:                              x86_64-conda-linux-gnu-cc -DNDEBUG "
                 "-fdebug-prefix-map=/home/conda/feedstock_root/build_artifacts/mpich-mpi_1738682265727"
                 "/work=/usr/local/src/conda/mpich-4.3.0\n", "mpich", id="mpich-4.3.0-conda"),
    # MPICH 4.1.1 (pmodels/mpich issue #6563, `mpiexec --version`, first two lines)
    pytest.param("HYDRA build details:\n    Version:                                 4.1.1\n",
                 "mpich", id="mpich-4.1.1"),
    # Intel MPI 2019 (RedHatInsights/insights-core insights/parsers/mpirun.py, sample output)
    pytest.param("Intel(R) MPI Library for Linux* OS, Version 2019 Update 12 Build 202010429 "
                 "(id: e380127cb)\nCopyright 2003-2021, Intel Corporation.\n",
                 "mpich", id="intel-mpi-2019"),
    # Intel MPI 2021.8 (a NeSI container README, found with find_string
    # "Intel(R) MPI Library for Linux* OS, Version 20"); Intel MPI's mpiexec is Hydra
    pytest.param("Intel(R) MPI Library for Linux* OS, Version 2021.8 Build 20221129 "
                 "(id: 339ec755a1)\nCopyright 2003-2022, Intel Corporation.\n",
                 "mpich", id="intel-mpi-2021.8"),
    # HPE Cray PALS: E3SM-Project/mache mache/parallel/pbs.py, is_pals_launcher(): "PALS
    # reports e.g. 'mpiexec version 1.8.0 revision ...'" (the rest elided there too)
    pytest.param("mpiexec version 1.8.0 revision ...\n", "pals", id="pals-1.8.0"),
    # knit-sh/knit src/detect.sh: PALS's `mpiexec --help` first line contains
    # "Parallel Application Launch Service"
    pytest.param("Parallel Application Launch Service\nUsage: mpiexec [options] ...\n",
                 "pals", id="pals-help-banner"),
    # not an MPI launcher
    pytest.param("slurm 22.05.8\n", None, id="srun"),
    pytest.param("", None, id="empty"),
    pytest.param("mpiexec: unrecognized option '--version'\n", None, id="unknown-option"),
]


@pytest.mark.parametrize("text, flavor", BANNERS)
def test_flavor_from_version_text(text, flavor):
    assert flavor_from_version_text(text) == flavor


def _runner(stdout=None, exc=None):
    calls = []

    def run(argv, **kw):
        calls.append(argv)
        if exc is not None:
            raise exc
        return subprocess.CompletedProcess(argv, 0, stdout=stdout)

    run.calls = calls
    return run


def test_detect_flavor_runs_version_and_reads_the_banner():
    run = _runner("HYDRA build details:\n    Version: 4.1.1\n")
    assert detect_flavor("/opt/mpich/bin/mpiexec", run=run) == "mpich"
    assert run.calls == [["/opt/mpich/bin/mpiexec", "--version"]]


def test_detect_flavor_errors_name_the_launcher_setting():
    with pytest.raises(ConfigError, match="not found on PATH") as missing:
        detect_flavor("mpiexec", run=_runner(exc=FileNotFoundError(2, "No such file")))
    assert "scheduler.launcher" in missing.value.hint
    with pytest.raises(ConfigError, match="names no known MPI") as unknown:
        detect_flavor("mpiexec", run=_runner("slurm 22.05.8\n"))
    assert "'slurm 22.05.8'" in str(unknown.value) and "scheduler.launcher" in unknown.value.hint
    with pytest.raises(ConfigError, match="could not run"):
        detect_flavor("mpiexec", run=_runner(exc=subprocess.TimeoutExpired("mpiexec", 60)))


def test_auto_flavor_is_detected_once_per_launcher(monkeypatch):
    seen = []
    monkeypatch.setattr(mpx, "detect_flavor", lambda exe: seen.append(exe) or "pals")
    launcher = MpiexecLauncher(executable="/opt/cray/pals/1.8/bin/mpiexec", workers_per_node=4)
    for _ in range(2):
        assert launcher.argv(command=CMD, env={}, num_workers=8)[:5] == [
            "/opt/cray/pals/1.8/bin/mpiexec", "-n", "8", "--ppn", "4"]
    assert seen == ["/opt/cray/pals/1.8/bin/mpiexec"]


# ---------------------------------------------------- real runs with Open MPI's mpirun

MPIRUN = shutil.which("mpirun")


@needs_mpirun
def test_local_mpirun_is_detected_as_open_mpi():
    assert detect_flavor("mpirun") == "openmpi"


def _mpirun_env():
    """Open MPI refuses to start as root unless told twice (mpirun reads both itself)."""
    if os.geteuid() != 0:
        return {}
    return {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def mpirun_launcher():
    # --oversubscribe: 2 ranks must start even on a 1-core CI machine
    return MpiexecLauncher(flavor="openmpi", executable="mpirun", extra_args=["--oversubscribe"])


def fit_with(launcher, func, storage, *, config, name, max_failures=0):
    """``TorchTrainer.fit()`` with the supervisor driving ``launcher`` instead of the
    local one (what ``Run.run_here`` does, launcher aside); launcher None: a plain fit()."""
    from hpctrain.torch import TorchTrainer

    trainer = TorchTrainer(func, train_loop_config=config,
                           scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(name=name, storage_path=storage, verbose=0,
                                                failure_config=FailureConfig(max_failures=max_failures)))
    if launcher is None:
        return trainer.fit()
    prepared = Run.for_trainer(trainer)
    run = prepared.run_dir
    os.makedirs(run.internal_dir, exist_ok=True)
    with run.exclusive():
        prepared.prepare()
        plan = AttemptPlan(2, f"mpi-{uuid.uuid4().hex[:10]}",
                           failure=FailureConfig(max_failures=max_failures),
                           extra_env={**driver_pythonpath(), **_mpirun_env()})
        sup = Supervisor(run, plan, launcher=launcher)
        status = sup.run_to_end()
    return result_or_raise(run.path, status)


_TORCHRUN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")


def identify_then_train(config):
    """Records where this rank thinks it is and why, prints a line of its own, then
    runs the deterministic training of tests/support/workloads.py."""
    from hpctrain import cluster_env

    ctx = hpctrain.get_context()
    rank = ctx.get_world_rank()
    # the torch backend has exported RANK etc. by now; the launcher's own view is what
    # cluster_env derives without them
    derived = cluster_env.worker_info_from_env(
        {k: v for k, v in os.environ.items() if k not in _TORCHRUN})
    with open(workloads._out(f"identity-{rank}.json"), "w") as f:
        json.dump({"ctx": [rank, ctx.get_local_rank(), ctx.get_node_rank(),
                           ctx.get_world_size(), ctx.get_local_world_size()],
                   "launcher": derived.launcher, "derived_rank": derived.world_rank,
                   "ompi": {k: v for k, v in os.environ.items()
                            if k.startswith("OMPI_COMM_WORLD_")},
                   "parent_pid_var": os.environ.get("HPCTRAIN_PARENT_PID"),
                   "env": {k: os.environ.get(k) for k in workloads.RANK_VARS}}, f)
    print(f"hello from world rank {rank} pid {os.getpid()}", flush=True)
    workloads.deterministic(config)


def _final_state(result):
    return final_state(result.path)


@pytest.fixture(scope="module")
def local_straight(tmp_path_factory):
    """The reference: 6 epochs with the local launcher."""
    storage = str(tmp_path_factory.mktemp("local-runs"))
    return fit_with(None, identify_then_train, storage, config={"epochs": 6}, name="local")


@needs_mpirun
def test_mpirun_training_matches_local_launcher(storage, local_straight):
    t0 = time.monotonic()
    result = fit_with(mpirun_launcher(), identify_then_train, storage,
                      config={"epochs": 6}, name="mpirun")
    took = time.monotonic() - t0
    assert result.status == "FINISHED" and result.error is None, result.error
    assert result.metrics["epoch"] == 5 and result.metrics["_training_iteration"] == 6
    state = run_state(result.path)
    assert [a["outcome"] for a in state["attempts"]] == ["FINISHED"]
    # each rank got its place from Open MPI's variables, not from hpctrain's local spawner
    for rank in (0, 1):
        ident = json.load(open(os.path.join(result.path, "test-out", f"identity-{rank}.json")))
        assert ident["launcher"] == "openmpi" and ident["derived_rank"] == rank
        assert ident["ctx"] == [rank, rank, 0, 2, 2]
        assert ident["ompi"]["OMPI_COMM_WORLD_RANK"] == str(rank)
        assert ident["ompi"]["OMPI_COMM_WORLD_SIZE"] == "2"
        assert ident["ompi"]["OMPI_COMM_WORLD_LOCAL_RANK"] == str(rank)
        assert ident["parent_pid_var"] is None  # set by the local launcher only
        assert ident["env"] == {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                                "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "0"}  # as Ray's
    # per-rank logs written by the ranks themselves, plus mpirun's own
    (job,) = os.listdir(os.path.join(result.path, "logs"))
    logs = os.path.join(result.path, "logs", job)
    assert sorted(os.listdir(logs)) == ["launcher.out", "rank-0.out", "rank-1.out"]
    for rank in (0, 1):
        text = open(os.path.join(logs, f"rank-{rank}.out")).read()
        assert f"hello from world rank {rank} " in text
        assert f"hello from world rank {1 - rank} " not in text
    launcher_out = open(os.path.join(logs, "launcher.out")).read()
    assert launcher_out.startswith("[hpctrain] mpirun -np 2 ")
    assert "-x HPCTRAIN_RANK_LOG_DIR" in launcher_out and "--oversubscribe" in launcher_out
    # same seed, same data, same collectives: the same weights, bit for bit
    assert_same_state(_final_state(local_straight), _final_state(result))
    print(f"mpirun training of 6 epochs: {took:.1f} s")


@needs_mpirun
def test_mpirun_rank_1_failure_is_the_root_cause(storage):
    with pytest.raises(TrainingFailedError) as info:
        fit_with(mpirun_launcher(), workloads.fail_on_rank, storage, config={"rank": 1},
                 name="fails")
    err = info.value
    assert err.rank == 1
    assert "ValueError: boom on rank 1" in err.worker_traceback
    assert "fail_on_rank" in err.worker_traceback
    result = err.result
    assert result.status == "FAILED"
    text = open(os.path.join(result.path, "error.txt")).read()
    assert text.startswith("Training failed: rank 1") and "boom on rank 1" in text
    (job,) = os.listdir(os.path.join(result.path, "logs"))
    assert "boom on rank 1" in open(os.path.join(result.path, "logs", job, "rank-1.out")).read()
    state = run_state(result.path)
    assert state["attempts"][0]["failed_rank"] == 1 and state["status"] == "FAILED"


@needs_mpirun
def test_mpirun_restart_resumes_from_last_checkpoint(storage, local_straight):
    crashed = fit_with(mpirun_launcher(), workloads.deterministic, storage, max_failures=1,
                       config={"epochs": 6, "crash_at": 3, "crash_rank": 1}, name="restart")
    assert crashed.status == "FINISHED"
    assert_same_state(_final_state(local_straight), _final_state(crashed))
    for rank in (0, 1):
        path, start, restarts = open(os.path.join(
            crashed.path, "test-out", f"resumed-attempt-2-rank-{rank}")).read().split()
        assert os.path.basename(path) == "checkpoint_000002" and start == "3" and restarts == "1"
    state = run_state(crashed.path)
    assert state["failures"] == 1
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "FINISHED"]
    assert state["attempts"][0]["failed_rank"] == 1
    assert "injected failure at epoch 3" in state["attempts"][0]["error"]
    assert crashed.metrics["_training_iteration"] == 6 and crashed.metrics["epoch"] == 5


@needs_mpirun
def test_sigkill_of_rank_0_in_the_second_attempt_is_blamed_on_rank_0(storage):
    """launcher.out collects every attempt of one job: what mpirun said about the first
    attempt (rank 0 killed by SIGUSR2) must not be taken for the second's (rank 0 killed
    with SIGKILL; rank 1 then records the lost connection)."""
    with pytest.raises(TrainingFailedError) as info:
        fit_with(mpirun_launcher(), workloads.deterministic, storage, max_failures=1,
                 config={"epochs": 6, "crashes": [[1, 0, 1, "sigusr2"], [2, 0, 3, "sigkill"]]},
                 name="killed-twice")
    assert info.value.rank == 0
    run = info.value.result.path
    state = run_state(run)
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "FAILED"]
    assert [(a["failed_rank"], a["error"]) for a in state["attempts"]] == [
        (0, "rank 0 killed by signal 12"), (0, "rank 0 killed by signal 9")]
    assert open(os.path.join(run, "error.txt")).read().startswith(
        "Training failed: rank 0, attempt 2")
    (job,) = os.listdir(os.path.join(run, "logs"))
    launcher_out = open(os.path.join(run, "logs", job, "launcher.out")).read()
    assert launcher_out.count("[hpctrain] mpirun -np 2 ") == 2  # both attempts, one file
    assert "exited on signal 12" in launcher_out and "exited on signal 9" in launcher_out


@needs_mpirun
def test_mpirun_that_cannot_start_its_daemons_is_reported_as_the_launcher(storage):
    """Issue 31: an mpirun whose ssh cannot reach a host never starts a rank; the run
    fails with mpirun's own words, not as "rank -1 ... left no traceback"."""
    launcher = MpiexecLauncher(flavor="openmpi", executable="mpirun",
                               extra_args=["--host", "hpctrain-nohost.invalid:2"])
    with pytest.raises(TrainingFailedError) as info:
        fit_with(launcher, workloads.deterministic, storage, config={"epochs": 1},
                 name="nodaemon")
    run = info.value.result.path
    expected = ("the launcher mpirun could not start the ranks: ssh: Could not resolve "
                "hostname hpctrain-nohost: Name or service not known; ORTE was unable to "
                "reliably start one or more daemons.")
    (attempt,) = run_state(run)["attempts"]
    assert (attempt["failed_rank"], attempt["error"]) == (-1, expected)
    text = open(os.path.join(run, "error.txt")).read()
    assert text.startswith("Training failed: the launcher, attempt 1, job mpi-")
    assert expected in text and "left no traceback" not in text
