"""Small helpers shared by the tests that run whole trainings and the CLI."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from hpctrain.rundir.layout import RunDir

#: This folder (the workload modules: importable by name, tests/conftest.py puts it first on
#: sys.path, and the workers and batch jobs inherit it), tests/, the repository.
SUPPORT = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(SUPPORT)
ROOT = os.path.dirname(TESTS)

#: Tests that start real Open MPI ranks.
needs_mpirun = pytest.mark.skipif(
    shutil.which("mpirun") is None,
    reason="Open MPI's mpirun is not installed (apt-get install -y openmpi-bin; "
           "scripts/slurm-cluster.sh installs it)")


def final_state(run_path):
    """The model state ``workloads.deterministic`` saved at the end of a run."""
    import torch

    return torch.load(os.path.join(run_path, "test-out", "final.pt"))


def assert_same_state(a, b):
    import torch

    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def cli(*args, timeout=300, check=True, env=None, cwd=None):
    """Run ``hpctrain ARGS`` in a fresh process; with ``check``, fail on a non-zero exit."""
    p = subprocess.run([sys.executable, "-m", "hpctrain.cli", *args], capture_output=True,
                       text=True, timeout=timeout, env=env, cwd=cwd)
    if check and p.returncode != 0:
        raise AssertionError(f"hpctrain {' '.join(args)} exited {p.returncode}:\n"
                             f"{p.stdout}\n{p.stderr}")
    return p


def assert_full_disk_failure(error, run_path):
    """A run met a full disk: the worker's error says so with its HINT, and every
    committed checkpoint (there is at least one) is intact."""
    from hpctrain.rundir.commit import verify_checkpoint

    assert "No space left on device" in error.worker_traceback
    # the disk fills while a checkpoint is written (usually) or, when the checkpoint
    # fitted to the byte, while its report's metrics are appended to result.json
    assert ("This checkpoint is discarded; the last committed one is untouched" in
            error.worker_traceback or "Its metrics are not recorded; committed checkpoints "
            "are untouched" in error.worker_traceback), error.worker_traceback
    assert "HINT: the filesystem (or your quota) is full" in error.worker_traceback
    committed = sorted(os.listdir(os.path.join(run_path, "checkpoints")))
    assert committed and all(c.startswith("checkpoint_") for c in committed)
    for name in committed:
        assert verify_checkpoint(os.path.join(run_path, "checkpoints", name)) == []


def wait_for(predicate, timeout, what, *, proc=None, poll_s=0.1):
    """Poll ``predicate`` until it is true; fail the test after ``timeout`` seconds (a
    bound on waiting, not a speed check), or at once if ``proc`` (a Popen) has exited,
    with its output."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"{what}: the process exited {proc.returncode} first:\n{out}\n{err}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(poll_s)


def fit(func, storage, *, workers=2, config=None, name=None, ckpt=None, max_failures=0, **kw):
    """``TorchTrainer(func, ...).fit()`` with ``workers`` ranks under ``storage``."""
    from hpctrain import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    trainer = TorchTrainer(
        func, train_loop_config=config or {},
        scaling_config=ScalingConfig(num_workers=workers),
        run_config=RunConfig(name=name, storage_path=storage, verbose=0,
                             checkpoint_config=ckpt or CheckpointConfig(),
                             failure_config=FailureConfig(max_failures=max_failures)), **kw)
    return trainer.fit()


def run_state(run_path):
    """The run's ``state.json``, read as hpctrain reads it (``RunDir.read_state``: a damaged
    or newer-format one is a ConfigError naming the file); fails the test when the run has
    none yet."""
    state = RunDir(run_path).read_state()
    if not state:
        pytest.fail(f"{run_path}: no state.json (the run never started)")
    return state


def out(result, name):
    """A file the workloads wrote under the run's ``test-out/``."""
    return os.path.join(result.path, "test-out", name)


#: The warning hpctrain gives once per run when ranks report the same file names.
DUPLICATE_WARNING = "several ranks reported checkpoint files with the same names"


def rank_log(run_path, rank):
    """What rank ``rank`` wrote (stdout and stderr) in the run's one job."""
    logs = os.path.join(run_path, "logs")
    (job,) = [d for d in os.listdir(logs) if os.path.isdir(os.path.join(logs, d))]
    with open(os.path.join(logs, job, f"rank-{rank}.out")) as f:
        return f.read()


def assert_quickstart_checkpoints(run_path, *, epochs, world_size, width):
    """A run of examples/pytorch_quickstart.py (every rank saves model.pt each epoch):
    each committed checkpoint holds one model.pt, rank 0's — the other ranks never wrote
    theirs to the run directory — it loads into the ResNet-18, and rank 0's log has the
    duplicate-name warning exactly once."""
    import importlib.util

    import torch

    from hpctrain import Checkpoint
    from hpctrain.rundir.commit import verify_checkpoint

    ckdir = os.path.join(run_path, "checkpoints")
    names = sorted(e for e in os.listdir(ckdir) if e.startswith("checkpoint_"))
    assert names == [f"checkpoint_{i:06d}" for i in range(epochs)]
    spec = importlib.util.spec_from_file_location("pytorch_quickstart", os.path.join(
        ROOT, "examples", "pytorch_quickstart.py"))
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    for name in names:
        path = os.path.join(ckdir, name)
        assert [e for e in os.listdir(path) if not e.startswith(".hpctrain_")] == ["model.pt"]
        meta = Checkpoint(path).commit_record()
        assert meta["files"] == {"model.pt": {"size": os.path.getsize(
            os.path.join(path, "model.pt")), "rank": 0}}
        assert meta["duplicate_files"] == {"model.pt": list(range(world_size))}
        for r in range(1, world_size):  # handed in, never written: rank 0 had listed it
            with open(os.path.join(path, f".hpctrain_shard.rank-{r}.json")) as f:
                shard = json.load(f)
            assert shard["files"] == {} and shard["duplicates"] == ["model.pt"]
        assert verify_checkpoint(path) == []
        model = example.ResNet18(num_classes=10, width=width)
        model.conv1 = torch.nn.Conv2d(1, width, 7, 2, 3, bias=False)
        model.load_state_dict(torch.load(os.path.join(path, "model.pt")))  # strict
    assert rank_log(run_path, 0).count(DUPLICATE_WARNING) == 1
    for r in range(1, world_size):
        assert DUPLICATE_WARNING not in rank_log(run_path, r)


