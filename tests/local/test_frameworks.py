"""The framework integrations with real worker processes: PyTorch Lightning
(hpctrain.lightning), Hugging Face Transformers (hpctrain.huggingface.transformers),
Accelerate and DeepSpeed, each quick start as a user runs it, and for each a run warned
mid-run (SIGUSR1) that stops at a checkpoint, is run again and resumes to the same
weights as an uninterrupted one."""
import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest

from helpers import ROOT, run_state, wait_for, workload, write_job

pytest.importorskip("lightning")

EXAMPLES = os.path.join(ROOT, "examples")


def run_example(name, *args, timeout=240):
    # in a directory of its own: what a framework writes beside the script's working
    # directory (Lightning's lightning_logs/) stays out of the checkout
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *args],
                       capture_output=True, text=True, timeout=timeout,
                       cwd=tempfile.mkdtemp(prefix="hpctrain-example-"))
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def rows(run):
    with open(os.path.join(run, "result.json")) as f:
        return [json.loads(line) for line in f]


def load_ckpt(checkpoint_dir, name):
    import torch

    return torch.load(os.path.join(checkpoint_dir, name), weights_only=False,
                      map_location="cpu")


def committed_files(checkpoint_dir):
    """The files of a committed checkpoint, relative to it, hpctrain's own left out."""
    return {os.path.relpath(os.path.join(d, f), checkpoint_dir)
            for d, _, files in os.walk(checkpoint_dir) for f in files
            if not f.startswith(".hpctrain")}


def assert_same_tensors(a, b):
    import torch

    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


# ----------------------------------------------------------------------------- Lightning
def job_file(tmp_path, storage, name, function, config):
    """A job file running ``framework_workloads.<function>`` on 2 workers."""
    return write_job(tmp_path, name, entrypoint=workload(f"framework_workloads:{function}"),
                     storage=storage, verbose=0, scaling={"num_workers": 2}, config=config)


