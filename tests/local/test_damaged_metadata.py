"""Damaged metadata never blocks a run or loses one (issue 25, item 6).

Real runs (two ranks of ``workloads.deterministic``, a checkpoint per epoch) whose run
directory is then damaged the way a full disk, a crashed copy or a hand edit leaves it:
a truncated or missing commit record, a truncated ``state.json`` or ``spec.toml``, a
checkpoint whose content no longer matches its checksum, a file of a newer format. Each
test continues the run as a user would (``Trainer.restore`` or a second ``fit()`` under
the same name) and checks the checkpoint it resumed from (the last good one), that
nothing was deleted (what is damaged is still on disk, aside), and what the user is told
(the file, by name, and a HINT where the user has to act).
"""
import doctest
import json
import logging
import os

import pytest

import workloads
from hpctrain import CheckpointConfig, Result, TrainingFailedError
from hpctrain.errors import ConfigError
from hpctrain.torch import TorchTrainer
from helpers import cli, fit

#: Wide enough that `hpctrain results` (rich) does not wrap the paths it prints.
WIDE = dict(os.environ, COLUMNS="400")
RECORD = ".hpctrain_checkpoint.json"


@pytest.fixture
def warnings_seen():
    """hpctrain's warnings, whatever the logging configuration of this process."""
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Keep(logging.WARNING)
    logger = logging.getLogger("hpctrain")
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)


def _crashed(storage, name):
    """A run that committed checkpoints 0, 1, 2 (epochs 0-2) and failed at epoch 3 (its
    first attempt only: continued, it trains to the end)."""
    with pytest.raises(TrainingFailedError):
        fit(workloads.deterministic, storage, name=name, config=_CRASHING)
    run = os.path.join(storage, name)
    assert _names(run) == ["checkpoint_000000", "checkpoint_000001", "checkpoint_000002"]
    return run


_CRASHING = {"epochs": 5, "crash_at": 3, "crash_rank": 1}


def _ckdir(run):
    return os.path.join(run, "checkpoints")


def _names(run):
    return sorted(e for e in os.listdir(_ckdir(run)) if e.startswith("checkpoint_"))


def _aside(run):
    return sorted(e for e in os.listdir(_ckdir(run)) if e.startswith(".damaged_"))


def _resumed_from(run, attempt):
    """(checkpoint name, first epoch trained) of the run's attempt ``attempt``."""
    with open(os.path.join(run, "test-out", f"resumed-attempt-{attempt}-rank-0")) as f:
        path, start, _restarts = f.read().split()
    return os.path.basename(path), int(start)


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _state(run):
    with open(os.path.join(run, "state.json")) as f:
        return json.load(f)


def test_a_truncated_commit_record_is_moved_aside_and_the_run_resumes_from_the_one_before(
        storage, warnings_seen):
    run = _crashed(storage, "record")
    record = os.path.join(_ckdir(run), "checkpoint_000002", RECORD)
    _truncate(record)

    # reading the run is not blocked: the checkpoint is not committed, the one before is
    # the latest, and `results` names the damaged record
    status = cli("status", run)
    assert "latest checkpoint: " + os.path.join(_ckdir(run), "checkpoint_000001") in status.stdout
    results = cli("results", run, env=WIDE)
    assert "not committed" in results.stdout and record in results.stdout
    assert Result.from_path(run).checkpoint.path.endswith("checkpoint_000001")

    result = TorchTrainer.restore(run).fit()
    assert result.status == "FINISHED"
    assert _resumed_from(run, 2) == ("checkpoint_000001", 2)
    # kept aside, whole; its index is never reused
    (aside,) = _aside(run)
    assert aside.startswith(".damaged_checkpoint_000002_")
    assert {RECORD, "state.pt"} <= set(os.listdir(os.path.join(_ckdir(run), aside)))
    assert _names(run) == ["checkpoint_000000", "checkpoint_000001", "checkpoint_000003",
                           "checkpoint_000004", "checkpoint_000005"]
    assert result.checkpoint.path.endswith("checkpoint_000005")
    assert result.checkpoint.metrics["epoch"] == 4
    moved = [w for w in warnings_seen if "moved aside" in w.lower()]
    assert len(moved) == 1 and record in moved[0] and aside in moved[0], warnings_seen


