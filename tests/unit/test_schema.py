"""One schema (issue 14): the config classes declare their job file keys, the job spec's
sections are derived from them, the JSON Schema is made from the same declarations, and
``hpctrain validate`` refuses what ``hpctrain render`` refuses."""
from __future__ import annotations

import dataclasses
import glob
import inspect
import json
import os
import re

import pytest
from helpers import ROOT

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (the dev extra)")

from hpctrain import config as config_module  # noqa: E402
from hpctrain.config import TomlKey, scheduler_keys, toml, toml_keys  # noqa: E402
from hpctrain.errors import ConfigError  # noqa: E402
from hpctrain.schema import json_schema, key_schema  # noqa: E402
from hpctrain.spec import CLASS_SECTIONS, EXPECTED, KEYS, SECTIONS, load_job_spec  # noqa: E402

from docs_snippets import PAGES, blocks  # noqa: E402

#: Doc blocks that show a job file hpctrain refuses, on purpose.
MEANT_BAD = {("docs/guide/job-spec.md", "bad.toml")}


@pytest.fixture(scope="module")
def validator():
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


# ------------------------------------------------------------------ one declaration each
@pytest.mark.parametrize("section", sorted(CLASS_SECTIONS))
def test_each_config_class_declares_every_field_and_sections_are_derived(section):
    """Every field of a config class says which TOML key it is (or that it is Python
    only), and the section's keys are exactly those: no key without a field."""
    cls = CLASS_SECTIONS[section]
    keys = toml_keys(cls)  # TypeError when a field declares nothing
    if dataclasses.is_dataclass(cls):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for f in fields.values():
            assert "toml" in f.metadata, f"{cls.__name__}.{f.name} declares no TOML key"
    else:
        fields = {n for n in inspect.signature(cls).parameters}
    # [scheduler]: the shared keys, then each scheduler's own (tests/test_scheduler_options.py)
    assert list(SECTIONS[section]) == list(scheduler_keys() if section == "scheduler" else keys)
    for key, k in keys.items():
        assert key in fields, f"[{section}] {key} names no field of {cls.__name__}"
        assert isinstance(k, TomlKey) and k.kind == SECTIONS[section][key]
        assert k.doc, f"[{section}] {key} has no description"


def test_a_field_without_a_declaration_is_an_error():
    @dataclasses.dataclass
    class Forgotten:
        kept: int = dataclasses.field(default=1, metadata=toml("int", "declared"))
        new_field: int = 0

    with pytest.raises(TypeError, match="Forgotten.new_field declares no TOML key"):
        toml_keys(Forgotten)


def test_every_key_has_a_known_kind_and_a_json_schema():
    for section, keys in KEYS.items():
        for key, k in (keys or {}).items():
            assert k.kind in EXPECTED, f"{section}.{key}: unknown kind {k.kind!r}"
            assert key_schema(k)["description"]
    for kind in EXPECTED:
        assert key_schema(TomlKey(kind))


def test_the_config_classes_are_the_only_declaration():
    """The job spec declares no key of a config class's section itself, and takes each
    class's keys as the class declares them."""
    import hpctrain.spec as spec

    assert not set(spec._SPEC_SECTIONS) & set(CLASS_SECTIONS)
    assert set(spec._SPEC_SECTIONS) | set(CLASS_SECTIONS) == set(SECTIONS)
    for section, cls in CLASS_SECTIONS.items():
        assert KEYS[section] == (scheduler_keys() if section == "scheduler" else toml_keys(cls))


# ------------------------------------------------------------------ the JSON Schema
WALLTIMES = ["02:00:00", "1-12:00:00", "90m", "2h", "1d12h", "1h30m", "45s", "1d", "05:30",
             "100:00:00", "1-12", "2-00:30", "1-02:03:04", " 2h ", "2H", "1-23:59:59",
             "00:00:01", "0-00:00:01", "1:60:00", "1-25", "1-24", "60", "1.5", "abc", "",
             "-1:00:00", "1:2:3:4", "1h2d", "0:00:00", "0s", "00:00", "0-00", "h", "1d 2h",
             "2h30", "60:00"]
MEMORIES = ["512M", "512MB", "4G", "4GB", "4GiB", "4gb", "1.5G", "2T", "1024K", "1500K",
            " 4G ", ".5G", "4.G", "0.0001K", "4096", "G", "4 G", "4X", "-4G", "0G", "0.0G",
            "4GiBs", ""]


@pytest.mark.parametrize("pattern, parse, samples", [
    pytest.param("WALLTIME_PATTERN", "parse_walltime", WALLTIMES, id="walltime"),
    pytest.param("MEMORY_PATTERN", "parse_memory", MEMORIES, id="memory"),
])
def test_unit_patterns_accept_what_the_parsers_accept(pattern, parse, samples):
    from hpctrain import units

    regex = re.compile(getattr(units, pattern))
    for text in samples:
        try:
            getattr(units, parse)(text)
            parsed = True
        except units.UnitError:
            parsed = False
        assert bool(regex.search(text)) == parsed, (text, parsed)