def hpctrain_run(job, cwd=None):
    return subprocess.Popen([sys.executable, "-m", "hpctrain.cli", "run", job], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def warn_mid_run_then_resume(job, run, cwd=None):
    """Start ``job``, send SIGUSR1 to `hpctrain run` after the first report, check that
    the run stopped cleanly at a committed checkpoint, run the job again to the end.
    Returns (reports before the stop, the stop checkpoint's name)."""
    p = hpctrain_run(job, cwd)
    wait_for(lambda: os.path.exists(os.path.join(run, "result.json")) and len(rows(run)) >= 1,
             120, "the first report", proc=p)
    p.send_signal(signal.SIGUSR1)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 75, err
    state = run_state(run)
    assert state["status"] == "STOPPED"
    stopped_after, stop_ckpt = len(rows(run)), state["attempts"][-1]["stop_checkpoint"]
    assert rows(run)[-1]["checkpoint_dir_name"] == stop_ckpt  # stopped right after it
    p = hpctrain_run(job, cwd)
    _, err = p.communicate(timeout=180)
    assert p.returncode == 0, err
    return stopped_after, stop_ckpt


def finish(job, cwd=None):
    p = hpctrain_run(job, cwd)
    _, err = p.communicate(timeout=180)
    assert p.returncode == 0, err


def warned_and_uninterrupted(tmp_path, storage, function, config, step_sleep):
    """Run ``framework_workloads.<function>(config)`` as job "warned", slowed by
    ``step_sleep`` seconds a step, warned mid-run and run again to the end
    (:func:`warn_mid_run_then_resume`), and as job "ref", uninterrupted; each job in a
    working directory of its own. Checks that the warned run stopped after at least one
    and before all of ``config["epochs"]``. Returns (the warned run's directory, the
    reference run's, reports before the stop, the stop checkpoint's name)."""
    run, ref = os.path.join(storage, "warned"), os.path.join(storage, "ref")
    for name in ("warned", "ref"):
        (tmp_path / f"cwd-{name}").mkdir()
    stopped_after, stop_ckpt = warn_mid_run_then_resume(
        job_file(tmp_path, storage, "warned", function, dict(config, step_sleep=step_sleep)),
        run, cwd=str(tmp_path / "cwd-warned"))
    assert 1 <= stopped_after < config["epochs"]
    finish(job_file(tmp_path, storage, "ref", function, config), cwd=str(tmp_path / "cwd-ref"))
    return run, ref, stopped_after, stop_ckpt


def test_lightning_quickstart_example(storage):
    """examples/lightning_quickstart.py (Ray's Lightning guide, imports and data changed):
    2 workers, 2 epochs; one report per epoch with Lightning's logged loss, and the
    result's checkpoint is the last epoch's Lightning checkpoint."""
    out = run_example("lightning_quickstart.py", "--epochs", "2", "--storage", storage,
                      "--name", "lq")
    run = os.path.join(storage, "lq")
    reported = rows(run)
    assert [r["epoch"] for r in reported] == [0, 1]
    assert all(r["loss"] > 0 for r in reported)
    assert [r["checkpoint_dir_name"] for r in reported] == ["checkpoint_000000",
                                                              "checkpoint_000001"]
    ckpt = load_ckpt(os.path.join(run, "checkpoints", "checkpoint_000001"), "checkpoint.ckpt")
    assert ckpt["epoch"] == 1 and ckpt["global_step"] == reported[-1]["step"] > 0
    assert "reloaded the model from checkpoint_000001/checkpoint.ckpt" in out


def test_lightning_warning_checkpoints_stops_and_resumes_to_the_same_weights(tmp_path, storage):
    """SIGUSR1 to `hpctrain run` during epoch 2 of 5: both ranks stop after that epoch's
    checkpoint (exit 75, run STOPPED); running the job again resumes with
    ``trainer.fit(ckpt_path=...)`` and ends with the weights and optimizer state of an
    uninterrupted run. Inside fit, the warning and SIGTERM handlers stay hpctrain's and
    the cluster environment is RayLightningEnvironment."""
    config = {"epochs": 5, "samples": 64}
    run, ref, stopped_after, stop_ckpt = warned_and_uninterrupted(
        tmp_path, storage, "lightning_deterministic", config, step_sleep=0.25)
    assert load_ckpt(os.path.join(run, "checkpoints", stop_ckpt),
                     "checkpoint.ckpt")["epoch"] == stopped_after - 1
    for rank in range(2):
        with open(os.path.join(run, "test-out", f"probe-rank-{rank}.json")) as f:
            probe = json.load(f)
        assert probe["sigusr1"] == "_take_warning_signal.<locals>.handler", probe
        assert probe["sigterm"] == "SIG_DFL", probe
        assert probe["environment"] == "RayLightningEnvironment"
        assert (probe["global_rank"], probe["world_size"]) == (rank, 2)
    with open(os.path.join(run, "test-out", "resumed-attempt-2")) as f:
        assert f.read().endswith(f"{stop_ckpt}/checkpoint.ckpt")
    reported = rows(run)
    assert [r["epoch"] for r in reported] == list(range(config["epochs"]))  # none lost, none twice
    last = reported[-1]["checkpoint_dir_name"]
    resumed = load_ckpt(os.path.join(run, "checkpoints", last), "checkpoint.ckpt")
    reference = load_ckpt(os.path.join(ref, "checkpoints", last), "checkpoint.ckpt")
    assert resumed["global_step"] == reference["global_step"] == 5 * 4
    assert_same_tensors(resumed["state_dict"], reference["state_dict"])
    for a, b in zip(resumed["optimizer_states"][0]["state"].values(),
                    reference["optimizer_states"][0]["state"].values()):
        assert_same_tensors(a, b)


# -------------------------------------------------------------------------- Transformers
def test_transformers_quickstart_example(tmp_path, storage):
    """examples/transformers_quickstart.py (Ray's Transformers guide, imports, data and
    model download changed): 2 data-parallel workers (7 steps per epoch for 100 samples
    of batch 8 per rank), one report per save with the evaluation metrics, and each
    checkpoint holds the Trainer's whole checkpoint folder, both ranks' RNG states
    included."""
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "transformers_quickstart.py"),
                        "--epochs", "2", "--storage", storage, "--name", "tq"],
                       capture_output=True, text=True, timeout=240, cwd=str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    run = os.path.join(storage, "tq")
    reported = rows(run)
    assert [(r["epoch"], r["step"]) for r in reported] == [(1.0, 7), (2.0, 14)]
    assert all(0.0 <= r["eval_accuracy"] <= 1.0 and r["eval_loss"] > 0 for r in reported)
    folder = os.path.join(run, "checkpoints", "checkpoint_000001", "checkpoint")
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json",
            "rng_state_0.pth", "rng_state_1.pth", "config.json"} <= set(os.listdir(folder))
    with open(os.path.join(folder, "trainer_state.json")) as f:
        assert json.load(f)["global_step"] == 14
    assert "reloaded the model from checkpoint_000001/checkpoint" in p.stdout


