"""The internals left ``hpctrain/_internal/`` for folders that follow the layers (issue 41).
What an earlier version wrote still names the old addresses: a run directory's pickled
payload (unpickled again at each requeue), a job script's or a hand-written rank line's
``python -m hpctrain._internal.…``, and a site plugin that imports the old registry module.
Each must keep working, and reach the one module at its new address, not a second copy."""
import importlib
import os
import subprocess
import sys

import cloudpickle

from hpctrain.config import CheckpointConfig, ScalingConfig
from hpctrain.rundir.layout import RunDir
from hpctrain.rundir.payload import WorkerPayload


def test_a_payload_pickled_by_the_version_before_the_move_still_loads(tmp_path):
    run = RunDir(tmp_path / "run")
    run.create()
    payload = WorkerPayload(train_func=len, train_loop_config={"lr": 0.1}, backend="torch",
                            backend_config=None, scaling=ScalingConfig(num_workers=2),
                            checkpoint_config=CheckpointConfig(num_to_keep=2), run_name="r")
    header = {"format": "hpctrain-payload-header-1", "backend": "torch",
              "backend_config": None}
    # protocol 2 writes a class as the text "c<module>\n<name>\n", so the module's name can
    # be put back to where the class lived then
    old = (cloudpickle.dumps(header, protocol=2) + cloudpickle.dumps(payload, protocol=2)
           ).replace(b"chpctrain.rundir.payload\n", b"chpctrain._internal.rundir.payload\n")
    assert b"hpctrain._internal.rundir.payload" in old and b"chpctrain.rundir" not in old
    with open(run.payload_file, "wb") as f:
        f.write(old)
    os.chmod(run.payload_file, 0o600)
    loaded = WorkerPayload.load(run)
    assert type(loaded) is WorkerPayload and loaded == payload


def test_an_old_module_name_is_the_same_module_at_its_new_address():
    import hpctrain.plugins
    old = importlib.import_module("hpctrain._internal.base.registry")
    assert old is importlib.import_module("hpctrain.common.registry")
    assert importlib.import_module("hpctrain._internal.worker.session") is \
        importlib.import_module("hpctrain.worker.session")
    assert importlib.import_module("hpctrain._internal.nodezygote") is \
        importlib.import_module("hpctrain.worker.nodezygote")
    assert old.__spec__.name == "hpctrain.common.registry"  # its own spec, not the alias's
    # a plugin written against the old guide registers into the one registry
    old.register_launcher("oldguide", "hpctrain.launchers.local:LocalLauncher")
    try:
        assert "oldguide" in hpctrain.plugins.launcher_names()
    finally:
        hpctrain.plugins.unregister_launcher("oldguide")
    assert old.BackendEntry is hpctrain.plugins.BackendEntry


def rank(module, *args):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                          text=True, timeout=120)


def test_a_rank_line_written_before_the_move_runs_the_worker(tmp_path):
    """``python -m hpctrain._internal.worker RUN_DIR`` runs the worker itself: the same
    exit status and message as the stable address ``python -m hpctrain.worker``."""
    new = rank("hpctrain.worker", str(tmp_path / "new"))
    old = rank("hpctrain._internal.worker", str(tmp_path / "old"))
    assert new.returncode != 0 and "payload" in new.stderr, new.stderr
    assert (old.returncode, old.stderr.replace("/old", "/new")) == (new.returncode, new.stderr)
    assert "RuntimeWarning" not in old.stderr


def test_a_name_that_never_existed_there_is_still_an_import_error():
    for name in ("hpctrain._internal.nope", "hpctrain._internal.worker.nope"):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            assert "nope" in str(e)
        else:
            raise AssertionError(f"{name} imported")