def test_schema_has_enums_patterns_and_refuses_unknown_keys():
    from hpctrain.common.registry import scheduler_names

    s = json_schema()
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert s["additionalProperties"] is False
    props = s["properties"]
    sched = props["scheduler"]["properties"]
    assert sched["kind"]["enum"] == list(scheduler_names())
    assert sched["launcher"]["enum"] == list(config_module.LAUNCHERS)
    assert sched["gpu_binding"]["enum"] == list(config_module.GPU_BINDINGS)
    assert sched["time"]["pattern"]
    assert props["job"]["properties"]["backend"]["enum"][0] == "torch"
    assert props["failure"]["properties"]["warning_signal"]["anyOf"][0]["enum"] == list(
        config_module.WARNING_SIGNALS)
    assert props["scaling"]["properties"]["mem_per_worker"]["pattern"]
    for name, keys in KEYS.items():
        assert (props[name].get("additionalProperties") is False) == (keys is not None), name
        assert props[name]["description"]


SAMPLES = [0, 1, -1, -2, 5, 2.5, True, False, "", "x", "auto", "all", "sync", "async", "min",
           "max", "slurm", "srun", "local_rank", "USR1", "sigusr2", "4G", "02:00:00", "90m",
           "torch", "nccl", "a100", "a b", "../x", "~/runs", "file:///x", "m.n:f",
           "t.py:train", [], ["a"], [1], {}, {"CPU": 2}, {"a": "b"}, {"type": "asha"},
           {"a": True}, {"a": False}, {"a": -1}, {"lr": {"grid_search": [1, 2]}}]


def test_the_schema_refuses_nothing_the_job_spec_accepts(tmp_path, validator, monkeypatch):
    """Each key with values of every kind: whatever the job spec accepts, the schema
    accepts too (an editor must not underline a valid job file)."""
    import warnings

    from hpctrain.spec import spec_from_dict

    (tmp_path / "t.py").write_text("def train(config):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    refused = []
    for section, keys in KEYS.items():
        for key in keys or {}:
            for value in SAMPLES:
                doc = {section: {key: value}}
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        spec_from_dict(doc, file="job.toml", base_dir=str(tmp_path))
                except ConfigError:
                    continue
                if not validator.is_valid(doc):
                    refused.append(f"{section}.{key} = {value!r}")
    assert not refused


def _job_files():
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.toml"))):
        yield pytest.param(os.path.relpath(path, ROOT), open(path).read(),
                           id=os.path.relpath(path, ROOT))
    for page in PAGES:
        for b in blocks(page):
            if b["lang"] != "toml" or b["mark"] == "skip":
                continue
            data = tomllib.loads(b["code"])
            if not all(name in SECTIONS or name == "site" for name in data):
                continue  # a site config or a user config, not a job file
            if (page, b["arg"]) in MEANT_BAD:
                continue
            yield pytest.param(f"{page}:{b['line']}", b["code"], id=f"{page}:{b['line']}")


@pytest.mark.parametrize("where, text", list(_job_files()))
def test_example_and_documented_job_files_match_the_schema(validator, where, text):
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator.iter_errors(tomllib.loads(text))]
    assert not errors, f"{where}: {errors}"


def test_the_documented_bad_job_file_is_refused_by_the_schema(validator):
    found = 0
    for page, name in MEANT_BAD:
        for b in blocks(page):
            if b["arg"] == name:
                found += 1
                assert not validator.is_valid(tomllib.loads(b["code"]))
    assert found == len(MEANT_BAD)


GOOD = """
[job]
entrypoint = "t.py:train"
[scaling]
num_workers = 4
workers_per_node = 2
mem_per_worker = "4gib"
resources_per_worker = {CPU = 2}
[checkpoint]
checkpoint_frequency = "auto"
checkpoint_score_order = "min"
[failure]
warning_signal = "sigusr2"
warning_time = "90s"
mtbi = "1d12h"
[scheduler]
kind = "slurm"
time = "1-12"
launcher = "srun"
directives = {"mail-type" = "END", exclusive = true, nice = 10}
[env]
OMP_NUM_THREADS = "4"
[config]
lr = 0.1
[sweep]
metric = "loss"
mode = "min"
param_space = {lr = {grid_search = [0.1, 0.01]}}
stop = {training_iteration = 10}
"""


def _write(tmp_path, body):
    (tmp_path / "t.py").write_text("def train(config):\n    pass\n")
    job = tmp_path / "job.toml"
    job.write_text(body)
    return str(job)


def test_a_job_file_using_every_spelling_passes_both(tmp_path, validator):
    assert list(validator.iter_errors(tomllib.loads(GOOD))) == []
    load_job_spec(_write(tmp_path, GOOD))


BASE = '[job]\nentrypoint = "t.py:train"\n'


