"""The TensorFlow, Horovod and MPI backends on this machine, with real ranks: each
framework's own collective gives the exact sums, its ranks are hpctrain's, a crashed rank
is recovered from the last checkpoint, the scheduler's warning stops every rank at the
same step and the run continues with no step lost, Keras replicas end identical, the Ray
Train TensorFlow example runs with only its imports changed, and a missing framework says
what to install. The same backends across two Slurm nodes: test_slurm_backends.py."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import backend_workloads as bw
from hpctrain import FailureConfig, Result, RunConfig, ScalingConfig
from hpctrain.rundir.commit import verify_checkpoint
from helpers import ROOT, SUPPORT, run_state, wait_for, workload, write_job

pytestmark = pytest.mark.slow

#: (test id, job.backend, backend options, ranks)
BACKENDS = [
    pytest.param("mpi", {}, 3, id="mpi"),
    pytest.param("horovod", {}, 2, id="horovod-gloo"),
    pytest.param("horovod", {"controller": "mpi"}, 2, id="horovod-mpi"),
    pytest.param("tensorflow", {}, 2, id="tensorflow"),
]


def lines(run, name):
    path = os.path.join(run, "test-out", name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f]


def assert_exact_sums(run, workers, steps):
    """Every rank saw the exact sum at every step, in the last attempt that ran it."""
    for r in range(workers):
        last = {}
        for rec in lines(run, f"sums-rank-{r}.jsonl"):
            assert rec["sum"] == (rec["step"] + 1) * workers * (workers + 1) // 2, rec
            last[rec["step"]] = rec
        assert sorted(last) == list(range(steps))


def job_file(tmp_path, storage, backend, options, workers, config, max_failures=0):
    return write_job(tmp_path, "loop", entrypoint=workload("backend_workloads:collective_loop"),
                     storage=storage, verbose=0, job={"backend": backend},
                     scaling={"num_workers": workers}, failure={"max_failures": max_failures},
                     **{backend: options}, config={"backend": backend, **config})


def run_cli(job):
    return subprocess.Popen([sys.executable, "-m", "hpctrain.cli", "run", job],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("backend,options,workers", BACKENDS)
def test_collectives_ranks_a_crashed_rank_and_the_warning(backend, options, workers,
                                                          tmp_path, storage):
    """`hpctrain run` of a spec with [job] backend = ... Attempt 1: the last rank raises
    at step 5; attempt 2 resumes from the checkpoint of step 3 on every rank. Then SIGUSR1
    mid-training: every rank checkpoints at the same step and the run ends STOPPED
    (exit 75); running it again continues at the next step and ends with the exact
    uninterrupted result. Every sum is the framework collective's exact sum, and the
    framework's ranks are hpctrain's."""
    steps = 60
    config = {"steps": steps, "every": 2, "crash_rank": workers - 1, "crash_step": 5,
              "sleep": 0.04}
    job = job_file(tmp_path, storage, backend, options, workers, config, max_failures=1)
    run = os.path.join(storage, "loop")
    p = run_cli(job)
    wait_for(lambda: len(lines(run, "starts-rank-0.jsonl")) == 2
             and len(lines(run, "sums-rank-0.jsonl")) >= 10, 150,
             "the second attempt's first 10 sums", proc=p, poll_s=0.05)
    p.send_signal(signal.SIGUSR1)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 75, err
    state = run_state(run)
    assert state["status"] == "STOPPED" and state["failures"] == 1
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "PREEMPTED"]
    assert state["attempts"][0]["failed_rank"] == workers - 1
    # the crash: attempt 2 resumed from the last committed checkpoint (step 3)
    with open(os.path.join(state["attempts"][1]["resumed_from"], "state.json")) as f:
        assert json.load(f)["step"] == 3
    # the warning: every rank stopped right after the same step, whose checkpoint is the
    # stop checkpoint (asked for by should_checkpoint(), or the loop's own every-2 one
    # when that was the very report at which the ranks agreed to stop)
    stop_ckpt = os.path.join(run, "checkpoints", state["attempts"][-1]["stop_checkpoint"])
    assert verify_checkpoint(stop_ckpt) == []
    with open(os.path.join(stop_ckpt, "state.json")) as f:
        stop_step = json.load(f)["step"]
    for r in range(workers):
        assert max(s["step"] for s in lines(run, f"sums-rank-{r}.jsonl")
                   if s["attempt"] == 1) == stop_step
    warned = [lines(run, f"warned-rank-{r}.jsonl") for r in range(workers)]
    assert all(w == warned[0] for w in warned) and len(warned[0]) <= 1, (warned, err)
    if warned[0]:
        assert warned[0][0]["step"] == stop_step

    p = run_cli(job)
    out, err = p.communicate(timeout=180)
    assert p.returncode == 0, err
    for r in range(workers):  # zero steps lost at the warning
        assert [s["step"] for s in lines(run, f"starts-rank-{r}.jsonl")] == [
            0, 4, stop_step + 1]
    assert_exact_sums(run, workers, steps)
    last = json.loads(open(os.path.join(run, "result.json")).read().splitlines()[-1])
    assert last["w"] == bw.expected_w(steps, workers)
    for name in os.listdir(os.path.join(run, "checkpoints")):
        assert verify_checkpoint(os.path.join(run, "checkpoints", name)) == []

    # the framework's ranks are hpctrain's ranks
    idents = [json.load(open(os.path.join(run, "test-out", f"ident-rank-{r}.json")))
              for r in range(workers)]
    for r, ident in enumerate(idents):
        assert (ident["framework_rank"], ident["framework_size"]) == (r, workers)
        assert (ident["rank"], ident["world_size"]) == (r, workers)
    if backend == "tensorflow":
        clusters = {json.dumps(i["tf_config"]["cluster"]) for i in idents}
        assert len(clusters) == 1  # cluster.worker identical on every rank
        assert len(set(idents[0]["tf_config"]["cluster"]["worker"])) == workers  # a port each
        assert [i["tf_config"]["task"] for i in idents] == [
            {"type": "worker", "index": r} for r in range(workers)]
    if backend == "horovod":
        controller = options.get("controller", "gloo")
        assert {i["horovod"]["HOROVOD_CONTROLLER"] for i in idents} == {controller}
        if controller == "gloo":
            assert [i["horovod"]["HOROVOD_RANK"] for i in idents] == [
                str(r) for r in range(workers)]


def test_keras_replicas_end_identical_and_a_crash_resumes_to_the_same_epoch_count(storage):
    from hpctrain.tensorflow import TensorflowTrainer

    epochs = 5
    result = TensorflowTrainer(
        bw.keras_fit, train_loop_config={"epochs": epochs, "crash_epoch": 2},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="keras", storage_path=storage, verbose=0,
                             failure_config=FailureConfig(max_failures=1))).fit()
    run = result.path
    w0, w1 = (np.load(os.path.join(run, "test-out", f"weights-rank-{r}.npy")) for r in (0, 1))
    assert np.array_equal(w0, w1)  # MultiWorkerMirroredStrategy kept the replicas in sync
    assert not np.array_equal(w0, np.zeros_like(w0))
    with open(os.path.join(result.checkpoint.path, "checkpoint.json")) as f:
        assert json.load(f) == {"epoch": epochs - 1}
    # the second attempt started right after the checkpoint it resumed from, and the
    # epochs run last are exactly 0..epochs-1, as in an uninterrupted run
    state = run_state(run)
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "FINISHED"]
    with open(os.path.join(state["attempts"][1]["resumed_from"], "checkpoint.json")) as f:
        resumed_epoch = json.load(f)["epoch"]
    for r in (0, 1):
        seen = lines(run, f"epochs-rank-{r}.jsonl")
        second = [e["epoch"] for e in seen if e["attempt"] == 1]
        assert second == list(range(resumed_epoch + 1, epochs))
        assert sorted({e["epoch"] for e in seen}) == list(range(epochs))
    # only rank 0's copy of the model is in each checkpoint
    files = sorted(f for f in os.listdir(result.checkpoint.path) if not f.startswith("."))
    assert files == ["checkpoint.json", "model.keras"]


def test_a_function_naming_report_checkpoint_callback_trains_with_keras_2(storage):
    """The backend's TF_USE_LEGACY_KERAS is in place before the worker unpickles the
    training function, whose module builds ReportCheckpointCallback from tf.keras as it is
    imported: the rank trains with tf-keras (Keras 2), as MultiWorkerMirroredStrategy needs."""
    import tf_env_workloads  # (here: importing it imports TensorFlow, in this test only)
    from hpctrain.tensorflow import TensorflowTrainer

    result = TensorflowTrainer(
        tf_env_workloads.keras_in_use, scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name="keras2", storage_path=storage, verbose=0)).fit()
    with open(os.path.join(result.path, "test-out", "keras-rank-0.json")) as f:
        seen = json.load(f)
    assert seen["env_at_import"] == "1"
    assert seen["tf_keras"].split(".")[0] == "tf_keras"  # not Keras 3
    assert seen["callback_base"].split(".")[0] == "tf_keras"


def test_the_ray_train_tensorflow_example_runs_with_only_its_imports_changed(tmp_path):
    """examples/tensorflow_keras.py: 5 epochs, then a run seeded with that checkpoint to
    10 epochs, which ends where an uninterrupted 10-epoch run ends: epoch 9."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "tensorflow_keras.py")],
                       env=dict(os.environ, HPCTRAIN_STORAGE_PATH=str(tmp_path)),
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    first, second = (Result.from_path(os.path.join(tmp_path, d))
                     for d in sorted(os.listdir(tmp_path)))
    assert str(first.checkpoint) in p.stdout and str(second.checkpoint) in p.stdout
    epochs = []
    for result, n in ((first, 5), (second, 5)):
        assert len(result.metrics_dataframe) == n  # one report per epoch
        with open(os.path.join(result.checkpoint.path, "checkpoint.json")) as f:
            epochs.append(json.load(f)["epoch"])
    assert epochs == [4, 9]


