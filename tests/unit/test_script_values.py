"""Every value that reaches a batch script goes through one check (issue 25, item 3), and
the small input gaps of items 5 and 6: credential-looking ``[config]`` keys, TOML nested
too deeply, ``%`` in an LSF run path, ``gpu_binding_var``.

* A CR, LF or NUL in any key that reaches the script is refused when the spec is loaded,
  naming the key and the file (or override) that set it; the renderer checks its whole
  template context again, for a value set after loading (Python objects, a
  ``BatchRequest``'s interpreter).
* A comment of the script that shows a value prefixes each of its physical lines with
  ``#``: a value that slipped past both checks (the checks switched off below) still runs
  nothing, under bash, with srun, PBS + mpiexec and LSF + mpiexec.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import uuid

import pytest

from hpctrain.errors import ConfigError
from hpctrain.schedulers import BatchRequest
from hpctrain.schedulers import base as sched_base
from hpctrain.sites import SITE_PATH_ENV
from hpctrain.spec import REDACTED, is_credential_key, load_job_spec
from helpers import ROOT

ENTRY = os.path.join(ROOT, "examples", "quickstart_train.py")
RUN = "/scratch/me/runs/r1"

#: (scheduler, the launcher that shows launcher_args and python in the launch comment)
SCHEDULERS = [("slurm", "srun"), ("pbs", "mpiexec"), ("lsf", "mpiexec")]
INJECTED = "x\necho INJECTED $(id -u)"


@pytest.fixture(autouse=True)
def _only_packaged_sites(monkeypatch):
    monkeypatch.delenv(SITE_PATH_ENV, raising=False)


def write_job(tmp_path, body: str = "") -> str:
    path = tmp_path / "job.toml"
    path.write_text(f'[job]\nentrypoint = "{ENTRY}:train_func"\n' + textwrap.dedent(body))
    return str(path)


def load(tmp_path, body: str = "", overrides=()):
    return load_job_spec(write_job(tmp_path, body), list(overrides))


def toml_str(value: str) -> str:
    return json.dumps(value)  # a TOML basic string (\n, \r, \u0000 escaped)


def refused(fn, *args, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kw)
    return info.value


# --------------------------------------------------------------------------- at load time
@pytest.mark.parametrize("kind, launcher", SCHEDULERS)
@pytest.mark.parametrize("key, toml_value, expected", [
    ("launcher_args", f"[{toml_str(INJECTED)}]", "one launcher argument per entry"),
    ("python", toml_str("/usr/bin/python3\necho INJECTED $(id -u)"),
     "the path of a Python interpreter"),
])
def test_a_newline_in_launcher_args_or_python_is_refused_in_the_job_file(
        tmp_path, kind, launcher, key, toml_value, expected):
    job = write_job(tmp_path, f'[scheduler]\nkind = "{kind}"\nlauncher = "{launcher}"\n'
                              f"{key} = {toml_value}\n")
    err = refused(load_job_spec, job)
    dotted = f"scheduler.{key}" + ("[0]" if key == "launcher_args" else "")
    assert err.message.startswith(f"{dotted}: expected {expected}")
    assert "holds a newline (LF)" in err.message
    assert "would start a new command" in err.message
    assert err.file == job
    assert err.hint
    assert str(err).startswith(f"{job}: {dotted}: ")


@pytest.mark.parametrize("kind, launcher", SCHEDULERS)
@pytest.mark.parametrize("override, key", [
    ("scheduler.launcher_args=[\"--a\", \"b\\nid\"]", "scheduler.launcher_args[1]"),
    ('scheduler.python="/opt/py\\r\\nid"', "scheduler.python"),
])
def test_a_line_break_set_with_an_override_is_refused_naming_the_override(
        tmp_path, kind, launcher, override, key):
    err = refused(load, tmp_path, overrides=[f"scheduler.kind={kind}",
                                             f"scheduler.launcher={launcher}", override])
    assert err.message.startswith(f"{key}: expected ")
    assert err.file == f"override {override!r}"


#: each scheduler's own selector key (Slurm's partition, PBS's and LSF's queue)
SELECTOR = {"slurm": "partition", "pbs": "queue", "lsf": "queue"}
LINE_BREAKS = [
    ('[setup]\nmodules = ["gcc\\necho INJECTED"]\n', "setup.modules[0]", "a newline (LF)"),
    ('[setup]\ncommands = ["source venv/bin/activate\\recho INJECTED"]\n', "setup.commands[0]",
     "a carriage return (CR)"),
    ('[scheduler]\n{selector} = "gpu\\u0000x"\n', "scheduler.{selector}", "a NUL byte"),
    ('[scheduler]\naccount = "p\\nid"\n', "scheduler.account", "a newline (LF)"),
    ('[run]\nstorage_path = "/scratch/a\\nid"\n', "run.storage_path", "a newline (LF)"),
]


@pytest.mark.parametrize("kind, body, key, what", [
    (kind, body.replace("{selector}", SELECTOR[kind]), key.replace("{selector}", SELECTOR[kind]),
     what) for kind in SELECTOR for body, key, what in LINE_BREAKS] + [
    ("slurm", '[scheduler]\nconstraint = "a100\\r"\n', "scheduler.constraint",
     "a carriage return (CR)")])
def test_a_line_break_in_other_keys_is_refused_naming_the_key(tmp_path, kind, body, key, what):
    job = write_job(tmp_path, body)
    err = refused(load_job_spec, job, [f"scheduler.kind={kind}"])
    assert err.message.startswith(f"{key}: expected ")
    assert f"holds {what}" in err.message
    assert err.file == job


def test_an_env_value_with_a_carriage_return_is_refused(tmp_path):
    err = refused(load, tmp_path, '[env]\nX = "a\\rid"\n', ["scheduler.kind=slurm"])
    assert err.message.startswith("env.X: a newline, carriage return or NUL byte")


def test_a_multi_line_config_value_stays_allowed(tmp_path):
    """[config] reaches the script only inside the embedded TOML (escaped): a prompt
    template with newlines is fine."""
    spec = load(tmp_path, '[config]\nprompt = "line1\\nline2"\n', ["scheduler.kind=slurm"])
    script = BatchRequest(spec, RUN).materialize()
    assert 'prompt = "line1\\nline2"' in script


# --------------------------------------------------------------------------- at render time
@pytest.mark.parametrize("kind, launcher", SCHEDULERS)
@pytest.mark.parametrize("key", ["launcher_args", "python"])
def test_the_renderer_refuses_a_value_set_after_loading(tmp_path, kind, launcher, key):
    """The safety net: a spec changed after it was checked (a Python SchedulerConfig
    edited in place) is refused by the renderer, naming the key."""
    job = write_job(tmp_path)
    spec = load_job_spec(job, [f"scheduler.kind={kind}", f"scheduler.launcher={launcher}"])
    if key == "launcher_args":
        spec.scheduler.launcher_args = ["--ok", INJECTED]
    else:
        spec.scheduler.python = "/usr/bin/python3\necho INJECTED"
    err = refused(BatchRequest(spec, RUN).materialize)
    dotted = "scheduler.launcher_args[1]" if key == "launcher_args" else "scheduler.python"
    assert err.message.startswith(f"{dotted}: expected ")
    assert "holds a newline (LF)" in err.message
    assert err.file == job


@pytest.mark.parametrize("kind, launcher", SCHEDULERS)
def test_the_renderer_refuses_an_interpreter_given_to_the_request(tmp_path, kind, launcher):
    spec = load(tmp_path, overrides=[f"scheduler.kind={kind}", f"scheduler.launcher={launcher}"])
    err = refused(BatchRequest(spec, RUN, python="/usr/bin/python3\0x").materialize)
    assert err.message.startswith("BatchRequest.python (the interpreter in the job): ")
    assert "holds a NUL byte" in err.message


def test_the_renderer_refuses_a_line_break_in_the_re_render_command(tmp_path):
    spec = load(tmp_path, overrides=["scheduler.kind=slurm"])
    err = refused(BatchRequest(spec, RUN, rerender="hpctrain render job.toml\0id").materialize)
    assert "NUL" in err.message


def test_every_template_variable_is_checked(tmp_path):
    """check_script_context covers every variable but the embedded spec, whatever its
    name: a sweep's prelude lines (overrides of render()) too."""
    spec = load(tmp_path, overrides=["scheduler.kind=slurm"])
    sched = BatchRequest(spec, RUN).scheduler
    err = refused(sched.render, BatchRequest(spec, RUN), prelude=["ok", "a\nid"])
    assert err.message.startswith("the script's prelude: expected a single line")