def test_transformers_warning_checkpoints_stops_and_resumes_to_the_same_weights(
        tmp_path, storage):
    """SIGUSR1 during a 4-epoch Trainer run: it stops after the next save; the rerun
    resumes with ``trainer.train(resume_from_checkpoint=...)`` and ends with the same
    weights, optimizer and learning-rate scheduler state as an uninterrupted run."""
    import torch
    from safetensors.torch import load_file

    run, ref, _, _ = warned_and_uninterrupted(tmp_path, storage, "transformers_resumable",
                                              {"epochs": 4}, step_sleep=0.15)
    assert [r["step"] for r in rows(run)] == [7, 14, 21, 28]
    resumed = os.path.join(run, "checkpoints", "checkpoint_000003", "checkpoint")
    reference = os.path.join(ref, "checkpoints", "checkpoint_000003", "checkpoint")
    assert_same_tensors(load_file(os.path.join(resumed, "model.safetensors")),
                        load_file(os.path.join(reference, "model.safetensors")))
    opt_a, opt_b = (torch.load(os.path.join(d, "optimizer.pt"), weights_only=False)
                    for d in (resumed, reference))
    for a, b in zip(opt_a["state"].values(), opt_b["state"].values()):
        assert_same_tensors(a, b)
    sched_a, sched_b = (torch.load(os.path.join(d, "scheduler.pt"), weights_only=False)
                        for d in (resumed, reference))
    assert sched_a == sched_b and sched_a["last_epoch"] == 28


# ---------------------------------------------------------------------------- Accelerate
def test_accelerate_quickstart_example(tmp_path, storage):
    """examples/accelerate_quickstart.py (Ray's Accelerate example, imports, data and
    model download changed): ``Accelerator()`` inside the training function sees both
    hpctrain workers with no configuration, evaluation is gathered across them, and each
    epoch's checkpoint holds the unwrapped model rank 0 saved."""
    import torch

    out = run_example("accelerate_quickstart.py", "--epochs", "2", "--storage", storage,
                      "--name", "aq")
    run = os.path.join(storage, "aq")
    reported = rows(run)
    assert [(r["epoch"], r["num_processes"]) for r in reported] == [(0, 2), (1, 2)]
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in reported)
    ckpt = os.path.join(run, "checkpoints", "checkpoint_000001")
    assert sorted(f for f in os.listdir(ckpt) if not f.startswith(".")) == ["ckpt_1.bin"]
    model = torch.load(os.path.join(ckpt, "ckpt_1.bin"), weights_only=False)
    assert type(model).__name__ == "BertForSequenceClassification"
    assert "on 2 processes" in out


def test_accelerate_warning_checkpoints_stops_and_resumes_to_the_same_weights(
        tmp_path, storage):
    """An Accelerate loop that checkpoints only when ``should_checkpoint()`` says so (and
    at its last epoch), warned by SIGUSR1 after its first report: both ranks commit one
    ``accelerator.save_state`` checkpoint (rank 0's model, optimizer and scheduler, each
    rank's RNG states) and stop; the rerun resumes with ``accelerator.load_state`` and
    ends with the model, optimizer and scheduler state of an uninterrupted run."""
    import torch
    from safetensors.torch import load_file

    config = {"epochs": 5}
    run, ref, stopped_after, stop_ckpt = warned_and_uninterrupted(
        tmp_path, storage, "accelerate_resumable", config, step_sleep=0.2)
    assert committed_files(os.path.join(run, "checkpoints", stop_ckpt)) == {
        "model.safetensors", "optimizer.bin", "scheduler.bin", "random_states_0.pkl",
        "random_states_1.pkl", "epoch.json"}
    assert [r["epoch"] for r in rows(run) if r["checkpoint_dir_name"]] == [
        stopped_after - 1, config["epochs"] - 1]  # only when asked, and at the end
    for rank in (0, 1):
        with open(os.path.join(run, "test-out", f"resumed-attempt-2-rank-{rank}")) as f:
            assert f.read() == f"epoch {stopped_after} of 2 processes"
    assert [r["epoch"] for r in rows(run)] == list(range(config["epochs"]))
    resumed, reference = (os.path.join(r, "checkpoints", rows(r)[-1]["checkpoint_dir_name"])
                          for r in (run, ref))
    assert_same_tensors(load_file(os.path.join(resumed, "model.safetensors")),
                        load_file(os.path.join(reference, "model.safetensors")))
    opt_a, opt_b = (torch.load(os.path.join(d, "optimizer.bin"), weights_only=False)
                    for d in (resumed, reference))
    assert len(opt_a["state"]) == 4
    for a, b in zip(opt_a["state"].values(), opt_b["state"].values()):
        assert_same_tensors(a, b)
    sched_a, sched_b = (torch.load(os.path.join(d, "scheduler.bin"), weights_only=False)
                        for d in (resumed, reference))
    # Accelerate steps a prepared scheduler once per process at each optimizer step
    assert sched_a == sched_b and sched_a["last_epoch"] == 5 * 4 * 2


