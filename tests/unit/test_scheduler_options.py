"""Each scheduler declares its own ``[scheduler]`` options (issue 26, item 4).

Slurm's ``partition``/``qos``/``constraint``/``reservation`` are fields of ``SlurmConfig``,
PBS's and LSF's ``queue`` of ``PbsConfig``/``LsfConfig``; the batch script is rendered from
the scheduler's own keys, a key of another scheduler is refused naming the file, the key
and the scheduler that has it, and the JSON Schema says which keys each scheduler takes.
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import textwrap

import pytest

import hpctrain
from hpctrain.config import SchedulerConfig, scheduler_keys, toml
from hpctrain.errors import ConfigError
from hpctrain.schedulers import BatchRequest, register_scheduler
from hpctrain.schedulers.base import Scheduler
from hpctrain.common.registry import SCHEDULERS
from hpctrain.schema import json_schema
from hpctrain.sites import SITE_PATH_ENV
from hpctrain.spec import SECTIONS, load_job_spec

from helpers import ROOT  # noqa: E402 - the repository root
ENTRY = os.path.join(ROOT, "examples", "quickstart_train.py")
RUN = "/scratch/me/runs/r1"


@pytest.fixture(autouse=True)
def _no_outside_layers(monkeypatch, tmp_path):
    """Only the package's site configs, no user config, no $HPCTRAIN_SITE."""
    monkeypatch.delenv(SITE_PATH_ENV, raising=False)
    monkeypatch.delenv("HPCTRAIN_SITE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


def job_file(tmp_path, body: str) -> str:
    path = tmp_path / "job.toml"
    path.write_text(f'[job]\nentrypoint = "{ENTRY}:train_func"\n' + textwrap.dedent(body))
    return str(path)


def lines(script: str, prefix: str) -> list:
    return [l[len(prefix):] for l in script.splitlines() if l.startswith(prefix)]


def render(tmp_path, body: str, overrides=(), site=None) -> str:
    spec = load_job_spec(job_file(tmp_path, body), list(overrides), site=site)
    return BatchRequest(spec, RUN).materialize()


# --------------------------------------------------------------------------- rendering
def test_slurm_renders_its_own_options_as_sbatch_lines(tmp_path):
    script = render(tmp_path, """
        [scheduler]
        kind = "slurm"
        partition = "gpu"
        qos = "high"
        constraint = "a100"
        reservation = "maint"
        """)
    sbatch = lines(script, "#SBATCH ")
    for expected in ("--partition=gpu", "--qos=high", "--constraint=a100",
                     "--reservation=maint"):
        assert expected in sbatch
    assert not any(l.startswith("--queue") for l in sbatch)


def test_pbs_and_lsf_render_their_queue(tmp_path):
    pbs = render(tmp_path, '[scheduler]\nkind = "pbs"\nqueue = "prod"\naccount = "P1"\n')
    assert {"-q prod", "-A P1"} <= set(lines(pbs, "#PBS "))
    lsf = render(tmp_path, '[scheduler]\nkind = "lsf"\nqueue = "batch"\naccount = "P1"\n')
    assert {"-q batch", "-P P1"} <= set(lines(lsf, "#BSUB "))


def test_python_configs_are_the_schedulers_classes():
    slurm = hpctrain.SchedulerConfig(kind="slurm", partition="gpu")
    assert type(slurm) is hpctrain.SlurmConfig and slurm.partition == "gpu"
    assert hpctrain.SlurmConfig(time="1h").kind == "slurm"
    assert hpctrain.PbsConfig(queue="prod").queue_name == "prod"
    assert hpctrain.LsfConfig(queue="q").kind == "lsf"
    assert pickle.loads(pickle.dumps(slurm)) == slurm
    assert dataclasses.replace(slurm, qos="x").qos == "x"
    assert not hasattr(hpctrain.SchedulerConfig(), "partition")  # local: none of them


# --------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("kind, key, owner, hint", [
    ("slurm", "queue", "PBS and LSF", "Slurm calls it partition"),
    ("pbs", "partition", "Slurm", "PBS calls it queue"),
    ("lsf", "qos", "Slurm", "LSF's own keys: queue"),
    ("local", "partition", "Slurm", 'set scheduler.kind = "slurm"'),
])
def test_a_key_of_another_scheduler_names_the_file_key_and_scheduler(tmp_path, kind, key,
                                                                       owner, hint):
    path = job_file(tmp_path, f'[scheduler]\nkind = "{kind}"\n{key} = "x"\n')
    with pytest.raises(ConfigError) as e:
        load_job_spec(path)
    err = e.value
    assert err.file == path
    assert err.message.startswith(f"scheduler.{key}: a key of {owner}, not of ")
    assert hint in err.hint