def test_a_missing_commit_record_never_makes_the_next_commit_collide(storage,
                                                                      warnings_seen):
    run = _crashed(storage, "norecord")
    os.unlink(os.path.join(_ckdir(run), "checkpoint_000002", RECORD))

    # the same run again, by name: it continues
    result = fit(workloads.deterministic, storage, name="norecord",
                 config=_CRASHING)
    assert result.status == "FINISHED" and result.path == run
    assert _resumed_from(run, 2) == ("checkpoint_000001", 2)
    (aside,) = _aside(run)
    assert aside.startswith(".damaged_checkpoint_000002_")
    kept = os.listdir(os.path.join(_ckdir(run), aside))
    assert "state.pt" in kept and RECORD not in kept
    assert _names(run) == ["checkpoint_000000", "checkpoint_000001", "checkpoint_000003",
                           "checkpoint_000004", "checkpoint_000005"]
    assert any("checkpoint_000002" in w and "no commit record" in w for w in warnings_seen)


def test_a_truncated_state_json_is_an_error_naming_it_and_its_hint_resumes_the_run(storage):
    run = _crashed(storage, "state")
    state_file = os.path.join(run, "state.json")
    _truncate(state_file)

    with pytest.raises(ConfigError) as info:
        TorchTrainer.restore(run)
    message = str(info.value)
    assert message.startswith(f"{state_file}: the run's state record is damaged")
    assert "\nHINT: " in message and f"mv {state_file} {state_file}.damaged" in message
    for command in ("status", "results"):
        p = cli(command, run, check=False)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert f"hpctrain: error: {state_file}: the run's state record is damaged" in p.stderr
        assert "HINT: " in p.stderr

    # what the HINT says: keep a copy, start the record afresh, restore
    os.rename(state_file, state_file + ".damaged")
    with open(state_file, "w") as f:
        f.write("{}")
    result = TorchTrainer.restore(run, train_loop_config={"epochs": 5}).fit()
    assert result.status == "FINISHED"
    assert _resumed_from(run, 1) == ("checkpoint_000002", 3)  # a new attempt history
    assert os.path.exists(state_file + ".damaged")
    assert _names(run) == [f"checkpoint_{i:06d}" for i in range(5)]
    assert _state(run)["format"] == 1


def test_a_truncated_spec_toml_is_an_error_naming_it_not_a_silent_pass(storage):
    run = _crashed(storage, "spec")
    spec_file = os.path.join(run, "spec.toml")
    _truncate(spec_file)
    before = _state(run)

    # continuing by name compares the spec with spec.toml: refused, not waved through
    with pytest.raises(ConfigError) as info:
        fit(workloads.deterministic, storage, name="spec", config=_CRASHING)
    message = str(info.value)
    assert message.startswith(f"{spec_file}: the run's resolved spec is damaged")
    assert "\nHINT: " in message and f"mv {spec_file} {spec_file}.damaged" in message
    assert _state(run) == before  # nothing was started
    with pytest.raises(ConfigError, match="resolved spec is damaged"):
        TorchTrainer.restore(run)  # would lose the scheduler it was submitted to
    results = cli("results", run, env=WIDE)
    assert f"{spec_file}: the run's resolved spec is damaged" in results.stdout
    assert "checkpoint_000002" in results.stdout  # the checkpoints are still listed

    os.rename(spec_file, spec_file + ".damaged")  # what the HINT says
    result = fit(workloads.deterministic, storage, name="spec", config=_CRASHING)
    assert result.status == "FINISHED"
    assert _resumed_from(run, 2) == ("checkpoint_000002", 3)
    assert os.path.exists(spec_file + ".damaged")
    with open(spec_file) as f:
        assert "\nformat = 1\n" in f.read()
    assert _names(run) == [f"checkpoint_{i:06d}" for i in range(5)]


