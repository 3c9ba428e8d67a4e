"""The storage axis (``hpctrain/storage/``): the interface's contract on POSIX, and a
second storage kind written only here, registered here, used by a real run.

The toy kind, ``norename://ROOT``, is an object store's shape on a local disk: it never
renames (a checkpoint is published by copying its files under the final name and writing
the commit record last), keeps the run's data under ``ROOT/.objects/<name>`` apart from the
run's control files (``ROOT/<name>``: state.json, locks, spec, logs), and journals what it
does to ``ROOT/journal.txt``. No hpctrain file knows it.
"""
import json
import os
import shutil
import stat

import pytest

import hpctrain
from hpctrain import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig
from hpctrain.common.registry import STORAGES, register_storage, storage_for
from hpctrain.rundir.commit import publish, stage_shard
from hpctrain.rundir.layout import RunDir
from hpctrain.errors import ConfigError
from hpctrain.storage.base import Storage
from hpctrain.storage.posix import PosixStorage


# --------------------------------------------------------------------------- the toy kind
class NoRenameStorage(Storage):
    """``norename:///abs/root``: data under ``root/.objects``, control files under
    ``root``; no rename anywhere; every step journaled (with the pid that did it)."""

    scheme = "norename"
    local = True  # its data are local files: a checkpoint is opened where it lies
    #: tests: publish dies (OSError) after copying this many files
    fail_after = None

    @staticmethod
    def _root(uri: str) -> str:
        return uri[len("norename://"):].rstrip("/") if uri.startswith("norename://") else uri

    def _journal(self, path: str, what: str) -> None:
        root = path.split("/.objects/")[0] if "/.objects/" in path else os.path.dirname(path)
        with open(os.path.join(root, "journal.txt"), "a") as f:
            f.write(f"{os.getpid()} {what} {os.path.basename(path.rstrip('/'))}\n")

    def data_path(self, location):
        root, _, name = self._root(location).rpartition("/")
        return os.path.join(root, ".objects", name)

    def control_dir(self, location):
        return self._root(location)

    def join(self, base, *parts):
        return os.path.join(self._root(base), *parts)

    def listdir(self, path):
        try:
            return os.listdir(self._root(path))
        except FileNotFoundError:
            return []

    def isdir(self, path):
        return os.path.isdir(self._root(path))

    def read_small(self, path):
        with open(path, "rb") as f:
            return f.read()

    def makedirs(self, path, mode):
        os.makedirs(path, mode, exist_ok=True)

    def write_atomic(self, path, data, *, sync=True, mode=None):
        with open(path, "wb") as f:  # one PUT
            f.write(data)

    def publish(self, staged, final, record_name, record, *, sync, mode):
        # the staging is on POSIX: take it out of the ranks' sight first (see base.publish)
        taken = f"{staged}.publishing"
        os.rename(staged, taken)
        staged = taken
        for n, rel in enumerate(sorted(_files(staged))):
            if self.fail_after is not None and n >= self.fail_after:
                raise OSError(5, "the connection dropped mid-upload")
            os.makedirs(os.path.dirname(os.path.join(final, rel)), exist_ok=True)
            shutil.copyfile(os.path.join(staged, rel), os.path.join(final, rel))
        self.write_atomic(os.path.join(final, record_name), record)  # last
        shutil.rmtree(staged, ignore_errors=True)  # (what is left: the next attempt's)
        self._journal(final, "publish")

    def retire(self, path):
        os.unlink(os.path.join(path, ".hpctrain_checkpoint.json"))  # no longer one
        self._journal(path, "retire")
        return path

    def set_aside(self, path, new_name):
        aside = os.path.join(os.path.dirname(path), new_name)
        shutil.copytree(path, aside)
        shutil.rmtree(path)
        return aside

    def delete(self, path):
        shutil.rmtree(path, ignore_errors=True)
        self._journal(path, "delete")

    def copy_in(self, local_dir, path, mode):
        shutil.copytree(local_dir, path, dirs_exist_ok=True)

    def copy_out(self, path, local_dir):
        shutil.copytree(path, local_dir, dirs_exist_ok=True)
        return local_dir


def _files(root):
    return [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs]


@pytest.fixture
def norename():
    with STORAGES.scoped():
        register_storage("norename", f"{__name__}:NoRenameStorage")
        yield
    NoRenameStorage.fail_after = None