@pytest.mark.parametrize("body, key, words", [
    pytest.param(BASE + "[scaling]\nnum_worker = 2\n", "scaling.num_worker",
                 "did you mean 'num_workers'", id="unknown-key"),
    pytest.param(BASE + "[scheduling]\nkind = \"slurm\"\n", "scheduling", "unknown section",
                 id="unknown-section"),
    pytest.param(BASE + '[scaling]\nnum_workers = "two"\n', "scaling.num_workers",
                 "expected an integer", id="wrong-type"),
    pytest.param(BASE + "[scaling]\nnum_workers = 0\n", "scaling.num_workers",
                 "expected an integer ≥ 1", id="minimum"),
    pytest.param(BASE + '[scheduler]\nkind = "slrum"\n', "scheduler.kind",
                 "did you mean 'slurm'", id="scheduler-kind"),
    pytest.param(BASE + '[scheduler]\nkind = "slurm"\nlauncher = "torchrun"\n',
                 "scheduler.launcher", "expected one of", id="launcher"),
    pytest.param(BASE + '[scheduler]\ntime = "2 hours"\n', "scheduler.time",
                 "not understood", id="walltime"),
    pytest.param(BASE + '[scaling]\nmem_per_worker = "4096"\n', "scaling.mem_per_worker",
                 "has no unit", id="memory"),
    pytest.param(BASE + '[failure]\nwarning_signal = "KILL"\n', "failure.warning_signal",
                 "expected one of USR1", id="signal"),
    pytest.param(BASE + '[env]\n"1BAD" = "x"\n', "env.1BAD", "not a valid environment",
                 id="env-name"),
    pytest.param(BASE + '[torch]\nbackend = "mpi"\n', "torch.backend", "expected one of",
                 id="backend-option"),
])
def test_bad_job_files_are_refused_by_the_schema_and_the_spec(tmp_path, validator, body,
                                                              key, words):
    assert not validator.is_valid(tomllib.loads(body))
    with pytest.raises(ConfigError) as e:
        load_job_spec(_write(tmp_path, body))
    text = str(e.value)
    assert "job.toml" in text and key in text and words in text


def test_hpctrain_schema_prints_and_writes_it(tmp_path, capsys):
    from hpctrain.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["schema"])
    assert e.value.code == 0
    assert json.loads(capsys.readouterr().out) == json_schema()
    out = tmp_path / "hpctrain.schema.json"
    with pytest.raises(SystemExit) as e:
        main(["schema", "-o", str(out)])
    assert e.value.code == 0 and json.loads(out.read_text()) == json_schema()


# ------------------------------------------------------------------ validate = render
def _cli(capsys, *args):
    from hpctrain.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(list(args))
    return e.value.code, capsys.readouterr().err


RENDER_REFUSES = [
    pytest.param('[scheduler]\nkind = "pbs"\n[scaling]\nuse_gpu = true\n'
                 'accelerator_type = "a100"\n',
                 "scaling.accelerator_type: 'a100' cannot be requested from PBS",
                 id="pbs-accelerator-type"),
    pytest.param('[scheduler]\nkind = "slurm"\n[scheduler.directives]\nmail-user = "a b"\n',
                 "scheduler.directives.mail-user: 'a b' holds ' '", id="directive-value"),
    pytest.param('[scheduler]\nkind = "slurm"\ntime = "00:02:00"\n[failure]\n'
                 'warning_time = "100s"\n', "failure.warning_time: 100 s of warning leaves "
                 "too little", id="warning-vs-walltime"),
    pytest.param('[scheduler]\nkind = "slurm"\n[setup]\nmodules = [" "]\n',
                 "setup.modules: expected a non-empty single line", id="setup-module"),
]


@pytest.mark.parametrize("body, message", RENDER_REFUSES)
def test_validate_refuses_what_render_refuses_with_the_same_message(tmp_path, capsys, body,
                                                                    message):
    job = _write(tmp_path, BASE + body)
    storage = f"run.storage_path={tmp_path / 'runs'}"
    code, render_err = _cli(capsys, "render", job, "--set", storage)
    assert code == 2 and message in render_err, render_err
    code, validate_err = _cli(capsys, "validate", job, "--set", storage)
    assert code == 2, validate_err
    assert validate_err == render_err
    assert not os.path.exists(tmp_path / "runs")


def test_validate_refuses_what_a_sweep_would_refuse(tmp_path, capsys):
    job = _write(tmp_path, BASE + '[scheduler]\nkind = "slurm"\n[scheduler.directives]\n'
                                  'array = "0-3"\n[sweep]\nparam_space = {lr = {grid_search '
                                  "= [1, 2]}}\n")
    storage = f"run.storage_path={tmp_path / 'runs'}"
    code, err = _cli(capsys, "sweep", job, "--dry-run", "--set", storage)
    assert code == 2 and "scheduler.directives.array: a sweep makes its own job arrays" in err
    code, validate_err = _cli(capsys, "validate", job, "--set", storage)
    assert code == 2 and validate_err == err
    assert not os.path.exists(tmp_path / "runs")


def test_validate_still_passes_what_render_renders(tmp_path, capsys):
    job = _write(tmp_path, BASE + '[scheduler]\nkind = "slurm"\ntime = "01:00:00"\n'
                                  '[sweep]\nparam_space = {lr = {grid_search = [1, 2]}}\n')
    storage = f"run.storage_path={tmp_path / 'runs'}"
    code, err = _cli(capsys, "validate", job, "--set", storage)
    assert code == 0, err
    assert not os.path.exists(tmp_path / "runs")