def test_a_checkpoint_that_fails_verification_does_not_count_toward_num_to_keep(
        storage, warnings_seen):
    from hpctrain.rundir.commit import verify_checkpoint

    keep2 = CheckpointConfig(num_to_keep=2)
    fit(workloads.deterministic, storage, name="verify", config={"epochs": 3},
        ckpt=keep2)
    run = os.path.join(storage, "verify")
    assert _names(run) == ["checkpoint_000001", "checkpoint_000002"]
    latest = os.path.join(_ckdir(run), "checkpoint_000002")
    # its content digest was recorded (the run ended cleanly): flip bytes, same size
    assert os.path.exists(os.path.join(latest, ".hpctrain_digest.rank-0.json"))
    with open(os.path.join(latest, "state.pt"), "r+b") as f:
        f.seek(200)
        old = f.read(8)
        f.seek(200)
        f.write(bytes(b ^ 0xFF for b in old))
    assert verify_checkpoint(latest) == ["state.pt: content digest mismatch"]

    # continued for two more epochs; it fails again after one commit
    with pytest.raises(TrainingFailedError):
        TorchTrainer.restore(run, train_loop_config={
            "epochs": 5, "crashes": [[2, 1, 3, None]]}).fit()
    assert _resumed_from(run, 2) == ("checkpoint_000001", 2)
    # the damaged one went aside and did not take a place among the 2 kept: the good
    # checkpoint it resumed from is still there, beside the new one
    assert _names(run) == ["checkpoint_000001", "checkpoint_000003"]
    (aside,) = _aside(run)
    assert aside.startswith(".damaged_checkpoint_000002_")
    assert verify_checkpoint(os.path.join(_ckdir(run), aside)) == [
        "state.pt: content digest mismatch"]
    skipped = _state(run)["attempts"][1]["skipped_checkpoints"]
    assert [s["checkpoint"] for s in skipped] == ["checkpoint_000002"]
    assert any("failed verification" in w and aside in w for w in warnings_seen)

    result = TorchTrainer.restore(run, train_loop_config={"epochs": 5}).fit()
    assert result.status == "FINISHED"
    assert _resumed_from(run, 3) == ("checkpoint_000003", 3)
    assert _names(run) == ["checkpoint_000004", "checkpoint_000005"]
    assert _aside(run) == [aside]
    for name in _names(run):
        assert verify_checkpoint(os.path.join(_ckdir(run), name)) == []


def _rewrite_json(path, **changes):
    with open(path) as f:
        data = json.load(f)
    for k, v in changes.items():
        if v is None:
            data.pop(k, None)
        else:
            data[k] = v
    with open(path, "w") as f:
        json.dump(data, f)


def test_format_versions_are_written_a_newer_one_is_refused_a_missing_one_reads_as_1(storage):
    import tomllib

    from hpctrain.spec import load_job_spec

    fit(workloads.deterministic, storage, name="fmt", config={"epochs": 2})
    run = os.path.join(storage, "fmt")
    state_file, spec_file = os.path.join(run, "state.json"), os.path.join(run, "spec.toml")
    records = [os.path.join(_ckdir(run), n, RECORD) for n in _names(run)]
    assert len(records) == 2
    assert _state(run)["format"] == 1
    for record in records:
        with open(record) as f:
            assert json.load(f)["format"] == 1
    with open(spec_file, "rb") as f:
        assert tomllib.load(f)["format"] == 1
    entry = ['job.entrypoint="workloads:deterministic"']  # a run from Python has none
    assert load_job_spec(spec_file, entry).config == {"epochs": 2}  # spec.toml still loads

    # written by a newer hpctrain: refused, saying so, with a HINT; nothing is changed
    newer = "written by a newer hpctrain"
    _rewrite_json(state_file, format=2)
    with pytest.raises(ConfigError, match=newer) as info:
        TorchTrainer.restore(run)
    assert str(info.value).startswith(state_file) and "HINT: upgrade hpctrain" in str(info.value)
    p = cli("status", run, check=False)
    assert p.returncode == 2 and newer in p.stderr and "HINT: upgrade" in p.stderr
    _rewrite_json(state_file, format=1)

    _rewrite_json(records[-1], format=2)
    with pytest.raises(ConfigError, match=newer) as info:
        Result.from_path(run)
    assert str(info.value).startswith(records[-1])
    with pytest.raises(ConfigError, match=newer):
        TorchTrainer.restore(run, train_loop_config={"epochs": 3}).fit()
    assert _names(run) == ["checkpoint_000000", "checkpoint_000001"] and _aside(run) == []
    assert _state(run)["status"] == "FINISHED"  # not left RUNNING
    _rewrite_json(records[-1], format=1)

    with open(spec_file) as f:
        text = f.read()
    with open(spec_file, "w") as f:
        f.write(text.replace("\nformat = 1\n", "\nformat = 7\n"))
    with pytest.raises(ConfigError, match=newer):
        TorchTrainer.restore(run)
    with pytest.raises(ConfigError, match=newer):
        load_job_spec(spec_file, entry)

    # a run of an hpctrain before format versions: no "format" anywhere, read as 1
    with open(spec_file, "w") as f:
        f.write(text.replace("\nformat = 1\n", "\n"))
    _rewrite_json(state_file, format=None)
    for record in records:
        _rewrite_json(record, format=None)
    result = TorchTrainer.restore(run, train_loop_config={"epochs": 3}).fit()
    assert result.status == "FINISHED"
    assert _resumed_from(run, 2) == ("checkpoint_000001", 2)
    assert _names(run) == [f"checkpoint_{i:06d}" for i in range(3)]


def test_format_helpers_examples():
    import hpctrain.common.formats as formats

    assert doctest.testmod(formats, optionflags=doctest.ELLIPSIS).failed == 0
