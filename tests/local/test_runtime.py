"""Multi-process tests of the core runtime: real worker processes, real Gloo collectives,
real files. Each asserts on what a user sees: model state, checkpoints, errors."""
import json
import os

import pytest
import torch

import hpctrain
import workloads
from hpctrain import (Checkpoint, CheckpointConfig, Result, RunConfig, ScalingConfig,
                      TrainingFailedError)
from hpctrain.torch import TorchTrainer
from helpers import (DUPLICATE_WARNING, SUPPORT, assert_full_disk_failure, fit, out, rank_log,
                     run_state)


def test_ddp_keeps_replicas_identical(storage):
    result = fit(workloads.ddp_sync, storage, config={"steps": 5})
    r0 = torch.load(out(result, "rank-0.pt"))
    r1 = torch.load(out(result, "rank-1.pt"))
    # the ranks saw different data (different local losses) ...
    assert r0["last_local_loss"] != r1["last_local_loss"]
    # ... yet every parameter is identical on both ranks, and training moved them
    for a, b, init in zip(r0["params"], r1["params"], r0["initial"]):
        assert torch.equal(a, b)
        assert not torch.equal(a, init)
    assert r0["ranks"] == (0, 0, 0, 2, 2) and r1["ranks"] == (1, 1, 0, 2, 2)
    assert result.metrics["step"] == 4 and result.metrics["_training_iteration"] == 5
    assert result.status == "FINISHED" and result.error is None


def test_result_files_and_autofilled_metrics(storage, monkeypatch):
    monkeypatch.setenv("HPCTRAIN_RESULT_ENABLE_DETAILED_AUTOFILLED_METRICS", "1")
    result = fit(workloads.ddp_sync, storage, config={"steps": 3}, name="files")
    lines = [json.loads(l) for l in open(os.path.join(result.path, "result.json"))]
    assert [l["_training_iteration"] for l in lines] == [1, 2, 3]
    for key in ("_timestamp", "_time_this_iter_s", "_date", "_hostname", "_node_ip", "_pid",
                "_time_total_s", "loss", "step"):
        assert key in lines[0], key
    csv_lines = open(os.path.join(result.path, "progress.csv")).read().splitlines()
    assert csv_lines[0].split(",")[:2] == ["loss", "step"] and len(csv_lines) == 4
    df = result.metrics_dataframe
    assert list(df["step"]) == [0, 1, 2]
    state = run_state(result.path)
    assert state["status"] == "FINISHED" and state["failures"] == 0
    assert len(state["attempts"]) == 1 and state["attempts"][0]["outcome"] == "FINISHED"
    assert os.path.exists(os.path.join(result.path, "spec.toml"))
    logs = os.listdir(os.path.join(result.path, "logs"))
    assert len(logs) == 1 and sorted(os.listdir(os.path.join(result.path, "logs", logs[0]))) == [
        "rank-0.out", "rank-1.out"]
    again = Result.from_path(result.path)
    assert again.metrics == result.metrics and again.status == "FINISHED"


def _final_state(result):
    return torch.load(out(result, "final.pt"))


