"""Tests for hpctrain.spec: the TOML job spec, overrides, entry points, round trip."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import os

import pytest
import tomli_w

import hpctrain.spec as spec_module
from hpctrain.config.keys import toml_keys
from hpctrain.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from hpctrain.errors import ConfigError
from hpctrain.function_trainer import FunctionConfig, FunctionTrainer
from hpctrain.spec import (
    BACKENDS,
    EntryPoint,
    JobSpec,
    apply_overrides,
    load_job_spec,
    spec_from_dict,
)

TRAIN_MODULE = """\
import helper_mod

def train_func(config):
    return helper_mod.double(config["x"])

not_a_function = 42
"""

HELPER_MODULE = "def double(x):\n    return 2 * x\n"

FULL = """\
[job]
entrypoint = "train_mod.py:train_func"
backend = "torch"

[scaling]
num_workers = 4
use_gpu = false
num_nodes = 2
workers_per_node = 2
resources_per_worker = { CPU = 2, memory_gb = 1.5 }

[run]
name = "quickstart"
storage_path = "runs"
verbose = 2

[checkpoint]
num_to_keep = 2
checkpoint_score_attribute = "loss"
checkpoint_score_order = "min"
sync_to_disk = false
local_dir = "$TMPDIR/ckpt"

[failure]
max_failures = 3

[config]
lr = 0.01
layers = [64, 32]
opt = { name = "adam", betas = [0.9, 0.999] }

[torch]
backend = "gloo"
timeout_s = 1800
"""

MINIMAL = '[job]\nentrypoint = "train_mod.py:train_func"\n'


@pytest.fixture(autouse=True)
def _isolate_imports(monkeypatch):
    """Entry-point loading edits sys.path and sys.modules; undo that after each test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def write(tmp_path: Path, text: str, name: str = "job.toml") -> str:
    """Write the job file and the entry-point modules beside it; return the job path."""
    (tmp_path / "train_mod.py").write_text(TRAIN_MODULE)
    (tmp_path / "helper_mod.py").write_text(HELPER_MODULE)
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


# --------------------------------------------------------------------------- valid files
def test_full_file_parses_to_exact_values(tmp_path: Path) -> None:
    spec = load_job_spec(write(tmp_path, FULL))
    assert spec.entrypoint == EntryPoint(None, str(tmp_path / "train_mod.py"), "train_func")
    assert spec.backend == "torch"
    assert spec.scaling == ScalingConfig(num_workers=4, use_gpu=False, num_nodes=2,
                                         workers_per_node=2,
                                         resources_per_worker={"CPU": 2, "memory_gb": 1.5})
    assert spec.run == RunConfig(
        name="quickstart", storage_path=str(tmp_path / "runs"), verbose=2,
        checkpoint_config=CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="loss",
                                           checkpoint_score_order="min", sync_to_disk=False,
                                           local_dir="$TMPDIR/ckpt"),
        failure_config=FailureConfig(max_failures=3))
    assert spec.config == {"lr": 0.01, "layers": [64, 32],
                           "opt": {"name": "adam", "betas": [0.9, 0.999]}}
    assert spec.backend_options == {"backend": "gloo", "timeout_s": 1800}
    assert spec.source == str(tmp_path / "job.toml")


def test_minimal_file_gets_defaults(tmp_path: Path) -> None:
    spec = load_job_spec(write(tmp_path, MINIMAL))
    assert spec == JobSpec(entrypoint=spec.entrypoint)
    assert spec.scaling == ScalingConfig()
    assert spec.run == RunConfig()
    assert spec.config == {} and spec.backend_options == {}