# --------------------------------------------------------------------------- second wall
def _unchecked_script(tmp_path, monkeypatch, kind, launcher, run_path, python):
    """The script of a spec whose launcher_args (the launch-line comment), run name and
    re-render command (the header's comments) hold injected lines, rendered with both
    checks switched off: what a value that slipped past them would give."""
    monkeypatch.setattr(sched_base, "check_script_context", lambda *a, **k: None)
    spec = load(tmp_path, overrides=[f"scheduler.kind={kind}", f"scheduler.launcher={launcher}"])
    marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
    spec.scheduler.launcher_args = [f"x\ntouch {marker}-args\r\ntouch {marker}-crlf\rx"]
    request = BatchRequest(spec, run_path, python=python)
    script = request.scheduler.render(
        request, rerender=f"hpctrain render job.toml\0\ntouch {marker}-rerender",
        run_name=f"r1\rtouch {marker}-name")
    return script, marker


@pytest.mark.parametrize("kind, launcher", SCHEDULERS)
def test_a_value_that_slipped_past_stays_a_comment(tmp_path, monkeypatch, kind, launcher):
    stub = tmp_path / "fake-python"
    stub.write_text("#!/bin/bash\ncat > /dev/null\n")
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    run_path = str(tmp_path / "runs" / "r1")
    script, marker = _unchecked_script(tmp_path, monkeypatch, kind, launcher, run_path,
                                       str(stub))
    lines = script.replace("\r", "\n").split("\n")
    body = lines[:next(i for i, l in enumerate(lines)
                       if l.startswith("exec ") and "hpctrain.cli.batch" in l)]
    injected = [l for l in body if "touch " in l]  # (the embedded spec's TOML escapes them)
    assert len(injected) == 4, script
    assert all(l.startswith("#") for l in injected), injected
    assert "\0" not in script and "\r" not in script
    # and bash agrees: the script runs to its end and none of the lines ran
    job = tmp_path / "job.sh"
    job.write_text(script)
    out = subprocess.run(["bash", str(job)], capture_output=True, text=True, cwd=str(tmp_path),
                         env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "1",
                              "PBS_JOBID": "1", "LSB_JOBID": "1",
                              "PBS_O_WORKDIR": str(tmp_path)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert [p for p in os.listdir(tmp_path) if p.startswith(marker.name)] == []


def test_the_comment_filter_prefixes_every_physical_line():
    text = sched_base.comment("a\nb\r\nc\rd\0e", "#   ")
    assert text.split("\n") == ["#   a", "#   b", "#   c", "#   d\\0e"]
    assert sched_base.comment("r1\nid", inline=True) == "r1\n# id"


# --------------------------------------------------------------------------- credentials
@pytest.mark.parametrize("body, key, var", [
    ('[config]\napi_key = "sk-abc123"\n', "config.api_key", "API_KEY"),
    ('[config]\nlr = 0.1\n[config.wandb]\napiKey = "x"\n', "config.wandb.apiKey",
     "WANDB_API_KEY"),
    ('[config]\nhf_token = "hf_abc"\n', "config.hf_token", "HF_TOKEN"),
    ('[config]\ndb = { password = "pw" }\n', "config.db.password", "DB_PASSWORD"),
])
def test_a_credential_looking_config_key_is_refused(tmp_path, body, key, var):
    job = write_job(tmp_path, body)
    err = refused(load_job_spec, job)
    assert err.message == (f"{key}: looks like a credential: it would be written into "
                           "spec.toml and the batch script (and shown in their comments)")
    assert err.file == job
    assert f'os.environ["{var}"]' in err.hint and "0600" in err.hint


def test_a_credential_set_with_an_override_is_refused_naming_it(tmp_path):
    err = refused(load, tmp_path, overrides=["config.api_key=sk-abc123"])
    assert err.message.startswith("config.api_key: looks like a credential")
    assert err.file == "override 'config.api_key=sk-abc123'"


def test_the_user_sees_the_refusal_and_no_secret(tmp_path):
    job = write_job(tmp_path, '[scheduler]\nkind = "slurm"\n[config]\napi_key = "sk-abc123"\n')
    p = subprocess.run([sys.executable, "-m", "hpctrain", "render", job], capture_output=True,
                       text=True, cwd=str(tmp_path), timeout=120)
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr.startswith(f"hpctrain: error: {job}: config.api_key: looks like a "
                               "credential"), p.stderr
    assert 'HINT: read it in the training function instead: os.environ["API_KEY"]' in p.stderr


def test_keys_that_only_look_close_are_kept(tmp_path):
    spec = load(tmp_path, textwrap.dedent("""
        [config]
        tokenizer = "gpt2"
        pad_token = "<pad>"
        eos_token = "</s>"
        max_new_tokens = 64
        use_auth_token = true
        api_key_file = "~/.wandb_key"
        token_env = "HF_TOKEN"
        secret_name = "training/wandb"
        keyboard = "qwerty"
        """), ["scheduler.kind=slurm"])
    assert spec.config["tokenizer"] == "gpt2" and spec.config["api_key_file"] == "~/.wandb_key"
    assert REDACTED not in BatchRequest(spec, RUN).materialize()


def test_the_spec_embedded_by_an_older_hpctrain_still_loads_in_the_job(tmp_path):
    """A run started from Python before credentials were redacted has the key in its
    job.sh: a requeue of that script must not fail on it (only job files are refused)."""
    from hpctrain.cli.batch import load_spec

    text = (f'[job]\nentrypoint = "{ENTRY}:train_func"\n[scheduler]\nkind = "slurm"\n'
            '[config]\napi_key = "sk-old"\n')
    assert load_spec(text, str(tmp_path)).config == {"api_key": "sk-old"}


@pytest.mark.parametrize("name, expected", [
    ("api_key", True), ("API_KEY", True), ("apiKey", True), ("openai_api_key", True),
    ("access_token", True), ("token", True), ("client_secret", True), ("passwd", True),
    ("aws_secret_access_key", True), ("tokenizer", False), ("bos_token", False),
    ("num_tokens", False), ("api_key_path", False), ("monkey", False),
])
def test_credential_key_names(name, expected):
    assert is_credential_key(name) is expected


def _reports_its_key(config):
    import hpctrain

    hpctrain.report({"got_key": config["api_key"] == "sk-python-secret-42",
                     "lr": config["lr"]})


def test_a_python_credential_stays_out_of_spec_toml_and_job_sh(tmp_path):
    """TorchTrainer(train_loop_config={"api_key": ...}) is what Ray programs do: no
    refusal; spec.toml and the script hold REDACTED, the training function gets the key
    (from the 0600 payload)."""
    pytest.importorskip("torch")
    from hpctrain import RunConfig, Run, ScalingConfig
    from hpctrain.torch import TorchTrainer

    secret = "sk-python-secret-42"

    def trainer(**kw):
        return TorchTrainer(_reports_its_key,
                            train_loop_config={"api_key": secret, "lr": 0.5},
                            scaling_config=ScalingConfig(num_workers=1),
                            run_config=RunConfig(name="cred", storage_path=str(tmp_path),
                                                 verbose=0), **kw)

    result = trainer().fit()
    assert result.metrics["got_key"] is True and result.metrics["lr"] == 0.5
    spec_toml = open(os.path.join(result.path, "spec.toml")).read()
    assert secret not in spec_toml
    assert f'api_key = "{REDACTED}"' in spec_toml and "lr = 0.5" in spec_toml
    # the batch script a submission would write
    _, script = Run.for_trainer(trainer(scheduler="slurm")).render()
    assert secret not in script
    assert REDACTED in script


# --------------------------------------------------------------------------- input gaps
def test_toml_nested_5000_deep_is_a_config_error_naming_the_file(tmp_path):
    job = tmp_path / "deep.toml"
    job.write_text("[config]\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    err = refused(load_job_spec, str(job))
    assert err.file == str(job)
    assert err.message.startswith("invalid TOML: arrays or tables nest too deeply")


def test_toml_nested_past_the_limit_is_a_config_error_naming_the_key(tmp_path):
    job = tmp_path / "deep.toml"
    job.write_text("[config]\nx = " + "[" * 300 + "]" * 300 + "\n")
    err = refused(load_job_spec, str(job))
    assert err.file == str(job)
    assert "nest 65 levels deep (at config.x)" in err.message


def test_an_override_nested_too_deeply_is_a_config_error(tmp_path):
    value = "[" * 5000 + "]" * 5000
    err = refused(load, tmp_path, overrides=[f"config.x={value}"])
    assert err.file == f"override 'config.x={value}'"
    assert "nest too deeply" in err.message


def test_a_percent_in_an_lsf_run_directory_is_refused(tmp_path):
    spec = load(tmp_path, overrides=["scheduler.kind=lsf"])
    err = refused(BatchRequest(spec, "/scratch/100%J/r1").materialize)
    assert err.message.startswith("run.storage_path: the run directory '/scratch/100%J/r1' "
                                  "holds '%', which LSF reads in the output path")
    assert "%J" in err.message and "no escape" in err.hint
    # the storage path in the job file is named
    job_spec = load(tmp_path, '[run]\nstorage_path = "/scratch/50%"\nname = "r"\n',
                    ["scheduler.kind=lsf"])
    err = refused(BatchRequest(job_spec, "/scratch/50%/r").materialize)
    assert err.file == str(tmp_path / "job.toml")


def test_a_percent_elsewhere_is_still_fine_on_slurm(tmp_path):
    spec = load(tmp_path, overrides=["scheduler.kind=slurm"])
    assert "100%" in BatchRequest(spec, "/scratch/100%/r1").materialize()


@pytest.mark.parametrize("value", ["X;id", "CUDA VISIBLE", "1GPU", "$(id)", ""])
def test_gpu_binding_var_must_be_a_variable_name(tmp_path, value):
    job = write_job(tmp_path, f'[scheduler]\ngpu_binding_var = {toml_str(value)}\n')
    err = refused(load_job_spec, job)
    assert err.message.startswith("scheduler.gpu_binding_var: expected an environment "
                                  "variable name")
    assert err.file == job


def test_gpu_binding_var_from_python_is_checked_too():
    from hpctrain.config import SchedulerConfig
    from hpctrain.spec import JobSpec

    err = refused(JobSpec, scheduler=SchedulerConfig(kind="slurm", gpu_binding_var="X;id"))
    assert err.message.startswith("scheduler.gpu_binding_var: ")
    assert JobSpec(scheduler=SchedulerConfig(gpu_binding_var="ROCR_VISIBLE_DEVICES"))
