"""The hang watchdog, with real ranks that stop making progress: inside DDP's allreduce
(a peer that never comes), in the data loader, and before the process group forms. Each
is detected within the limit, every rank's Python stack is in the attempt's directory,
the run restarts from its last checkpoint and ends with the same weights as a run that
never hung."""
import os
import time

import pytest
import torch

import hang_workloads
from helpers import out, run_state

# FailureConfig(hang_timeout=...): a fixed limit, so the test's time is known; long enough
# for a healthy start-up on a loaded 2-core machine (imports, the process group)
LIMIT_S = 15


def _fit(storage, name, **config):
    from hpctrain import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from hpctrain.torch import TorchTrainer

    return TorchTrainer(
        hang_workloads.stalls, train_loop_config=dict(epochs=4, **config),
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name=name, storage_path=storage, verbose=0,
                             checkpoint_config=CheckpointConfig(num_to_keep=2),
                             failure_config=FailureConfig(max_failures=1,
                                                          hang_timeout=LIMIT_S))).fit()


def _same_final(a, b):
    sa, sb = torch.load(out(a, "final.pt")), torch.load(out(b, "final.pt"))
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    return _fit(str(tmp_path_factory.mktemp("straight")), "straight")


def _check_hang(result, *, blamed, phase, stack_of_1, stack_of_0=None):
    state = run_state(result.path)
    first, second = state["attempts"][0], state["attempts"][1]
    assert first["outcome"] == "FAILED" and second["outcome"] == "FINISHED"
    hang = first["hang"]
    assert hang["phase"] == phase and hang["limit_s"] == LIMIT_S and not hang["learned"]
    assert 1 in hang["stalled_ranks"]
    if blamed is not None:
        assert hang["rank"] == blamed and first["failed_rank"] == blamed
    assert first["error"].startswith(f"hang: rank {hang['rank']}")
    # detected within the limit (plus the heartbeat's and the watchdog's own periods, and
    # the few seconds the ranks get to write their stacks)
    assert first["ended"] - first["started"] < LIMIT_S + 45
    from hpctrain.rundir.layout import RunDir

    adir = RunDir(result.path).attempt_dir(1)
    stacks = {r: open(os.path.join(adir, f"stacks.rank-{r}.txt")).read() for r in (0, 1)}
    assert hang["stacks"] == ["stacks.rank-0.txt", "stacks.rank-1.txt"]
    assert stack_of_1 in stacks[1], stacks[1]
    if stack_of_0:
        assert stack_of_0 in stacks[0], stacks[0]
    return first, second


@pytest.mark.slow
def test_a_rank_that_stops_before_the_allreduce_is_a_hang_and_the_run_resumes(storage, straight):
    result = _fit(storage, "allreduce", stall_at=2, how="allreduce")
    first, second = _check_hang(result, blamed=None, phase="train",
                                stack_of_1="in stalls", stack_of_0="backward")
    assert second["resumed_from"].endswith("checkpoint_000001")  # epoch 1's, the last
    _same_final(result, straight)


@pytest.mark.slow
def test_a_data_loader_that_sleeps_is_a_hang_of_that_rank(storage, straight):
    result = _fit(storage, "loader", stall_at=2, how="loader")
    _check_hang(result, blamed=1, phase="train", stack_of_1="in __getitem__")
    _same_final(result, straight)


@pytest.mark.slow
def test_a_rank_stuck_before_the_process_group_forms_is_a_start_up_hang(storage, straight,
                                                                         monkeypatch):
    monkeypatch.setenv("HPCTRAIN_TEST_STALL_AT_IMPORT", "1")
    result = _fit(storage, "startup")
    first, _ = _check_hang(result, blamed=1, phase="start", stack_of_1="hang_workloads.py")
    assert "while starting" in first["error"]
    _same_final(result, straight)


def test_the_watchdog_learns_its_limit_from_the_runs_own_pace(tmp_path):
    """Without a fixed limit: 3× the longest gap between two moves of any rank, at least
    the floor; before a rank's first move, the start-up limit."""
    import json

    from hpctrain.allocation.watchdog import Watchdog

    def beat(rank, progress, at, phase="train"):
        with open(tmp_path / f"heartbeat.rank-{rank}.json", "w") as f:
            json.dump({"rank": rank, "progress": progress, "time": at, "phase": phase,
                       "host": "n1"}, f)

    t0 = time.time() - 1000
    dog = Watchdog(str(tmp_path), 2, started=t0, floor_s=10, startup_floor_s=50, check_s=0)
    beat(0, 0, t0, "start")
    beat(1, 0, t0, "start")
    assert dog.poll(now=t0 + 40) is None            # start-up, under 50 s
    beat(0, 1, t0 + 45)
    beat(1, 1, t0 + 46)
    assert dog.poll(now=t0 + 47) is None
    beat(0, 2, t0 + 65)                              # a 20 s step: limit 3 × 20 = 60 s
    beat(1, 2, t0 + 66)
    assert dog.poll(now=t0 + 120) is None            # 55 s idle: under 60
    assert dog.limits()[0] == 60
    beat(0, 3, t0 + 80)
    hang = dog.poll(now=t0 + 127)                    # rank 1: 61 s without a move
    assert hang is not None and hang.rank == 1 and hang.stalled == [1] and hang.learned
    assert "rank 1 on n1 made no progress for 61 s" in hang.summary()


def test_hang_timeout_in_a_job_file_is_a_duration_or_off(tmp_path):
    """``[failure] hang_timeout``: a duration, ``"off"``; anything else is an error naming
    the file and the key, with what is expected."""
    from hpctrain.errors import ConfigError
    from hpctrain.spec import load_job_spec

    (tmp_path / "train.py").write_text("def f(config):\n    pass\n")

    def spec(value):
        path = tmp_path / "job.toml"
        path.write_text('[job]\nentrypoint = "train.py:f"\n[run]\nname = "x"\n'
                        f'[failure]\nhang_timeout = "{value}"\n')
        return load_job_spec(str(path))

    assert spec("20m").run.failure_config.hang_timeout_s == 1200
    assert spec("off").run.failure_config.hang_timeout_s == 0
    # the resolved spec (spec.toml, what the batch step reads) keeps it
    from hpctrain.spec import spec_from_dict
    for value, seconds in (("20m", 1200), ("off", 0)):
        again = spec_from_dict(spec(value).to_toml_dict(), file="spec.toml", base_dir=str(tmp_path))
        assert again.run.failure_config.hang_timeout_s == seconds
    with pytest.raises(ConfigError) as info:
        spec("soon")
    assert "job.toml: failure.hang_timeout" in str(info.value)
    assert 'or "off" for no watchdog' in str(info.value)