# ----------------------------------------------------------------------------- DeepSpeed
def test_deepspeed_quickstart_example(storage):
    """examples/deepspeed_quickstart.py (Ray's DeepSpeed guide, imports, data and model
    download changed) with ZeRO-3 on 2 CPU workers: every rank's ``save_checkpoint``
    shards are committed as ONE checkpoint per epoch (rank 0's model and optimizer
    partitions, its ``latest`` tag and scripts, rank 1's partitions), and running the same
    script with ``--resume-from`` that checkpoint (``resume_from_checkpoint``) continues
    from it with ``load_checkpoint``."""
    pytest.importorskip("deepspeed")
    run_example("deepspeed_quickstart.py", "--epochs", "1", "--storage", storage,
                "--name", "dq")
    run = os.path.join(storage, "dq")
    ckpt = os.path.join(run, "checkpoints", "checkpoint_000000")
    shards = {f"global_step0/zero_pp_rank_{r}_mp_rank_00_{kind}_states.pt"
              for r in (0, 1) for kind in ("model", "optim")}
    assert committed_files(ckpt) == shards | {"latest", "zero_to_fp32.py", "zero_to_torch.py"}
    out = run_example("deepspeed_quickstart.py", "--epochs", "2", "--storage", storage,
                      "--name", "dq2", "--resume-from", ckpt)
    assert f"resumed from {ckpt} at epoch 1" in out
    assert [(r["epoch"], r["world_size"]) for r in rows(run) + rows(run + "2")] == \
        [(0, 2), (1, 2)]
    assert committed_files(os.path.join(run + "2", "checkpoints", "checkpoint_000000")) == \
        committed_files(ckpt)