def scored(config):
    """Reports ``scores`` with a checkpoint each (two ranks: a shard each)."""
    import tempfile

    ctx = hpctrain.get_context()
    start = hpctrain.get_checkpoint()
    first = 0 if start is None else start.get_metadata()["i"] + 1
    for i in range(first, len(config["scores"])):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, f"rank{ctx.get_world_rank()}.txt"), "w") as f:
                f.write(str(i))
            ckpt = Checkpoint.from_directory(d)
            ckpt.set_metadata({"i": i})
            hpctrain.report({"score": config["scores"][i], "i": i}, checkpoint=ckpt)


# --------------------------------------------------------------------------- choosing a kind
def test_a_path_is_posix_and_an_unknown_scheme_is_refused_naming_the_key(tmp_path):
    assert isinstance(storage_for(str(tmp_path)), PosixStorage)
    assert isinstance(storage_for(f"file://{tmp_path}"), PosixStorage)
    with pytest.raises(ConfigError, match=r"run.storage_path: .*'gopher://h/runs'.*gopher://"):
        RunConfig(storage_path="gopher://h/runs")
    with pytest.raises(ConfigError, match="norename://"):
        RunConfig(storage_path="norename:///x")  # not registered (outside the fixture)


def test_a_registered_scheme_is_kept_and_chosen(norename, tmp_path):
    assert RunConfig(storage_path=f"norename://{tmp_path}").storage_path == \
        f"norename://{tmp_path}"
    assert isinstance(storage_for(f"norename://{tmp_path}"), NoRenameStorage)


# --------------------------------------------------------------------------- POSIX contract
def _stage(run, tmp_path, iteration, files):
    src = tmp_path / f"src{iteration}"
    src.mkdir()
    for name, data in files.items():
        (src / name).write_bytes(data)
    stage_shard(run, iteration, 0, Checkpoint(str(src)), sync=True)


def test_posix_publish_is_one_rename_and_a_crash_before_it_leaves_nothing_to_restore(
        tmp_path, monkeypatch):
    run = RunDir(tmp_path / "run")
    run.create()
    _stage(run, tmp_path, 0, {"w.bin": b"0"})
    assert publish(run, 0, 0, metrics={"i": 0}, world_size=1, config=CheckpointConfig(),
                   started=0)[0] == "checkpoint_000000"
    _stage(run, tmp_path, 1, {"w.bin": b"1", "x.bin": b"1"})

    def dies(*_a, **_k):  # the process dies at the step that makes it visible
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "rename", dies)
    with pytest.raises(KeyboardInterrupt):
        publish(run, 1, 1, metrics={"i": 1}, world_size=1, config=CheckpointConfig(),
                started=0)
    monkeypatch.undo()
    # a restore picks the previous checkpoint; the next attempt cleans the staging away
    assert [r.iteration for r in run.list_checkpoints()] == [0]
    assert run.latest_checkpoint().checkpoint().get_metadata() == {}
    assert run.clean_incomplete() == [".tmp_checkpoint_i000000001"]
    assert os.listdir(run.checkpoints_dir) == ["checkpoint_000000"]


def test_posix_keeps_the_runs_modes(tmp_path):
    run = RunDir(tmp_path / "run")
    run.create(share="group")
    _stage(run, tmp_path, 0, {"w.bin": b"0"})
    publish(run, 0, 0, metrics={}, world_size=1, config=CheckpointConfig(), started=0)
    ckpt = os.path.join(run.checkpoints_dir, "checkpoint_000000")
    assert stat.S_IMODE(os.stat(ckpt).st_mode) == 0o2750
    for name in ("w.bin", ".hpctrain_checkpoint.json"):
        assert stat.S_IMODE(os.stat(os.path.join(ckpt, name)).st_mode) == 0o640
    assert not os.path.exists(os.path.join(run.internal_dir, "storage.json"))  # posix


