"""The command line for daily use and scripts: a sweep's trials by name in every command,
``--json`` parsed back, shell completion in a real bash, exit codes (130 on Ctrl-C).
One real local sweep (2 trials) and one run, made once for the module."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from helpers import SUPPORT, cli, wait_for

pytestmark = pytest.mark.slow  # (real local runs: one sweep and one run for the module)
sys.path.insert(0, os.path.join(SUPPORT, "fake_pbs"))
import _fakepbs as fakepbs  # noqa: E402

TRAIN = '''
import time
import hpctrain

def hello(config):
    print(f"hello lr={config['lr']}", flush=True)
    for step in range(2):
        hpctrain.report({"loss": config["lr"] * (step + 1)})

def saves(config):
    import os, tempfile
    for step in range(2):
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "step"), "w").write(str(step))
            hpctrain.report({"loss": step + 1.0, "acc": 0.5},
                            checkpoint=hpctrain.Checkpoint.from_directory(d))

def slow(config):
    hpctrain.report({"loss": 1.0})
    time.sleep(120)
'''


def job_file(path, name, body="", top=""):
    path.write_text(top + textwrap.dedent(f"""\
        [job]
        entrypoint = "train.py:hello"
        [run]
        name = "{name}"
        [scaling]
        num_workers = 1
        [config]
        lr = 0.5
        """) + textwrap.dedent(body))
    return str(path)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """``(storage, env)``: a finished local sweep ``sweep-demo`` (trials lr 0.1, 0.2)
    and a finished run ``single`` under ``storage``, the default storage path of ``env``."""
    root = tmp_path_factory.mktemp("cli")
    storage = str(root / "runs")
    env = dict(os.environ, HPCTRAIN_STORAGE_PATH=storage)
    (root / "train.py").write_text(TRAIN)
    sweep = job_file(root / "sweep.toml", "sweep-demo", """\
        [sweep]
        metric = "loss"
        mode = "min"
        [sweep.param_space]
        lr = {grid_search = [0.1, 0.2]}
        """)
    cli("-q", "sweep", sweep, env=env, cwd=str(root))
    single = job_file(root / "run.toml", "single", """\
        [checkpoint]
        checkpoint_score_attribute = "loss"
        checkpoint_score_order = "min"
        """)
    cli("-q", "run", single, "--set", 'job.entrypoint="train.py:saves"', env=env, cwd=str(root))
    return storage, env


# -- a sweep's trials by name ---------------------------------------------------------------
def test_a_trial_is_found_by_name_in_logs_status_and_results(demo):
    storage, env = demo
    assert cli("logs", "sweep-demo/trial_00001", env=env).stdout == "hello lr=0.2\n"
    status = cli("status", "sweep-demo/trial_00001", env=env).stdout
    assert status.splitlines()[0] == (f"run trial_00001: FINISHED  "
                                      f"({storage}/sweep-demo/trial_00001)")
    assert "iteration 2: loss=0.4" in status
    results = cli("results", "sweep-demo/trial_00000", env=env).stdout
    assert results.startswith("trial_00000  FINISHED  iterations 2")


def test_logs_of_a_sweep_shows_each_trial_under_its_name(demo):
    _, env = demo
    out = cli("logs", "sweep-demo", env=env).stdout
    lines = out.splitlines()
    assert [l.split(": rank 0 of job")[0] for l in lines if l.startswith("==>")] == [
        "==> sweep-demo/trial_00000", "==> sweep-demo/trial_00001"]
    assert [l for l in lines if l.startswith("hello")] == ["hello lr=0.1", "hello lr=0.2"]
    p = cli("logs", "sweep-demo", "--follow", env=env, check=False)
    assert p.returncode == 2
    assert "logs --follow: sweep-demo is a sweep; expected one of its trials" in p.stderr
    assert "HINT: hpctrain logs sweep-demo/trial_00000 --follow" in p.stderr


def test_list_trials_shows_each_trial_after_its_sweep(demo):
    storage, env = demo
    rows = [l.split("\t") for l in cli("list", "--trials", env=env).stdout.splitlines()]
    assert [r[:4] for r in rows if r[0].startswith("sweep-demo")] == [
        ["sweep-demo", "sweep", "2 trials: 2 finished", "-"],
        ["sweep-demo/trial_00000", "trial", "FINISHED", "2"],
        ["sweep-demo/trial_00001", "trial", "FINISHED", "2"]]
    assert rows[-1][5] == f"{storage}/sweep-demo/trial_00001"
    plain = cli("list", env=env).stdout  # without --trials: runs and sweeps only
    assert "trial_0000" not in plain and "\nsingle\trun\tFINISHED\t2\t" in "\n" + plain


def test_cancel_of_a_local_sweep_says_there_is_no_job(demo):
    storage, env = demo
    p = cli("cancel", "sweep-demo", env=env, check=False)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        f"hpctrain: error: {storage}/sweep-demo: the sweep has no submitted job arrays "
        "to cancel",
        "HINT: a local sweep's trials run inside `hpctrain sweep`: Ctrl-C there stops them"]


def test_cancel_of_a_pbs_sweep_cancels_its_queued_array(tmp_path, monkeypatch):
    pbs = fakepbs.FakePbs.install(tmp_path / "pbs_state", monkeypatch,
                                  clear=("PBS_", "SLURM_", "OMPI_", "PMI_", "PALS_"))
    (tmp_path / "train.py").write_text(TRAIN)
    storage = str(tmp_path / "runs")
    env = dict(os.environ, HPCTRAIN_STORAGE_PATH=storage)
    job = job_file(tmp_path / "sweep.toml", "pbs-sweep", top='site = "generic-pbs"\n',
                   body="""\
        [scheduler]
        queue = "workq"
        launcher = "local"
        [sweep.param_space]
        lr = {grid_search = [0.1, 0.2]}
        """)
    assert "submitted pbs job array 1[].pbshost" in cli("sweep", job, env=env).stdout
    out = cli("cancel", "pbs-sweep", env=env).stdout
    assert out.splitlines()[0] == "cancelled pbs job array 1[].pbshost"
    assert pbs.jobs()["1[].pbshost"]["job_state"] == "F"
    again = cli("cancel", "pbs-sweep", env=env).stdout
    assert again == "no job of sweep pbs-sweep is queued or running; nothing to cancel\n"


# -- --json -----------------------------------------------------------------------------------
def test_json_of_status_results_list_and_sites_parses_back(demo):
    storage, env = demo
    status = json.loads(cli("status", "single", "--json", env=env).stdout)
    assert {k: status[k] for k in ("kind", "name", "status", "attempts", "failures",
                                   "iteration", "metrics", "jobs")} == {
        "kind": "run", "name": "single", "status": "FINISHED", "attempts": 1, "failures": 0,
        "iteration": 2, "metrics": {"loss": 2.0, "acc": 0.5}, "jobs": []}
    assert status["latest_checkpoint"] == f"{storage}/single/checkpoints/checkpoint_000001"

    results = json.loads(cli("results", "single", "--json", env=env).stdout)
    assert results["metrics"]["loss"] == {"last": 2.0, "last_iteration": 2, "min": 1.0,
                                          "min_iteration": 1, "max": 2.0, "max_iteration": 2}
    assert [(c["name"], c["iteration"], c["metrics"]["loss"], c["best"], c["latest"])
            for c in results["checkpoints"]] == [("checkpoint_000000", 1, 1.0, True, False),
                                                 ("checkpoint_000001", 2, 2.0, False, True)]
    assert results["score_attribute"] == "loss" and results["score_order"] == "min"
    assert [a["outcome"] for a in results["attempts"]] == ["FINISHED"]

    sweep = json.loads(cli("results", "sweep-demo", "--json", env=env).stdout)
    assert (sweep["kind"], sweep["metric"], sweep["mode"], sweep["best"]) == (
        "sweep", "loss", "min", "trial_00000")
    assert [(t["trial_id"], t["rank"], t["status"], t["config"], t["metrics"]["loss"])
            for t in sweep["trials"]] == [
        ("trial_00000", 1, "FINISHED", {"train_loop_config": {"lr": 0.1}}, 0.2),
        ("trial_00001", 2, "FINISHED", {"train_loop_config": {"lr": 0.2}}, 0.4)]
    assert json.loads(cli("status", "sweep-demo", "--json", env=env).stdout) == sweep
    trial = json.loads(cli("status", "sweep-demo/trial_00001", "--json", env=env).stdout)
    assert (trial["path"], trial["metrics"]) == (f"{storage}/sweep-demo/trial_00001",
                                                 {"loss": 0.4})

    listing = json.loads(cli("list", "--json", "--trials", env=env).stdout)
    assert listing["storage_path"] == storage
    assert sorted((e["name"], e["kind"], e["status"], e["iteration"], e["counts"])
                  for e in listing["entries"]) == [
        ("single", "run", "FINISHED", 2, None),
        ("sweep-demo", "sweep", "2 trials: 2 finished", None, {"FINISHED": 2}),
        ("sweep-demo/trial_00000", "trial", "FINISHED", 2, None),
        ("sweep-demo/trial_00001", "trial", "FINISHED", 2, None)]

    sites = json.loads(cli("sites", "--json", env=env).stdout)
    slurm = next(s for s in sites["sites"] if s["name"] == "generic-slurm")
    assert slurm["scheduler"] == "slurm" and slurm["error"] is None
    assert {"key": "storage_path", "value": storage,
            "from": "$HPCTRAIN_STORAGE_PATH"} in sites["defaults"]
    one = json.loads(cli("sites", "generic-slurm", "--json", env=env).stdout)
    assert one["file"] == slurm["file"] and one["text"] == open(slurm["file"]).read()


def test_json_with_follow_is_refused(demo):
    _, env = demo
    p = cli("status", "single", "--json", "--follow", env=env, check=False)
    assert p.returncode == 2
    assert "hpctrain: error: --json and --follow: expected one of them" in p.stderr


# -- shell completion -------------------------------------------------------------------------
def complete(words):
    """What bash offers after ``words`` (the last one being completed), from the script
    ``hpctrain completion bash`` prints, sourced in a real bash."""
    script = cli("completion", "bash").stdout
    line = " ".join(words)
    driver = (f"source /dev/stdin <<'EOF'\n{script}\nEOF\n"
              f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
              f"COMP_LINE={line!r}; COMP_POINT={len(line)}\n"
              "_shtab_hpctrain; printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    p = subprocess.run(["bash", "--norc", "-c", driver], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_bash_completion_completes_commands_options_and_files(tmp_path):
    assert sorted(complete(["hpctrain", "s"])) == ["schema", "sites", "status", "submit", "sweep"]
    assert complete(["hpctrain", "results", "--j"]) == ["--json"]
    assert complete(["hpctrain", "completion", ""]) == ["bash", "zsh", "tcsh"]
    (tmp_path / "job.toml").write_text("")
    assert complete(["hpctrain", "validate", f"{tmp_path}/jo"]) == [f"{tmp_path}/job.toml"]


def test_completion_without_shtab_says_how_to_install_it(tmp_path):
    (tmp_path / "shtab.py").write_text("raise ImportError('no shtab here')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path),
                                                       os.environ.get("PYTHONPATH", "")]))
    p = cli("completion", "bash", env=env, check=False)
    assert p.returncode == 2
    assert p.stderr.splitlines()[0] == ("hpctrain: error: hpctrain completion needs shtab "
                                        "(shell completion scripts from argparse).")
    assert "HINT: " in p.stderr and "pip install shtab" in p.stderr
    assert cli("--help", env=env).stdout.startswith("usage: hpctrain")  # the rest works


# -- exit codes ---------------------------------------------------------------------------------
def test_ctrl_c_on_a_local_run_exits_130_and_leaves_it_resumable(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    storage = str(tmp_path / "runs")
    job = job_file(tmp_path / "slow.toml", "slow", top='site = "local"\n')
    env = dict(os.environ, HPCTRAIN_STORAGE_PATH=storage)
    proc = subprocess.Popen([sys.executable, "-m", "hpctrain.cli", "run", job,
                             "--set", 'job.entrypoint="train.py:slow"'], cwd=str(tmp_path),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    result = os.path.join(storage, "slow", "result.json")
    wait_for(lambda: os.path.exists(result) and os.path.getsize(result) > 0, 90,
             "the first report", proc=proc)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the whole group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.rstrip().endswith(
        "hpctrain: interrupted; the run directory keeps its committed checkpoints")
    assert json.loads(cli("status", "slow", "--json", env=env).stdout)["status"] == "INTERRUPTED"


# -- every problem of a job file at once; validate checks what submit checks --------------------
def test_three_mistakes_in_a_job_file_are_reported_by_one_validate(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    job = tmp_path / "typos.toml"
    job.write_text(textwrap.dedent("""\
        [job]
        entrypoint = "train.py:hello"
        [scaling]
        num_worker = 2
        [run]
        nmae = "x"
        [checkpoint]
        num_to_keep = "three"
        """))
    p = cli("validate", str(job), check=False)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == [
        f"hpctrain: error: {job}: 3 problems:",
        f"- {job}: scaling.num_worker: unknown key in [scaling]",
        "  HINT: did you mean 'num_workers'?",
        f"- {job}: run.nmae: unknown key in [run]",
        "  HINT: did you mean 'name'?",
        f"- {job}: checkpoint.num_to_keep: expected an integer, got \"three\" (string)"]
    from hpctrain.errors import ConfigError
    from hpctrain.spec import load_job_spec

    with pytest.raises(ConfigError) as e:  # the API: one ConfigError holding each
        load_job_spec(str(job))
    assert [(err.file, err.message.split(":")[0]) for err in e.value.errors] == [
        (str(job), "scaling.num_worker"), (str(job), "run.nmae"),
        (str(job), "checkpoint.num_to_keep")]


def test_validate_refuses_a_multi_node_job_on_node_local_storage_as_submit_does(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    runs = tmp_path / "runs"  # (under /tmp: local to each node)
    job = str(tmp_path / "multi.toml")
    open(job, "w").write(textwrap.dedent(f"""\
        site = "generic-slurm"
        [job]
        entrypoint = "train.py:hello"
        [run]
        name = "multi"
        storage_path = "{runs}"
        [scaling]
        num_workers = 2
        num_nodes = 2
        [config]
        lr = 0.5
        """))
    validate = cli("validate", job, check=False)
    submit = cli("submit", "--dry-run", job, check=False)
    assert validate.returncode == submit.returncode == 2
    assert validate.stderr == submit.stderr
    assert validate.stderr.startswith(
        f"hpctrain: error: {job}: run.storage_path: a job on 2 nodes needs its run directory "
        f"on a filesystem every node sees, but {runs}/multi is not: it is under /tmp, which "
        "is local to each node\nHINT: ")
    assert not runs.exists()