def test_deepspeed_restart_after_crash_ends_with_the_same_weights(storage):
    """ZeRO-2, 4 epochs, rank 1 crashes at epoch 2 (FailureConfig(max_failures=1)): the
    restart loads epoch 1's sharded checkpoint with ``load_checkpoint`` on both ranks and
    ends with the weights and each rank's optimizer partition of an uninterrupted run.
    DeepSpeed runs on hpctrain's device and process group (CPU, Gloo)."""
    pytest.importorskip("deepspeed")
    import torch

    import framework_workloads
    from helpers import fit, out

    config = {"epochs": 4, "zero_stage": 2}
    crashed = fit(framework_workloads.deepspeed_resumable, storage, max_failures=1,
                  config=dict(config, crash_at=2), name="crashed")
    straight = fit(framework_workloads.deepspeed_resumable, storage, config=config,
                   name="straight")
    for rank in (0, 1):
        with open(out(crashed, f"deepspeed-rank-{rank}")) as f:   # set by hpctrain
            assert f.read() == "DS_ACCELERATOR=cpu cpu gloo"
        with open(out(crashed, f"resumed-attempt-2-rank-{rank}")) as f:
            assert f.read() == "global_step8/mp_rank_00_model_states.pt 2"  # epoch 1: 2 x 4 steps
    ckpt = crashed.checkpoint.path
    assert committed_files(ckpt) == {
        "latest", "zero_to_fp32.py", "zero_to_torch.py",
        "global_step16/mp_rank_00_model_states.pt",         # rank 0 only (ZeRO-1/2)
        "global_step16/zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "global_step16/zero_pp_rank_1_mp_rank_00_optim_states.pt"}
    assert [r["epoch"] for r in rows(crashed.path)] == [0, 1, 2, 3]
    assert_same_tensors(torch.load(out(crashed, "final.pt")),
                        torch.load(out(straight, "final.pt")))
    assert_same_zero_partitions(crashed.checkpoint.path, straight.checkpoint.path, step=16)


def assert_same_zero_partitions(ckpt_a, ckpt_b, step):
    """Both ranks' ZeRO-1/2 optimizer partitions (fp32 master weights and Adam's moments)
    at ``global_step{step}`` are equal in two DeepSpeed checkpoints, and not empty."""
    import torch

    for rank in (0, 1):
        name = f"global_step{step}/zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"
        a, b = (load_ckpt(c, name)["optimizer_state_dict"] for c in (ckpt_a, ckpt_b))
        assert a["single_partition_of_fp32_groups"][0].numel() > 0
        assert torch.equal(a["single_partition_of_fp32_groups"][0],
                           b["single_partition_of_fp32_groups"][0])
        for sa, sb in zip(a["base_optimizer_state"]["state"].values(),
                          b["base_optimizer_state"]["state"].values()):
            assert_same_tensors(sa, sb)


def test_deepspeed_warning_checkpoints_stops_and_resumes_to_the_same_weights(
        tmp_path, storage):
    """ZeRO-2, 5 epochs, SIGUSR1 to `hpctrain run` after the first report: both ranks stop
    after the next epoch's ``save_checkpoint`` (exit 75, run STOPPED); running the job
    again resumes on both ranks with ``model.load_checkpoint`` from that checkpoint and
    ends with the weights and each rank's optimizer partition of an uninterrupted run."""
    pytest.importorskip("deepspeed")
    import torch

    config = {"epochs": 5, "zero_stage": 2}
    run, ref, stopped_after, stop_ckpt = warned_and_uninterrupted(
        tmp_path, storage, "deepspeed_resumable", config, step_sleep=0.2)
    for rank in (0, 1):  # 4 steps an epoch (64 samples, 2 ranks, micro-batch 8)
        with open(os.path.join(run, "test-out", f"resumed-attempt-2-rank-{rank}")) as f:
            assert f.read() == (f"global_step{4 * stopped_after}/mp_rank_00_model_states.pt "
                                f"{stopped_after}")
    assert [r["epoch"] for r in rows(run)] == list(range(config["epochs"]))
    assert_same_tensors(torch.load(os.path.join(run, "test-out", "final.pt")),
                        torch.load(os.path.join(ref, "test-out", "final.pt")))
    last = rows(run)[-1]["checkpoint_dir_name"]
    assert last == rows(ref)[-1]["checkpoint_dir_name"] != stop_ckpt
    assert_same_zero_partitions(os.path.join(run, "checkpoints", last),
                                os.path.join(ref, "checkpoints", last), step=20)


# ------------------------------------------------------------------ names and misuse
def test_ray_import_paths_give_the_same_objects():
    """``ray.train.lightning`` → ``hpctrain.train.lightning`` and
    ``ray.train.huggingface.transformers`` → ``hpctrain.train.huggingface.transformers``."""
    import hpctrain.huggingface.transformers as hf
    import hpctrain.lightning as hl
    import hpctrain.train.huggingface.transformers as ray_hf
    import hpctrain.train.lightning as ray_hl

    assert set(hl.__all__) == {"RayDDPStrategy", "RayFSDPStrategy", "RayDeepSpeedStrategy",
                               "RayLightningEnvironment", "RayTrainReportCallback",
                               "prepare_trainer"}
    assert set(hf.__all__) == {"RayTrainReportCallback", "prepare_trainer"}
    for module, ray_module in ((hl, ray_hl), (hf, ray_hf)):
        for name in module.__all__:
            assert getattr(ray_module, name) is getattr(module, name), name
    assert hl.RayTrainReportCallback.CHECKPOINT_NAME == "checkpoint.ckpt"
    assert hf.RayTrainReportCallback.CHECKPOINT_NAME == "checkpoint"


def test_lightning_misuse_is_refused_with_a_hint():
    """Outside a training function, and a Trainer with Lightning's own strategy."""
    import lightning.pytorch as pl

    import hpctrain.lightning as hl

    with pytest.raises(RuntimeError) as e:
        hl.RayTrainReportCallback()
    assert "no hpctrain training session" in str(e.value)
    assert "HINT: build the Lightning Trainer inside the training function" in str(e.value)
    trainer = pl.Trainer(strategy="ddp", accelerator="cpu", devices=1, logger=False,
                         enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(RuntimeError) as e:
        hl.prepare_trainer(trainer)
    assert "Invalid strategy class" in str(e.value)
    assert "HINT: pl.Trainer(strategy=hpctrain.lightning.RayDDPStrategy()" in str(e.value)