def test_posix_listing_reading_and_copies(tmp_path):
    storage = storage_for(str(tmp_path))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "m.json").write_bytes(b'{"k": 1}')
    assert storage.listdir(str(tmp_path)) == ["a"] and storage.listdir(str(tmp_path / "no")) == []
    assert json.loads(storage.read_small(storage.join(str(tmp_path), "a", "m.json"))) == {"k": 1}
    with pytest.raises(FileNotFoundError):
        storage.read_small(str(tmp_path / "a" / "missing.json"))
    storage.copy_in(str(tmp_path / "a"), str(tmp_path / "b"), 0o600)
    assert stat.S_IMODE(os.stat(tmp_path / "b" / "m.json").st_mode) == 0o600
    assert storage.copy_out(str(tmp_path / "b"), str(tmp_path / "c")) == str(tmp_path / "c")
    assert (tmp_path / "c" / "m.json").read_bytes() == b'{"k": 1}'
    storage.delete(str(tmp_path / "c"))
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]


# --------------------------------------------------------------------------- a second kind
def test_a_rename_less_kind_crashing_mid_publish_leaves_nothing_a_restore_picks(
        norename, tmp_path):
    run = RunDir(f"norename://{tmp_path}/run")
    run.create()
    assert run.path == str(tmp_path / "run")
    assert run.checkpoints_dir == str(tmp_path / ".objects" / "run" / "checkpoints")
    _stage(run, tmp_path, 0, {"a.bin": b"0", "b.bin": b"0"})
    publish(run, 0, 0, metrics={}, world_size=1, config=CheckpointConfig(), started=0)
    _stage(run, tmp_path, 1, {"a.bin": b"1", "b.bin": b"1"})
    NoRenameStorage.fail_after = 1  # one file uploaded, then the connection drops
    with pytest.raises(hpctrain.errors.CheckpointError, match="mid-upload"):
        publish(run, 1, 1, metrics={}, world_size=1, config=CheckpointConfig(), started=0)
    # half of checkpoint_000001 is there, without its commit record: never restored
    half = os.listdir(os.path.join(run.checkpoints_dir, "checkpoint_000001"))
    assert len(half) == 1 and ".hpctrain_checkpoint.json" not in half
    assert [r.index for r in run.list_checkpoints()] == [0]
    run.clean_incomplete()  # the next attempt: set aside, and its index never reused
    assert run.next_checkpoint_index() == 2
    assert [r.index for r in run.list_checkpoints()] == [0]


def test_a_real_run_on_a_storage_kind_written_only_in_this_test(norename, tmp_path):
    from hpctrain.cli.listing import list_storage
    from hpctrain.torch import TorchTrainer

    pytest.importorskip("torch")
    storage = f"norename://{tmp_path}"
    trainer = TorchTrainer(
        scored, train_loop_config={"scores": [3, 1, 2, 5]},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="toy", storage_path=storage, verbose=0,
                             checkpoint_config=CheckpointConfig(num_to_keep=2)))
    result = trainer.fit()
    assert result.metrics["i"] == 3
    # the control files on the POSIX side, the checkpoints in the toy kind's data tree
    control, data = tmp_path / "toy", tmp_path / ".objects" / "toy" / "checkpoints"
    assert result.path == str(control) and (control / "state.json").is_file()
    assert not [n for n in os.listdir(control / "checkpoints") if n.startswith("checkpoint_")]
    assert sorted(n for n in os.listdir(data) if n.startswith("checkpoint_")) == \
        ["checkpoint_000002", "checkpoint_000003"]
    assert result.checkpoint.path == str(data / "checkpoint_000003")
    assert {"rank0.txt", "rank1.txt", ".hpctrain_checkpoint.json"} <= set(
        os.listdir(result.checkpoint.path))
    assert (data / "checkpoint_000003" / "rank1.txt").read_text() == "3"
    assert result.checkpoint.get_metadata() == {"i": 3}
    # published by the toy kind in the worker (rank 0), never by a rename
    journal = (tmp_path / "journal.txt").read_text().split("\n")
    published = [line.split()[2] for line in journal if " publish " in line]
    assert published == [f"checkpoint_00000{i}" for i in range(4)]
    assert {line.split()[0] for line in journal if line} != {str(os.getpid())}
    assert [line.split()[2] for line in journal if " retire " in line] == \
        ["checkpoint_000000", "checkpoint_000001"]
    # found again by its location, listed under its storage path
    again = hpctrain.Result.from_path(f"{storage}/toy")
    assert again.checkpoint.path == result.checkpoint.path
    assert [e.name for e in list_storage(storage)] == ["toy"]