HIDE = """
import sys
for name in [%s]:
    sys.modules[name] = None  # `import name` fails; importlib.util.find_spec gives None
"""


@pytest.mark.parametrize("backend,module,hint", [
    ("tensorflow", "tensorflow", f"HINT: {sys.executable} -m pip install tensorflow tf-keras"),
    ("horovod", "horovod", "scripts/install-horovod.sh"),
    ("mpi", "mpi4py", f"HINT: {sys.executable} -m pip install mpi4py (built against"),
])
def test_a_missing_framework_says_what_to_install_and_writes_nothing(
        backend, module, hint, tmp_path, storage):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE % repr(module))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), SUPPORT]))
    job = job_file(tmp_path, storage, backend, {}, 2, {"steps": 2})
    p = subprocess.run([sys.executable, "-m", "hpctrain.cli", "run", job], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert f"the {backend!r} backend needs {module!r}" in p.stderr and hint in p.stderr
    assert not os.path.exists(os.path.join(storage, "loop"))


def test_hpctrain_and_the_torch_path_work_with_the_other_frameworks_absent(tmp_path, storage):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE % "'tensorflow', 'tf_keras', 'horovod', 'mpi4py'")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), SUPPORT]))
    code = f"""
import sys, hpctrain
from hpctrain.tensorflow import TensorflowTrainer
from hpctrain.horovod import HorovodTrainer
from hpctrain.mpi import MPITrainer
from hpctrain.torch import TorchTrainer
import workloads
r = TorchTrainer(workloads.deterministic, train_loop_config={{"epochs": 1}},
                 scaling_config=hpctrain.ScalingConfig(num_workers=2),
                 run_config=hpctrain.RunConfig(name="t", storage_path={storage!r}, verbose=0)).fit()
print(r.metrics["_training_iteration"], sorted(m for m, v in sys.modules.items()
      if v is not None and m.split(".")[0] in ("tensorflow", "horovod", "mpi4py")))
"""
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split()[-1] == "[]"
    assert subprocess.run([sys.executable, "-m", "hpctrain.cli", "--help"], env=env,
                          capture_output=True, timeout=60).returncode == 0