def _assert_same_state(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_restart_after_crash_ends_in_same_state_as_uninterrupted_run(storage):
    straight = fit(workloads.deterministic, storage, config={"epochs": 6})
    crashed = fit(workloads.deterministic, storage, max_failures=1,
                  config={"epochs": 6, "crash_at": 3, "crash_rank": 1})
    _assert_same_state(_final_state(straight), _final_state(crashed))
    # the restart resumed from the checkpoint of epoch 2 (index 2), on both ranks
    for rank in (0, 1):
        path, start, restarts = open(out(crashed, f"resumed-attempt-2-rank-{rank}")).read().split()
        assert os.path.basename(path) == "checkpoint_000002" and start == "3" and restarts == "1"
    state = run_state(crashed.path)
    assert state["failures"] == 1 and [a["outcome"] for a in state["attempts"]] == ["FAILED", "FINISHED"]
    assert state["attempts"][0]["failed_rank"] == 1
    # iterations continue after the resume: epochs 3..5 were reported again as 4..6
    assert crashed.metrics["_training_iteration"] == 6 and crashed.metrics["epoch"] == 5


def test_restore_and_resume_from_checkpoint_after_failure(storage):
    straight = fit(workloads.deterministic, storage, config={"epochs": 5})
    with pytest.raises(TrainingFailedError) as info:
        fit(workloads.deterministic, storage, name="broken",
            config={"epochs": 5, "crash_at": 2, "crash_rank": 0, "crash_how": "sigkill"})
    failed = info.value.result
    assert failed.status == "FAILED" and info.value.rank == 0
    assert "signal 9" in failed.error.worker_traceback
    assert TorchTrainer.can_restore(failed.path)
    assert not TorchTrainer.can_restore(os.path.join(storage, "nothing-here"))
    restored = TorchTrainer.restore(failed.path).fit()
    assert restored.path == failed.path and restored.status == "FINISHED"
    _assert_same_state(_final_state(straight), _final_state(restored))
    state = run_state(restored.path)
    assert [a["outcome"] for a in state["attempts"]] == ["FAILED", "FINISHED"]
    assert os.path.basename(state["attempts"][1]["resumed_from"]) == "checkpoint_000001"


def test_a_checkpoint_damaged_after_its_commit_is_skipped_for_the_previous_one(storage):
    straight = fit(workloads.deterministic, storage, config={"epochs": 5})
    with pytest.raises(TrainingFailedError):
        fit(workloads.deterministic, storage, name="damaged",
            config={"epochs": 5, "crash_at": 3, "crash_rank": 1})
    run = os.path.join(storage, "damaged")
    latest = os.path.join(run, "checkpoints", "checkpoint_000002", "state.pt")
    with open(latest, "r+b") as f:  # damage the newest checkpoint (a lost tail of the file)
        f.truncate(os.path.getsize(latest) // 2)
    restored = TorchTrainer.restore(run).fit()
    state = run_state(run)
    second = state["attempts"][1]
    assert os.path.basename(second["resumed_from"]) == "checkpoint_000001"
    assert second["skipped_checkpoints"][0]["checkpoint"] == "checkpoint_000002"
    assert "state.pt: size" in second["skipped_checkpoints"][0]["problems"][0]
    _assert_same_state(_final_state(straight), _final_state(restored))


def test_resume_from_checkpoint_argument(storage):
    straight = fit(workloads.deterministic, storage, config={"epochs": 4})
    ck = [c for c, m in straight.best_checkpoints if m["epoch"] == 1][0]
    resumed = fit(workloads.deterministic, storage, config={"epochs": 4},
                  resume_from_checkpoint=ck)
    path, start, _ = open(out(resumed, "resumed-attempt-1-rank-0")).read().split()
    assert path == ck.path and start == "2"
    _assert_same_state(_final_state(straight), _final_state(resumed))
    assert [m["epoch"] for _, m in resumed.best_checkpoints] == [2, 3]


@pytest.mark.parametrize("num_to_keep, attr, order, kept", [
    pytest.param(2, "score", "min", [1, 3, 5], id="min-best2-plus-latest"),
    pytest.param(2, "score", "max", [2, 4, 5], id="max-best2-plus-latest"),
    pytest.param(1, "score", "min", [3, 5], id="min-best1-plus-latest"),
    pytest.param(2, None, "max", [4, 5], id="most-recent-2"),
    pytest.param(None, "score", "min", [0, 1, 2, 3, 4, 5], id="keep-all"),
])
def test_top_k_retention_keeps_exactly_the_right_checkpoints(storage, num_to_keep, attr, order, kept):
    scores = [5, 3, 8, 1, 9, 4]
    result = fit(workloads.scored, storage, config={"scores": scores},
                 ckpt=CheckpointConfig(num_to_keep=num_to_keep, checkpoint_score_attribute=attr,
                                       checkpoint_score_order=order))
    names = sorted(os.listdir(os.path.join(result.path, "checkpoints")))
    assert names == [f"checkpoint_{i:06d}" for i in kept]
    for ck, metrics in result.best_checkpoints:
        assert open(os.path.join(ck.path, "value.txt")).read() == str(metrics["score"])
    assert result.checkpoint.path.endswith("checkpoint_000005")


def test_crash_on_rank_1_reaches_result_error_with_traceback(storage):
    with pytest.raises(TrainingFailedError) as info:
        fit(workloads.fail_on_rank, storage, config={"rank": 1})
    err = info.value
    assert err.rank == 1
    assert "ValueError: boom on rank 1" in err.worker_traceback
    assert "fail_on_rank" in err.worker_traceback  # the user's frame is in the traceback
    result = err.result
    assert result.error is err and result.status == "FAILED"
    text = open(os.path.join(result.path, "error.txt")).read()
    assert text.startswith("Training failed: rank 1") and "boom on rank 1" in text
    # the report before the crash was recorded (rank 0 may have recorded its second one
    # too: a report does not wait for the other ranks unless a checkpoint is involved)
    assert list(result.metrics_dataframe["ok"])[0] == 1


@pytest.mark.timeout(120)
def test_many_fast_checkpoints_with_retention(storage):
    # reports back to back: agreements every K reports, checkpoints committed in batches,
    # retention deleting while background digests run — all must settle, nothing hang
    scores = [float(40 - i) for i in range(40)]
    result = fit(workloads.scored, storage, config={"scores": scores},
                 ckpt=CheckpointConfig(num_to_keep=1, checkpoint_score_attribute="score",
                                       checkpoint_score_order="max"))
    names = sorted(os.listdir(os.path.join(result.path, "checkpoints")))
    assert names == ["checkpoint_000000", "checkpoint_000039"]  # best (40.0) + latest
    from hpctrain.rundir.commit import verify_checkpoint

    for name in names:
        path = os.path.join(result.path, "checkpoints", name)
        assert verify_checkpoint(path) == []
        assert os.path.exists(os.path.join(path, ".hpctrain_digest.rank-0.json"))
    # Ray's best_checkpoints: the top num_to_keep only; the latest is kept on disk beside it
    assert [m["i"] for _, m in result.best_checkpoints] == [0]


@pytest.mark.parametrize("staged", [False, True], ids=["copied", "staged-rename"])
def test_distributed_checkpoint_holds_every_ranks_shard(storage, staged):
    result = fit(workloads.sharded, storage, config={"steps": 2, "staged": staged})
    ck = result.checkpoint
    assert os.path.basename(ck.path) == "checkpoint_000001"
    for r in (0, 1):
        data = open(os.path.join(ck.path, f"shard-{r}.bin"), "rb").read()
        assert data == bytes([r]) * (1000 + r) + bytes([1])
    meta = ck.commit_record()
    assert meta["ranks"] == [0, 1] and meta["iteration"] == 2 and meta["index"] == 1
    assert set(meta["files"]) == {"shard-0.bin", "shard-1.bin"}
    from hpctrain.rundir.commit import verify_checkpoint

    assert verify_checkpoint(ck.path) == []
    # no temporary or staging leftovers once the run is over
    leftovers = [e for e in os.listdir(os.path.join(result.path, "checkpoints"))
                 if not e.startswith("checkpoint_") and e != ".staging"]
    assert leftovers == []


def test_checkpoint_handed_in_by_rank_1_only_is_committed(storage):
    result = fit(workloads.sharded, storage, config={"steps": 3, "only_rank": 1})
    names = sorted(os.listdir(os.path.join(result.path, "checkpoints")))
    assert names == ["checkpoint_000000", "checkpoint_000001", "checkpoint_000002"]
    for i, name in enumerate(names):
        ck = Checkpoint(os.path.join(result.path, "checkpoints", name))
        assert ck.commit_record()["ranks"] == [1] and ck.commit_record()["iteration"] == i + 1
        assert os.listdir(ck.path).count("shard-1.bin") == 1 and "shard-0.bin" not in os.listdir(ck.path)


@pytest.mark.parametrize("staged", [False, True], ids=["copied", "staged-rename"])
def test_ranks_reporting_the_same_names_keep_rank_0s_copy_and_warn_once(storage, staged):
    result = fit(workloads.same_names, storage, workers=3,
                 config={"steps": 3, "staged": staged})
    names = sorted(e for e in os.listdir(os.path.join(result.path, "checkpoints"))
                   if e != ".staging")
    assert names == ["checkpoint_000000", "checkpoint_000001", "checkpoint_000002"]
    from hpctrain.rundir.commit import verify_checkpoint

    for step, name in enumerate(names):
        path = os.path.join(result.path, "checkpoints", name)
        user_files = sorted(e for e in os.listdir(path) if not e.startswith(".hpctrain_"))
        assert user_files == ["extra.bin", "model.pt", "shard-0.bin", "shard-1.bin",
                              "shard-2.bin"]
        content = {n: open(os.path.join(path, n), "rb").read() for n in user_files}
        assert content["model.pt"] == bytes([0]) * 1000 + bytes([step])   # rank 0's
        assert content["extra.bin"] == bytes([1]) * 1000 + bytes([step])  # lowest other
        for r in (0, 1, 2):
            assert content[f"shard-{r}.bin"] == bytes([r]) * 1000 + bytes([step])
        meta = Checkpoint(path).commit_record()
        assert meta["duplicate_files"] == {"model.pt": [0, 1, 2], "extra.bin": [1, 2]}
        assert meta["files"]["model.pt"] == {"size": 1001, "rank": 0}
        assert meta["files"]["extra.bin"] == {"size": 1001, "rank": 1}
        # who wrote what: ranks 1 and 2 never wrote model.pt (rank 0 had listed it)
        for r in (1, 2):
            shard = json.load(open(os.path.join(path, f".hpctrain_shard.rank-{r}.json")))
            assert shard["duplicates"] == ["model.pt"] and "model.pt" not in shard["files"]
        assert verify_checkpoint(path) == []
    leftovers = [e for e in os.listdir(os.path.join(result.path, "checkpoints"))
                 if not e.startswith("checkpoint_") and e != ".staging"]
    assert leftovers == []
    log = rank_log(result.path, 0)
    assert log.count(DUPLICATE_WARNING) == 1, log
    assert "'model.pt' (ranks 0, 1, 2)" in log
    assert "get_world_rank() == 0" in log
    assert DUPLICATE_WARNING not in rank_log(result.path, 1)


def test_a_name_every_rank_reports_is_written_to_storage_once(small_disk):
    # a 20 MiB disk: three ranks' 6 MiB model.pt written three times would need 18 MiB
    # beside the previous checkpoint's 6 MiB; written once, each checkpoint needs 6 MiB
    result = fit(workloads.same_names, small_disk, workers=3,
                 config={"steps": 3, "model_size": 6 << 20}, ckpt=CheckpointConfig(num_to_keep=1))
    assert result.error is None
    ck = result.checkpoint
    assert os.path.basename(ck.path) == "checkpoint_000002"
    with open(os.path.join(ck.path, "model.pt"), "rb") as f:
        assert f.read(1) == bytes([0]) and os.path.getsize(f.name) == (6 << 20) + 1


def test_sigkill_while_writing_a_checkpoint_keeps_the_previous_one(storage):
    result = fit(workloads.kill_during_checkpoint, storage, max_failures=1)
    for r in (0, 1):
        name, first_byte = open(out(result, f"resumed-from-{r}")).read().split()
        assert name == "checkpoint_000000" and first_byte == "00"
    ckdir = os.path.join(result.path, "checkpoints")
    assert sorted(os.listdir(ckdir)) == ["checkpoint_000000"]  # half-written one removed
    state = run_state(result.path)
    assert state["attempts"][0]["failed_rank"] == 0
    assert "signal 9" in state["attempts"][0]["error"]


def test_single_worker_and_functions_without_config(storage):
    result = fit(workloads.return_rank, storage, workers=1)
    assert result.metrics["x"] == 1


def test_second_live_run_of_the_same_directory_is_refused(storage):
    from hpctrain.rundir.layout import RunDir

    run = RunDir(os.path.join(storage, "busy"))
    run.create()
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from hpctrain.rundir.layout import RunDir\n"
        f"r = RunDir({run.path!r})\n"
        "with r.exclusive():\n    print('locked', flush=True); time.sleep(30)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(hpctrain.RunLockedError, match="in use by another hpctrain process"):
            fit(workloads.return_rank, storage, workers=1, name="busy")
        assert not os.path.exists(run.payload_file)  # nothing was written into it
    finally:
        holder.kill()


def test_report_outside_a_worker_explains_itself():
    with pytest.raises(RuntimeError, match="inside a training function"):
        hpctrain.report({"x": 1})


def test_training_function_defined_in_main_script(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import hpctrain\n"
        "from hpctrain import ScalingConfig, RunConfig\n"
        "from hpctrain.torch import TorchTrainer\n"
        "def train_func(config):\n"
        "    hpctrain.report({'rank_sum': config['k'] + hpctrain.get_context().get_world_size()})\n"
        "if __name__ == '__main__':\n"
        f"    r = TorchTrainer(train_func, train_loop_config={{'k': 40}}, scaling_config=ScalingConfig(num_workers=2),"
        f" run_config=RunConfig(storage_path={str(tmp_path)!r}, verbose=0)).fit()\n"
        "    print('RESULT', r.metrics['rank_sum'])\n")
    import subprocess
    import sys

    out_ = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=str(tmp_path), timeout=120)
    assert out_.returncode == 0, out_.stderr
    assert "RESULT 42" in out_.stdout


def test_prepare_data_loader_gives_each_rank_its_own_part(storage):
    result = fit(workloads.data_shards, storage, config={"n": 20})
    seen = [torch.load(out(result, f"seen-{r}.pt")) for r in (0, 1)]
    assert all(s["device"] == "cpu" for s in seen)
    for epoch in range(2):
        a, b = seen[0]["seen"][epoch], seen[1]["seen"][epoch]
        assert len(a) == len(b) == 10 and not set(a) & set(b)
        assert sorted(a + b) == list(range(20))
    # shuffled, and a new order each epoch (DistributedSampler.set_epoch is called)
    assert seen[0]["seen"][0] != seen[0]["seen"][1]


def _ranks_of(run_dir):
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"hpctrain.worker" in cmd and run_dir.encode() in cmd:
                found.append(int(pid))
    return found


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL", "SIGTERM then SIGKILL"])
def test_ranks_do_not_outlive_their_driver(tmp_path, sig):
    """SIGTERM then SIGKILL: the scheduler's KillWait (5 s on the test cluster) is shorter
    than the time deaf ranks take to end; the run still says it was interrupted."""
    import signal
    import subprocess
    import sys
    import time

    run_dir = str(tmp_path / "runs" / "orphan")
    fn = "slow_forever_deaf" if sig == "SIGTERM then SIGKILL" else "slow_forever"
    driver = subprocess.Popen([sys.executable, "-c", (
        "import workloads\n"
        "from hpctrain import ScalingConfig, RunConfig\n"
        "from hpctrain.torch import TorchTrainer\n"
        f"TorchTrainer(workloads.{fn}, scaling_config=ScalingConfig(num_workers=2),"
        f" run_config=RunConfig(name='orphan', storage_path={str(tmp_path / 'runs')!r}, verbose=0)).fit()\n")],
        cwd=SUPPORT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    result_file = os.path.join(run_dir, "result.json")
    for _ in range(600):  # wait (up to ~2 min) for the first report
        if os.path.exists(result_file) and os.path.getsize(result_file) > 0:
            break
        assert driver.poll() is None, driver.stderr.read()
        time.sleep(0.2)
    assert len(_ranks_of(run_dir)) == 2
    if sig == "SIGTERM then SIGKILL":
        driver.send_signal(signal.SIGTERM)
        time.sleep(2)
        driver.send_signal(signal.SIGKILL)
    else:
        driver.send_signal(getattr(signal, sig))
    driver.wait(timeout=60)
    for _ in range(100):  # the ranks' parent watchdog polls once a second
        if not _ranks_of(run_dir):
            break
        time.sleep(0.2)
    assert _ranks_of(run_dir) == []
    if sig != "SIGKILL":  # a stop is recorded; a driver SIGKILLed at once cannot record anything
        state = run_state(run_dir)
        assert state["status"] == "INTERRUPTED"


def test_a_full_disk_during_a_checkpoint_is_a_clear_error_and_keeps_the_last_one(
        small_disk):
    with pytest.raises(TrainingFailedError) as info:
        fit(workloads.fill_disk, small_disk, name="full", config={"mib": 3, "epochs": 8})
    result = info.value.result
    assert result.status == "FAILED" and result.checkpoint is not None
    assert_full_disk_failure(info.value, result.path)
