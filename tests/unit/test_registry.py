"""The registries: every scheduler fact lives in its class under hpctrain/schedulers/;
every backend and launcher is one registration (hpctrain/backends, hpctrain/launchers)."""
from __future__ import annotations

import ast
import dataclasses
import pathlib
import subprocess
import sys

import pytest

import hpctrain
from hpctrain.common.shipped import shipped_dir
from hpctrain.errors import ConfigError
from hpctrain.schedulers import (detect_scheduler, get_scheduler, register_scheduler,
                                 scheduler_class, scheduler_names)
from hpctrain.schedulers.base import Scheduler
from hpctrain.backends import Backend, get_backend
from hpctrain.config import LAUNCHERS, toml, toml_keys
from hpctrain.launchers import Launcher
from hpctrain.schema import json_schema
from hpctrain.spec import BACKENDS, KEYS, SECTIONS, spec_from_dict

PACKAGE = pathlib.Path(hpctrain.__file__).parent


def _scheduler_literals():
    """(file, line, value) of each string literal outside hpctrain/schedulers/ that is a
    batch scheduler's name ("slurm", "pbs", …); docstrings and messages may mention them."""
    names = set(scheduler_names(batch_only=True))
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "schedulers":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.lower() in names:
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
    return found


def test_no_scheduler_name_outside_the_scheduler_package():
    # a new scheduler touches hpctrain/schedulers/ (and a template), nothing else
    assert _scheduler_literals() == []


def test_every_registered_scheduler_loads_and_names_itself():
    for name in scheduler_names():
        cls = scheduler_class(name)
        assert issubclass(cls, Scheduler) and cls.name == name
        if cls.template:
            assert (pathlib.Path(shipped_dir("templates")) / cls.template).is_file(), name
            assert cls.submit_command and cls.cancel_command and cls.job_id_var


def test_unknown_scheduler_names_the_known_ones():
    with pytest.raises(ValueError, match="expected one of local, slurm, pbs"):
        get_scheduler("condor")
    with pytest.raises(ConfigError, match='scheduler.kind: expected "local", "slurm"'):
        hpctrain.SchedulerConfig(kind="condor")


def test_detection_asks_each_scheduler_in_registration_order():
    assert detect_scheduler({}) == "local"
    assert detect_scheduler({"SLURM_JOB_ID": "1", "PBS_JOBID": "2.x"}) == "slurm"
    assert detect_scheduler({"PBS_JOBID": "2.x"}) == "pbs"


def test_a_registered_scheduler_is_known_everywhere():
    from hpctrain.common.registry import SCHEDULERS
    from hpctrain.cluster_env import worker_info_from_env
    from hpctrain.spec import spec_from_dict

    with SCHEDULERS.scoped():
        register_scheduler("toy", f"{__name__}:ToyScheduler")
        assert "toy" in scheduler_names()
        assert hpctrain.SchedulerConfig(kind="toy").launcher_name == "mpiexec"
        info = worker_info_from_env({"TOY_JOB": "42"}, hostname="h")
        assert (info.scheduler, info.job_id) == ("toy", "42")
        assert spec_from_dict({"job": {"entrypoint": "m:f"},
                               "scheduler": {"kind": "toy"}}).scheduler.kind == "toy"
    assert "toy" not in scheduler_names()
    with pytest.raises(ValueError, match="unknown scheduler 'toy'"):
        scheduler_class("toy")


class ToyScheduler(Scheduler):
    name = "toy"
    template = "slurm.sh.j2"
    job_id_var = "TOY_JOB"
    default_launcher = "mpiexec"

    @classmethod
    def detect(cls, env):
        return "TOY_JOB" in env