def workload(entry):
    """``"module:function"`` of a workload module here -> the entry point of a job file
    (the module's path: a job file's entry point is found by path, also on a Slurm node)."""
    module, _, function = entry.partition(":")
    return f"{os.path.join(SUPPORT, module + '.py')}:{function}"


def toml_value(value):
    """``value`` (str, number, bool, list, dict) written as TOML."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)  # a string, number or boolean is spelled the same in TOML


def write_job(where, name, *, entrypoint, storage, site=None, config=None, verbose=None,
              **tables):
    """The tests' one job-file writer: ``where/<name>.toml`` for run ``name`` under
    ``storage``, returned as a str path. ``tables``: more TOML tables by name, in order
    (``scaling={"num_workers": 2}``, ``failure={"max_failures": 1}``, a backend's options
    under its name; a str is a table's body as is); ``config``: the ``[config]`` table."""
    lines = [f"site = {toml_value(site)}"] if site else []
    job = {"entrypoint": entrypoint, **tables.pop("job", {})}
    run = {"name": name, "storage_path": str(storage), **tables.pop("run", {})}
    if verbose is not None:
        run["verbose"] = verbose
    for table, body in [("job", job), ("run", run), *tables.items(), ("config", config or {})]:
        lines.append(f"[{table}]")
        if isinstance(body, str):
            lines.append(body.strip("\n"))
        else:
            lines += [f"{k} = {toml_value(v)}" for k, v in body.items()]
    path = os.path.join(str(where), f"{name}.toml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


#: Open MPI's mpirun refuses root without these (the test machines run the tests as root).
MPI_AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def pbs_job_file(tmp_path, storage, name, *, function="deterministic", config=None,
                 time_="00:10:00", warning=None, failure=(), launcher="mpirun", setup=None,
                 pythonpath=False, scaling=None, site="generic-pbs"):
    """A PBS job spec for tests/support/workloads.py:<function> (site generic-pbs, queue
    workq, 2 workers on one node, Open MPI's mpirun allowed to run as root): one file for
    the fake-MoM tests (test_pbs_flow, test_pbs_recovery) and the real server's
    (test_pbs_server). ``failure``: extra lines of the [failure] table; ``scaling``: the
    [scaling] table instead."""
    scheduler = {"queue": "workq", **({"time": time_} if time_ else {}), "launcher": launcher}
    if launcher == "mpirun":
        scheduler["launcher_args"] = ["--oversubscribe", "--bind-to", "none"]
    failure_lines = ([f'warning_time = "{warning}"'] if warning else []) + list(failure)
    tables = {"scaling": scaling or {"num_workers": 2, "workers_per_node": 2},
              "scheduler": scheduler,
              "failure": "\n".join(failure_lines)}
    if setup:
        tables["setup"] = {"commands": setup}
    tables["env"] = {**MPI_AS_ROOT, **({"PYTHONPATH": ROOT} if pythonpath else {})}
    return write_job(tmp_path, name, site=site, entrypoint=workload(
        f"workloads:{function}"), storage=storage,
        config={"epochs": 3} if config is None else config, **tables)


def container_image(*paths):
    """The container tests' image directory (scripts/container-image.sh: Charliecloud and
    a minimal Debian image, built once, cached), with a directory for each of ``paths``
    made in it (ch-run binds onto directories that exist in the image). Fails the test,
    with the script's output, when it cannot be built."""
    p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "container-image.sh")],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        pytest.fail(f"scripts/container-image.sh failed:\n{p.stdout}\n{p.stderr}")
    image = p.stdout.strip().splitlines()[-1]
    for d in paths:
        os.makedirs(image + d, exist_ok=True)
    return image


def host_python_binds():
    """The host paths a rank in the test image needs: the interpreter's prefixes (the image
    holds no Python) and the checkout hpctrain and the tests' workloads are imported from."""
    import hpctrain

    code = os.path.dirname(os.path.dirname(os.path.abspath(hpctrain.__file__)))
    return sorted({sys.base_prefix, sys.prefix, code, ROOT})


def hpctrain_log_to(caplog, monkeypatch):
    """The ``hpctrain`` logger's records reach ``caplog`` once. The CLI's set-up (an earlier
    test in this process) makes that logger stop propagating; pytest 9 and later attach
    caplog's handler to such loggers (a second copy of each record if the logger propagated
    too), earlier ones to the root logger only."""
    import logging

    logger = logging.getLogger("hpctrain")
    monkeypatch.setattr(logger, "propagate", caplog.handler not in logger.handlers)


def copy_checkout(where):
    """A copy of the checkout's files that git tracks or does not ignore (no build output,
    no egg-info), at ``where``: for a test that installs it (an editable install writes
    into its source tree, a wheel build leaves ``build/``). Returns ``where``."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for f in filter(None, files):
        if os.path.isfile(os.path.join(ROOT, f)):
            os.makedirs(os.path.join(where, os.path.dirname(f)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, f), os.path.join(where, f))
    return where