def test_storage_path_expands_home_and_vars(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SCRATCH_T", "/scratch/me")
    path = write(tmp_path, MINIMAL + '[run]\nstorage_path = "~/r"\n')
    assert load_job_spec(path).run.storage_path == str(tmp_path / "home" / "r")
    path = write(tmp_path, MINIMAL + '[run]\nstorage_path = "$SCRATCH_T/runs"\n')
    assert load_job_spec(path).run.storage_path == "/scratch/me/runs"
    # a file:// URI is its path (Ray accepts file:///abs too)
    path = write(tmp_path, MINIMAL + '[run]\nstorage_path = "file:///scratch/me/runs"\n')
    assert load_job_spec(path).run.storage_path == "/scratch/me/runs"


def test_missing_entrypoint_allowed_when_not_required(tmp_path: Path) -> None:
    spec = load_job_spec(write(tmp_path, "[scaling]\nnum_workers = 2\n"),
                         require_entrypoint=False)
    assert spec.entrypoint is None and spec.scaling.num_workers == 2


def test_other_backend_sections_validated_but_only_selected_kept(tmp_path: Path) -> None:
    text = MINIMAL + 'backend = "mpi"\n[torch]\nbackend = "nccl"\n[mpi]\ntimeout_s = 60\n'
    spec = load_job_spec(write(tmp_path, text))
    assert spec.backend == "mpi" and spec.backend_options == {"timeout_s": 60}


# --------------------------------------------------------------------------- bad files
BAD = [
    ("toml-syntax", "[job]\nentrypoint = \n",
     ["job.toml", "invalid TOML at line 2, column 14"]),
    ("unknown-section", MINIMAL + "[scalling]\nnum_workers = 2\n",
     ["job.toml", "scalling: unknown section", "HINT: did you mean 'scaling'?"]),
    ("top-level-key", 'entrypoint = "train_mod.py:train_func"\n',
     ["job.toml", "entrypoint: unknown section", "'entrypoint' belongs in [job]"]),
    ("unknown-key", MINIMAL + "[scaling]\nnum_worker = 2\n",
     ["job.toml", "scaling.num_worker: unknown key in [scaling]",
      "HINT: did you mean 'num_workers'?"]),
    ("key-in-wrong-section", MINIMAL + "[run]\nmax_failures = 2\n",
     ["job.toml", "run.max_failures: unknown key", "'max_failures' belongs in [failure]"]),
    ("section-not-table", "scaling = 3\n" + MINIMAL,
     ["job.toml", "scaling: expected a table ([scaling] section), got 3 (integer)"]),
    ("int-as-string", MINIMAL + '[scaling]\nnum_workers = "two"\n',
     ["job.toml", 'scaling.num_workers: expected an integer, got "two" (string)']),
    ("int-as-float", MINIMAL + "[scaling]\nnum_workers = 2.0\n",
     ["job.toml", "scaling.num_workers: expected an integer, got 2.0 (float)"]),
    ("int-as-bool", MINIMAL + "[run]\nverbose = true\n",
     ["job.toml", "run.verbose: expected an integer, got true (boolean)"]),
    ("bool-as-string", MINIMAL + '[scaling]\nuse_gpu = "yes"\n',
     ["job.toml", 'scaling.use_gpu: expected true or false, got "yes" (string)']),
    ("string-as-int", MINIMAL + "[run]\nname = 7\n",
     ["job.toml", "run.name: expected a string, got 7 (integer)", 'quote it: name = "7"']),
    ("resources-not-numbers", MINIMAL + '[scaling]\nresources_per_worker = { GPU = "1" }\n',
     ["job.toml", 'scaling.resources_per_worker.GPU: expected a number ≥ 0, got "1"']),
    ("resources-not-table", MINIMAL + "[scaling]\nresources_per_worker = 4\n",
     ["job.toml", "scaling.resources_per_worker: expected a table of numbers, got 4"]),
    ("num-workers-zero", MINIMAL + "[scaling]\nnum_workers = 0\n",
     ["job.toml", "scaling.num_workers: expected an integer ≥ 1, got 0"]),
    ("nodes-disagree", MINIMAL + "[scaling]\nnum_workers = 3\nnum_nodes = 2\n"
                                 "workers_per_node = 2\n",
     ["job.toml", "scaling: num_workers=3 but num_nodes × workers_per_node = 4"]),
    ("bad-run-name", MINIMAL + '[run]\nname = "../escape"\n',
     ["job.toml", "run.name: expected a name of letters", "HINT:"]),
    ("bad-score-order", MINIMAL + '[checkpoint]\ncheckpoint_score_order = "low"\n',
     ["job.toml", "checkpoint.checkpoint_score_order", 'expected "max" or "min"']),
    ("negative-failures", MINIMAL + "[failure]\nmax_failures = -2\n",
     ["job.toml", "failure.max_failures: expected an integer ≥ -1, got -2"]),
    ("unknown-backend", MINIMAL + 'backend = "jax"\n',
     ["job.toml", "job.backend", '"torch", "tensorflow", "horovod", "mpi", "xgboost", "lightgbm"',
      'got "jax"']),
    ("torch-option-unknown", MINIMAL + "[torch]\ntimeout = 10\n",
     ["job.toml", "torch.timeout: unknown key in [torch]", "did you mean 'timeout_s'?"]),
    ("torch-backend-choice", MINIMAL + '[torch]\nbackend = "mpi"\n',
     ["job.toml", 'torch.backend: expected one of "gloo", "nccl", "auto", got "mpi"']),
    ("torch-timeout-zero", MINIMAL + "[torch]\ntimeout_s = 0\n",
     ["job.toml", "torch.timeout_s: expected an integer ≥ 1, got 0"]),
    ("missing-entrypoint", "[scaling]\nnum_workers = 2\n",
     ["job.toml", "job.entrypoint: missing", '"file.py:function"']),
    ("entrypoint-no-colon", '[job]\nentrypoint = "train_mod.py"\n',
     ["job.toml", 'job.entrypoint: expected "module:function" or "file.py:function", got '
                  '"train_mod.py"']),
    ("entrypoint-bad-function", '[job]\nentrypoint = "train_mod.py:train-func"\n',
     ["job.toml", 'job.entrypoint: expected a Python function name after ":", got '
                  '"train-func"']),
    ("entrypoint-bad-module", '[job]\nentrypoint = "my-pkg.train:f"\n',
     ["job.toml", "job.entrypoint: expected a dotted module name", '"my-pkg.train"']),
    ("entrypoint-file-missing", '[job]\nentrypoint = "nope.py:f"\n',
     ["job.toml", "job.entrypoint: file not found:", "nope.py", "relative paths"]),
    ("entrypoint-not-string", "[job]\nentrypoint = 3\n",
     ["job.toml", "job.entrypoint: expected a string, got 3 (integer)"]),
    ("unset-env-var", MINIMAL + '[run]\nstorage_path = "$HPCTRAIN_SURELY_UNSET_X/r"\n',
     ["job.toml", "run.storage_path: environment variable $HPCTRAIN_SURELY_UNSET_X is not set"]),
    ("storage-uri", MINIMAL + '[run]\nstorage_path = "ftp://host/runs"\n',
     ["job.toml", "run.storage_path: expected a path on a shared filesystem or a storage URI "
                  "(s3://, gs://, gcs://, abfs://, abfss://, hdfs://), got 'ftp://host/runs': "
                  "ftp:// storage is not supported\nHINT: use a directory on the shared "
                  "filesystem"]),
    ("storage-file-uri-with-host", MINIMAL + '[run]\nstorage_path = "file://host/runs"\n',
     ["job.toml", "run.storage_path: expected file:///absolute/path, got 'file://host/runs'"]),
]


@pytest.mark.parametrize("text,expected", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_file_reports_file_key_and_expectation(tmp_path: Path, text: str,
                                                   expected: list) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_job_spec(path)
    message = str(info.value)
    assert message.startswith(path + ": ")
    for part in expected:
        assert part in message


def test_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match="absent.toml: job spec file not found"):
        load_job_spec(path)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="expected a TOML file, got a directory"):
        load_job_spec(str(tmp_path))


