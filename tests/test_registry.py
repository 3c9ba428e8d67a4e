"""The registries: every scheduler fact lives in its class under hpctrain/schedulers/."""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

import hpctrain
from hpctrain.errors import ConfigError
from hpctrain.schedulers import (detect_scheduler, get_scheduler, register_scheduler,
                                 scheduler_class, scheduler_names)
from hpctrain.schedulers.base import Scheduler

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
            assert (PACKAGE / "templates" / cls.template).is_file(), name
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


def test_a_registered_scheduler_is_known_everywhere(monkeypatch):
    from hpctrain._internal import registry as schedulers
    from hpctrain.cluster_env import worker_info_from_env

    monkeypatch.setattr(schedulers, "_REGISTRY", dict(schedulers._REGISTRY))
    monkeypatch.setattr(schedulers, "_CLASSES", dict(schedulers._CLASSES))
    register_scheduler("toy", f"{__name__}:ToyScheduler")
    assert "toy" in scheduler_names()
    assert hpctrain.SchedulerConfig(kind="toy").launcher_name == "mpiexec"
    info = worker_info_from_env({"TOY_JOB": "42"}, hostname="h")
    assert (info.scheduler, info.job_id) == ("toy", "42")
    from hpctrain.spec import spec_from_dict

    assert spec_from_dict({"job": {"entrypoint": "m:f"},
                           "scheduler": {"kind": "toy"}}).scheduler.kind == "toy"


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
            "import hpctrain.schedulers.slurm, hpctrain.schedulers.pbs; "
            "print(sorted(m for m in ('torch', 'tensorflow', 'submitit') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