def test_an_override_for_another_scheduler_is_blamed_on_the_override(tmp_path):
    path = job_file(tmp_path, '[scheduler]\nkind = "slurm"\n')
    with pytest.raises(ConfigError) as e:
        load_job_spec(path, ["scheduler.queue=debug"])
    assert e.value.file == "override 'scheduler.queue=debug'"
    assert "Slurm calls it partition" in e.value.hint


def test_python_config_refuses_another_schedulers_key():
    with pytest.raises(ConfigError, match="scheduler.queue: a key of PBS and LSF, not of Slurm"):
        hpctrain.SlurmConfig(queue="debug")
    with pytest.raises(ConfigError, match="PbsConfig is the config of PBS"):
        hpctrain.PbsConfig(kind="slurm")


def test_a_job_files_kind_drops_a_lower_layers_options_for_another_scheduler(tmp_path):
    """A Slurm site sets partition; a job file that picks PBS does not inherit it."""
    spec = load_job_spec(job_file(tmp_path, '[scheduler]\nkind = "pbs"\nqueue = "workq"\n'),
                         site="test-cluster", check_limits=False)
    assert spec.scheduler.kind == "pbs" and spec.scheduler.queue == "workq"
    assert "-q workq" in lines(BatchRequest(spec, RUN).materialize(), "#PBS ")


def test_shipped_site_configs_keep_their_keys(tmp_path):
    spec = load_job_spec(job_file(tmp_path, ""), site="frontier")
    assert spec.scheduler.partition == "batch"
    spec = load_job_spec(job_file(tmp_path, ""), site="polaris")
    assert spec.scheduler.queue == "debug"


# --------------------------------------------------------------------------- the schema
def test_json_schema_says_which_keys_each_scheduler_takes():
    sched = json_schema()["properties"]["scheduler"]
    assert {"partition", "qos", "constraint", "reservation", "queue"} <= set(sched["properties"])
    rules = {r["if"]["properties"]["kind"]["const"]: set(r["then"]["propertyNames"]["enum"])
             for r in sched["allOf"]}
    assert {"partition", "reservation"} <= rules["slurm"] and "queue" not in rules["slurm"]
    assert "queue" in rules["pbs"] and "partition" not in rules["pbs"]
    assert "queue" in rules["lsf"] and "qos" not in rules["lsf"]
    assert not {"partition", "queue"} & rules["local"]
    assert "Slurm only" in sched["properties"]["partition"]["description"]


def test_json_schema_flags_a_key_of_another_scheduler():
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json_schema())
    assert list(validator.iter_errors({"scheduler": {"kind": "slurm", "partition": "x"}})) == []
    assert list(validator.iter_errors({"scheduler": {"kind": "slurm", "queue": "x"}}))
    assert list(validator.iter_errors({"scheduler": {"queue": "x"}})) == []  # kind from a site


# --------------------------------------------------------------------------- a new one
@dataclasses.dataclass
class ToyConfig(SchedulerConfig):
    KIND = "toy"
    kind: str = dataclasses.field(default="toy", metadata=toml("str", "The batch system."))
    pool: str = dataclasses.field(default="", metadata=toml("str", "The toy's pool.",
                                                            aka=("partition", "queue")))


class ToyScheduler(Scheduler):
    name = "toy"
    title = "Toy"
    template = "slurm.sh.j2"
    config_class = ToyConfig


def test_a_registered_scheduler_brings_its_options_into_the_job_file(tmp_path):
    with SCHEDULERS.scoped():
        register_scheduler("toy", f"{__name__}:ToyScheduler")
        assert "pool" in SECTIONS["scheduler"] and "pool" in scheduler_keys()
        spec = load_job_spec(job_file(tmp_path, '[scheduler]\nkind = "toy"\npool = "p"\n'))
        assert isinstance(spec.scheduler, ToyConfig) and spec.scheduler.pool == "p"
        with pytest.raises(ConfigError) as e:
            load_job_spec(job_file(tmp_path, '[scheduler]\nkind = "toy"\nqueue = "p"\n'))
        assert "Toy calls it pool" in e.value.hint
    assert "pool" not in SECTIONS["scheduler"]