def test_unreadable_file(tmp_path: Path, monkeypatch) -> None:
    path = write(tmp_path, MINIMAL)

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", path)

    from hpctrain.common import tomlfile

    monkeypatch.setattr(tomlfile, "open", denied, raising=False)  # works as root too
    with pytest.raises(ConfigError, match="job.toml: cannot read the job spec: permission denied"):
        load_job_spec(path)


# --------------------------------------------------------------------------- overrides
OVERRIDES_OK = [
    ("int", ["scaling.num_workers=8"], lambda s: s.scaling.num_workers == 8),
    ("float", ["config.lr=0.1"], lambda s: s.config["lr"] == 0.1),
    ("bare-string", ["run.name=x"], lambda s: s.run.name == "x"),
    ("quoted-string", ['run.name="exp-2"'], lambda s: s.run.name == "exp-2"),
    ("number-for-string-key", ["run.name=2024"], lambda s: s.run.name == "2024"),
    ("bool", ["scaling.use_gpu=true"], lambda s: s.scaling.use_gpu is True),
    ("list", ["config.sizes=[1, 2]"], lambda s: s.config["sizes"] == [1, 2]),
    ("nested-config", ["config.opt.name=sgd"], lambda s: s.config["opt"] == {"name": "sgd"}),
    ("resources", ["scaling.resources_per_worker.GPU=1"],
     lambda s: s.scaling.resources_per_worker == {"GPU": 1}),
    ("backend-option", ["torch.backend=nccl"], lambda s: s.backend_options == {"backend": "nccl"}),
    ("last-wins", ["scaling.num_workers=2", "scaling.num_workers=3"],
     lambda s: s.scaling.num_workers == 3),
    ("empty-removes", ["run.verbose="], lambda s: s.run.verbose == 1),
    ("spaces", [" scaling.num_workers = 5 "], lambda s: s.scaling.num_workers == 5),
]