def test_import_hpctrain_imports_no_framework():
    code = ("import sys, hpctrain, hpctrain.cluster_env, hpctrain.schedulers; "
            "import hpctrain.schedulers.slurm, hpctrain.schedulers.pbs, hpctrain.spec; "
            "dict(hpctrain.spec.KEYS); import hpctrain.launchers; "
            "print(sorted(m for m in ('torch', 'tensorflow', 'submitit') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_own_names_resolve_without_reading_the_installed_plugins():
    """A rank's get_backend("torch") and the batch step's own scheduler and launcher find
    hpctrain's own entries without scanning every installed distribution's entry points
    (15-40 ms in each process of a restart); an unknown name still reads them."""
    code = ("import importlib.metadata as md, hpctrain\n"
            "scans = []\n"
            "real = md.entry_points\n"
            "md.entry_points = lambda *a, **k: scans.append(1) or real(*a, **k)\n"
            "from hpctrain.backends import get_backend\n"
            "from hpctrain.schedulers import scheduler_class\n"
            "from hpctrain.common.registry import LAUNCHERS\n"
            "get_backend('torch'); get_backend('torch'); scheduler_class('slurm')\n"
            "LAUNCHERS.load('srun')\n"
            "print(len(scans))\n"
            "try:\n"
            "    get_backend('no-such-backend')\n"
            "except Exception as e:\n"
            "    print(len(scans), type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    own, unknown = out.stdout.splitlines()
    assert own == "0"
    assert unknown.startswith("1 ConfigError job.backend: expected one of [")
    assert "'torch'" in unknown and "got 'no-such-backend'" in unknown


# ------------------------------------------------------------------ backends and launchers
@pytest.fixture
def registries():
    """The backend and launcher registries, restored afterwards."""
    from hpctrain.common import registry

    with registry.BACKENDS.scoped(), registry.LAUNCHERS.scoped():
        yield registry


@dataclasses.dataclass
class ToyConfig:
    rounds: int = dataclasses.field(default=3, metadata=toml("int", "Rounds.", minimum=1))
    flavour: str = dataclasses.field(default="plain", metadata=toml(
        "str", "The flavour.", choices=("plain", "fancy")))


class ToyBackend(Backend):
    pass


class ToyTrainer:
    _backend_name = "toy"
    _backend_config_cls = ToyConfig


class ToyLauncher(Launcher):
    name = "toyrun"


def test_every_registered_backend_loads():
    from hpctrain.common.registry import backend_entries, load

    assert [e.name for e in backend_entries()] == list(BACKENDS)
    for e in backend_entries():
        assert issubclass(load(e.backend), Backend), e.name
        assert dataclasses.is_dataclass(load(e.config)), e.name
        assert KEYS[e.name] == toml_keys(load(e.config))


def test_a_registered_backend_is_known_to_the_job_spec(registries):
    registries.register_backend("toy", backend=f"{__name__}:ToyBackend",
                                config=f"{__name__}:ToyConfig",
                                trainer=f"{__name__}:ToyTrainer", config_keyword="toy_config")
    assert "toy" in BACKENDS and "toy" in KEYS["job"]["backend"].choices
    assert SECTIONS["toy"] == {"rounds": "int", "flavour": "str"}
    spec = spec_from_dict({"job": {"entrypoint": "m:f", "backend": "toy"},
                           "toy": {"rounds": 5}})
    assert (spec.backend, spec.backend_options) == ("toy", {"rounds": 5})
    with pytest.raises(ConfigError, match="toy.round: unknown key"):
        spec_from_dict({"job": {"backend": "toy"}, "toy": {"round": 5}})
    with pytest.raises(ConfigError, match="toy.rounds: expected an integer ≥ 1"):
        spec_from_dict({"job": {"backend": "toy"}, "toy": {"rounds": 0}})
    with pytest.raises(ConfigError, match='toy.flavour: expected one of "plain", "fancy"'):
        spec_from_dict({"job": {"backend": "toy"}, "toy": {"flavour": "odd"}})
    assert "toy" in json_schema()["properties"]
    assert isinstance(get_backend("toy", ToyConfig()), ToyBackend)
    assert registries.load(registries.backend_entry("toy").trainer) is ToyTrainer

    registries.unregister_backend("toy")
    assert "toy" not in BACKENDS and "toy" not in SECTIONS and "toy" not in KEYS
    with pytest.raises(ConfigError, match="job.backend: expected one of"):
        spec_from_dict({"job": {"backend": "toy"}})
    with pytest.raises(ConfigError, match="unknown section"):
        spec_from_dict({"toy": {"rounds": 5}})


def test_a_registered_launcher_is_a_scheduler_launcher_choice(registries):
    from hpctrain.launchers import launcher_for

    registries.register_launcher("toyrun", f"{__name__}:ToyLauncher")
    assert "toyrun" in LAUNCHERS and "toyrun" in KEYS["scheduler"]["launcher"].choices
    schema = json_schema()["properties"]["scheduler"]["properties"]["launcher"]
    assert "toyrun" in schema["enum"]
    spec = spec_from_dict({"job": {"entrypoint": "m:f"}, "scheduler": {"launcher": "toyrun"}})
    assert isinstance(launcher_for(spec), ToyLauncher)

    registries.unregister_launcher("toyrun")
    assert "toyrun" not in LAUNCHERS
    with pytest.raises(ConfigError, match="scheduler.launcher: expected one of"):
        hpctrain.SchedulerConfig(launcher="toyrun")
    assert list(LAUNCHERS) == ["srun", "mpiexec", "mpirun", "pbsdsh", "local"]