@pytest.mark.parametrize("overrides,check", [o[1:] for o in OVERRIDES_OK],
                         ids=[o[0] for o in OVERRIDES_OK])
def test_overrides(tmp_path: Path, overrides: list, check) -> None:
    spec = load_job_spec(write(tmp_path, MINIMAL + "[run]\nverbose = 2\n"), overrides)
    assert check(spec)


OVERRIDES_BAD = [
    ("no-equals", "scaling.num_workers", "expected section.key=value"),
    ("empty-key", "=3", "empty key"),
    ("malformed-key", "scaling..x=1", "malformed key 'scaling..x'"),
    ("unknown-section", "scalling.num_workers=2", "scalling: unknown section\nHINT: did you "
                                                  "mean 'scaling'?"),
    ("unknown-key", "scaling.num_worker=2", "scaling.num_worker: unknown key in [scaling]"),
    ("whole-section", "scaling=3", "scaling: expected section.key=value"),
    ("too-deep", "scaling.num_workers.x=1", "scaling.num_workers.x: scaling.num_workers is "
                                            "not a table"),
    ("bad-value", "config.a=[1,", "value [1, is not a valid TOML value"),
    ("wrong-type", "scaling.num_workers=two",
     'scaling.num_workers: expected an integer, got "two" (string)'),
    ("bad-value-range", "scaling.num_workers=0", "scaling.num_workers: expected an integer ≥ 1"),
]


@pytest.mark.parametrize("override,expected", [o[1:] for o in OVERRIDES_BAD],
                         ids=[o[0] for o in OVERRIDES_BAD])
def test_bad_overrides_name_the_override(tmp_path: Path, override: str, expected: str) -> None:
    path = write(tmp_path, MINIMAL)
    with pytest.raises(ConfigError) as info:
        load_job_spec(path, [override])
    message = str(info.value)
    assert message.startswith(f"override {override!r}: ")
    assert expected in message


def test_apply_overrides_returns_a_copy() -> None:
    data = {"scaling": {"num_workers": 2}}
    out = apply_overrides(data, ["scaling.num_workers=8", "config.lr=0.1", "run.name=x"])
    assert out == {"scaling": {"num_workers": 8}, "config": {"lr": 0.1}, "run": {"name": "x"}}
    assert data == {"scaling": {"num_workers": 2}}


def test_override_entrypoint_resolves_against_cwd(tmp_path: Path, monkeypatch) -> None:
    path = write(tmp_path, MINIMAL)
    other = tmp_path / "other"
    other.mkdir()
    (other / "alt.py").write_text("def main(config):\n    return 'alt'\n")
    monkeypatch.chdir(other)
    spec = load_job_spec(path, ["job.entrypoint=alt.py:main"])
    assert spec.entrypoint is not None and spec.entrypoint.path == str(other / "alt.py")
    assert spec.entrypoint.resolve()({}) == "alt"


# --------------------------------------------------------------------------- entry points
def test_resolve_path_form_with_sibling_import(tmp_path: Path) -> None:
    spec = load_job_spec(write(tmp_path, MINIMAL))
    assert spec.entrypoint is not None
    func = spec.entrypoint.resolve()
    assert func({"x": 21}) == 42
    assert spec.entrypoint.resolve() is func  # loaded once


def test_resolve_module_form(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "spec_pkg_a"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text("def train_func(config):\n    return config['x'] + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = EntryPoint.parse("spec_pkg_a.train:train_func", base_dir=".")
    assert (ep.module, ep.path, ep.function) == ("spec_pkg_a.train", None, "train_func")
    assert ep.resolve()({"x": 1}) == 2


def test_module_form_found_beside_job_file(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "spec_pkg_b"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text("def go(config):\n    return 'b'\n")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    path = write(tmp_path, '[job]\nentrypoint = "spec_pkg_b.train:go"\n')
    spec = load_job_spec(path)
    assert spec.entrypoint is not None and spec.entrypoint.resolve()({}) == "b"


RESOLVE_BAD = [
    ("missing-function", "train_mod.py:nope", "train_mod.py has no function 'nope'"),
    ("typo-function", "train_mod.py:train_fun", "HINT: did you mean 'train_func'?"),
    ("not-callable", "train_mod.py:not_a_function",
     "train_mod.py:not_a_function is not callable (found 42, int)"),
    ("missing-module", "spec_no_such_pkg.train:f",
     "cannot import module 'spec_no_such_pkg.train'"),
]


@pytest.mark.parametrize("text,expected", [r[1:] for r in RESOLVE_BAD],
                         ids=[r[0] for r in RESOLVE_BAD])
def test_resolve_errors(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, f'[job]\nentrypoint = "{text}"\n')
    spec = load_job_spec(path)
    assert spec.entrypoint is not None
    with pytest.raises(ConfigError) as info:
        spec.entrypoint.resolve()
    message = str(info.value)
    assert message.startswith(path + ": job.entrypoint: ")
    assert expected in message


def test_resolve_file_removed_after_parse(tmp_path: Path) -> None:
    write(tmp_path, MINIMAL)
    (tmp_path / "gone.py").write_text("def f(c):\n    pass\n")
    ep = EntryPoint.parse("gone.py:f", base_dir=str(tmp_path))
    (tmp_path / "gone.py").unlink()
    with pytest.raises(ConfigError, match="job.entrypoint: file not found"):
        ep.resolve()


@pytest.mark.parametrize("text", ["pkg.mod:train", "/abs/dir/train.py:main"],
                         ids=["module", "path"])
def test_entrypoint_str_round_trips(tmp_path: Path, text: str) -> None:
    if text.startswith("/"):
        target = tmp_path / "train.py"
        target.write_text("def main(c):\n    pass\n")
        text = f"{target}:main"
    ep = EntryPoint.parse(text, base_dir="/elsewhere")
    assert str(ep) == text
    assert EntryPoint.parse(str(ep), base_dir="/elsewhere") == ep


# --------------------------------------------------------------------------- round trip
@pytest.mark.parametrize("text,overrides", [
    (FULL, []),
    (MINIMAL, []),
    (FULL, ["scaling.num_workers=4", "config.extra.deep=[1, 2]", "run.name=other"]),
], ids=["full", "minimal", "with-overrides"])
def test_to_toml_round_trip(tmp_path: Path, text: str, overrides: list) -> None:
    spec = load_job_spec(write(tmp_path, text), overrides)
    out = tmp_path / "resolved" / "spec.toml"
    out.parent.mkdir()
    rendered = spec.to_toml()
    assert rendered.startswith("# resolved hpctrain job spec\n")
    out.write_text(rendered)
    again = load_job_spec(str(out))
    assert again == spec
    assert again.to_toml() == rendered


def test_to_toml_dict_layout_and_unrepresentable_values() -> None:
    class Obj:
        def __repr__(self) -> str:
            return "<Obj>"

    spec = JobSpec(entrypoint="pkg.mod:f", config={"obj": Obj(), "none": None, "t": (1, 2)},
                   scaling=ScalingConfig(num_workers=2))
    assert spec.to_toml_dict() == {
        "job": {"entrypoint": "pkg.mod:f", "backend": "torch", "entrypoint_dir": os.getcwd()},
        "scaling": {"num_workers": 2, "use_gpu": False},
        "run": {"verbose": 1},
        "checkpoint": {"checkpoint_score_order": "max", "sync_to_disk": True},
        "failure": {"max_failures": 0, "warning_signal": "USR1", "warning_time": "120s",
                    "requeue": True, "max_requeues": -1},
        "config": {"obj": "<Obj>", "t": [1, 2]},
    }


def test_spec_from_dict_python_side() -> None:
    spec = spec_from_dict({"job": {"backend": "tensorflow"}, "tensorflow": {"timeout_s": 5}},
                          file="inline")
    assert spec.backend == "tensorflow" and spec.backend_options == {"timeout_s": 5}
    assert spec.source == "inline"
    with pytest.raises(ConfigError, match=r"^inline: failure.max_failures: expected an integer"):
        spec_from_dict({"failure": {"max_failures": 1.5}}, file="inline")


def test_jobspec_checks_backend_in_python() -> None:
    with pytest.raises(ConfigError, match="job.backend: expected one of"):
        JobSpec(backend="jax")
    with pytest.raises(ConfigError, match="torch.nccl_debug: unknown key"):
        JobSpec(backend_options={"nccl_debug": True})
    assert set(BACKENDS) == {"torch", "tensorflow", "horovod", "mpi", "xgboost", "lightgbm",
                             "function"}


def test_every_bad_override_and_every_bad_section_is_reported_at_once(tmp_path):
    (tmp_path / "train.py").write_text("def main(config):\n    pass\n")
    job = tmp_path / "job.toml"
    job.write_text('scaling = 4\n[job]\nentrypoint = "train.py:main"\n[runn]\nname = "x"\n'
                   '[failure]\nmax_failures = "2"\nfail_fsat = true\n[checkpoint]\nnum_to_kep = 1\n')
    with pytest.raises(ConfigError) as e:
        spec_module.load_job_spec(str(job), ["scaling.num_worker=2", "run.nam=x"])
    assert [(err.file, err.message) for err in e.value.errors] == [
        ("override 'scaling.num_worker=2'", "scaling.num_worker: unknown key in [scaling]"),
        ("override 'run.nam=x'", "run.nam: unknown key in [run]")]
    with pytest.raises(ConfigError) as e:  # the file's own problems, in the file's order
        spec_module.load_job_spec(str(job))
    assert [err.message.split(":")[0] for err in e.value.errors] == [
        "scaling", "runn", "failure.max_failures", "failure.fail_fsat", "checkpoint.num_to_kep"]
    assert str(e.value).splitlines()[0] == f"{job}: 5 problems:"
    assert e.value.errors[1].hint == "did you mean 'run'?"


def test_the_function_backends_section_and_config_are_checked() -> None:
    """``job.backend = "function"`` (a Tune function trainable's): its ``[function]`` table
    and ``FunctionTrainer(function_config=)`` refuse bad values, naming the key."""
    spec = spec_from_dict({"job": {"entrypoint": "m:f", "backend": "function"},
                           "function": {"timeout_s": 5}})
    assert (spec.backend, spec.backend_options) == ("function", {"timeout_s": 5})
    with pytest.raises(ConfigError, match=r"^job.toml: function.timeout_s: expected an "
                                          r"integer ≥ 1, got 0$"):
        spec_from_dict({"job": {"backend": "function"}, "function": {"timeout_s": 0}},
                       file="job.toml")
    with pytest.raises(ConfigError, match="^function_config: expected a FunctionConfig, "
                                          "got dict$"):
        FunctionTrainer(lambda config: None, function_config={"timeout_s": 5})
    with pytest.raises(ConfigError, match="function.timeout_s: expected a positive integer"):
        FunctionConfig(timeout_s=True)


#: a value other than the default for every key the four sections declare
#: (config/keys.py): a new field fails the test below until it has one here
NON_DEFAULT = {
    "scaling": {"num_workers": 4, "use_gpu": True, "resources_per_worker": {"CPU": 2},
                "num_nodes": 2, "workers_per_node": 2, "cpus_per_worker": 2,
                "gpus_per_worker": 1, "mem_per_worker": "8G", "accelerator_type": "A100"},
    "run": {"name": "exp", "storage_path": "/scratch/runs", "verbose": 2, "share": "group"},
    "checkpoint": {"num_to_keep": 3, "checkpoint_score_attribute": "loss",
                   "checkpoint_score_order": "min", "sync_to_disk": False,
                   "checkpoint_upload_mode": "async", "checkpoint_frequency": 5,
                   "local_dir": "/tmp/ckpt"},
    "failure": {"max_failures": 3, "warning_signal": "USR2", "warning_time": "300s",
                "requeue": False, "max_requeues": 4, "mtbi": "43200s", "hang_timeout": "600s",
                "max_user_errors": 1, "max_node_failures": 2, "max_hangs": 1,
                "max_attempts_without_progress": 5, "max_excluded_nodes": 2,
                "straggler_factor": 3.0},
}


def test_every_declared_key_of_a_section_round_trips_through_spec_toml(tmp_path: Path):
    """spec.toml's sections are derived from the fields' declarations: each key a job
    file sets comes back from the resolved spec.toml, unchanged."""
    classes = {"scaling": ScalingConfig, "run": RunConfig, "checkpoint": CheckpointConfig,
               "failure": FailureConfig}
    for section, cls in classes.items():
        assert set(NON_DEFAULT[section]) == set(toml_keys(cls)), section
    text = MINIMAL + "\n" + tomli_w.dumps(NON_DEFAULT)
    spec = load_job_spec(write(tmp_path, text))
    resolved = spec.to_toml_dict()
    for section, values in NON_DEFAULT.items():
        assert resolved[section] == values, section
    out = tmp_path / "spec.toml"
    out.write_text(spec.to_toml())
    assert load_job_spec(str(out)) == spec
