"""Everyday operations as a user meets them on the command line (issue 17): bad input
without tracebacks, user defaults, `hpctrain list`, the shared-filesystem rule, logging,
resuming a run with a changed spec. Real `hpctrain` processes, real files and pipes."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from helpers import ROOT, cli


TRAIN = textwrap.dedent('''
    import os, tempfile
    import hpctrain
    from hpctrain import Checkpoint

    def train(config):
        start = 0
        ckpt = hpctrain.get_checkpoint()
        if ckpt:
            with ckpt.as_directory() as d:
                start = int(open(os.path.join(d, "step")).read()) + 1
        for step in range(start, start + config.get("steps", 2)):
            if step == config.get("fail_at"):
                raise RuntimeError(f"failing at step {step} on purpose")
            marker = config.get("fail_once_marker")
            if marker and not os.path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError("failing once on purpose")
            with tempfile.TemporaryDirectory() as d:
                open(os.path.join(d, "step"), "w").write(str(step))
                hpctrain.report({"loss": 1.0 / (step + 1), "step": step},
                                checkpoint=Checkpoint.from_directory(d))
    ''')


def job(tmp_path, storage, name="r1", extra="", file="job.toml"):
    """A one-worker job file (torch backend on CPU) running ``TRAIN``."""
    (tmp_path / "train.py").write_text(TRAIN)
    path = tmp_path / file
    path.write_text(f'[job]\nentrypoint = "train.py:train"\n[run]\nname = "{name}"\n'
                    f'storage_path = "{storage}"\n[scaling]\nnum_workers = 1\n'
                    + textwrap.dedent(extra))
    return str(path)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The storage path of one real finished run, ``r1`` (two reports, two checkpoints),
    and of a finished sweep ``sw`` of two trials (1 and 2 reports)."""
    tmp = tmp_path_factory.mktemp("finished")
    storage = str(tmp / "runs")
    cli("run", job(tmp, storage))
    sweep = job(tmp, storage, name="sw", file="sweep.toml", extra=(
        '[sweep]\nmetric = "loss"\nmode = "min"\nmax_concurrent_trials = 1\n'
        '[sweep.param_space]\nsteps = {grid_search = [1, 2]}\n'))
    cli("sweep", sweep)
    return storage


# --------------------------------------------------------------------------- a. bad input
def test_a_file_as_storage_path_exits_2_with_a_hint(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory")
    p = cli("run", job(tmp_path, str(blocker / "runs")), check=False)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    assert (f"job.toml: run.storage_path: {blocker}/runs cannot hold run directories: "
            f"{blocker} is a file, not a directory") in p.stderr
    assert "HINT: give a directory you can write" in p.stderr
    assert blocker.read_text() == "not a directory"


def test_an_uncreatable_storage_path_exits_2_with_a_hint(tmp_path):
    # /proc refuses new directories even to root: an unwritable place on any machine
    p = cli("run", job(tmp_path, "/proc/hpctrain-runs"), check=False)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    assert "run.storage_path: cannot create /proc/hpctrain-runs: " in p.stderr
    assert "HINT: " in p.stderr


def test_the_default_storage_path_is_blamed_when_unusable(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    body = '[job]\nentrypoint = "train.py:train"\n[scaling]\nnum_workers = 1\n'
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "job.toml").write_text(body)
    env = dict(os.environ, HPCTRAIN_STORAGE_PATH=str(blocker))
    p = cli("run", str(tmp_path / "job.toml"), check=False, env=env)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "the default storage path ($HPCTRAIN_STORAGE_PATH" in p.stderr
    assert f"{blocker} is a file, not a directory" in p.stderr


def _into_closed_pipe(*args):
    """Run ``hpctrain ARGS`` with stdout a real pipe whose reading end is already closed
    (as after ``| head -1`` has read its line and exited)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "hpctrain.cli", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("command", [["results", "{run}"], ["status", "{run}"],
                                     ["list", "{storage}"], ["sites"]])
def test_a_closed_pipe_is_not_a_traceback(finished, command):
    args = [a.format(run=os.path.join(finished, "r1"), storage=finished) for a in command]
    p = _into_closed_pipe(*args)
    assert "BrokenPipeError" not in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "Exception ignored" not in p.stderr, p.stderr
    assert p.returncode == 1


def test_head_reads_the_first_line_quietly(finished):
    """The shell pipeline itself: `hpctrain results RUN | head -1`."""
    p = subprocess.run(f"{sys.executable} -m hpctrain.cli results {finished}/r1 | head -1",
                       shell=True, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stdout.splitlines()) == 1


def test_hpctrain_data_without_numpy_says_what_to_install():
    code = ("import sys, hpctrain\n"
            "sys.modules['numpy'] = None  # importing it now fails\n"
            "try:\n"
            "    import hpctrain.data\n"
            "except hpctrain.MissingFrameworkError as e:\n"
            "    print(e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "hpctrain.data needs NumPy, which is not importable here" in p.stdout
    assert f"HINT: {sys.executable} -m pip install numpy h5py" in p.stdout


def test_a_job_with_datasets_without_numpy_exits_2(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    jobfile = tmp_path / "job.toml"
    jobfile.write_text('[job]\nentrypoint = "train.py:train"\n'
                       '[datasets]\ntrain = "train.h5:x"\n')
    code = ("import sys\nsys.modules['numpy'] = None\n"
            "from hpctrain.cli.main import main\n"
            f"main(['validate', {str(jobfile)!r}])\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "hpctrain.data needs NumPy" in p.stderr
    assert f"HINT: {sys.executable} -m pip install numpy h5py" in p.stderr


def test_a_job_without_datasets_renders_without_numpy():
    """`hpctrain render` of a job file with no datasets (the Slurm getting-started page's
    examples/slurm_job.toml) under plain `pip install hpctrain`: NumPy is not needed."""
    code = ("import sys\nsys.modules['numpy'] = None\n"
            "from hpctrain.cli.main import main\n"
            f"main(['render', {os.path.join(ROOT, 'examples', 'slurm_job.toml')!r}])\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0 and "NumPy" not in p.stderr, p.stderr
    assert "#SBATCH --nodes=2" in p.stdout


# --------------------------------------------------------------------------- b. user defaults
def user_env(tmp_path, config: str = None, **variables):
    """The environment of a user whose ``~/.config/hpctrain/config.toml`` holds ``config``
    (through XDG_CONFIG_HOME, as the XDG spec says)."""
    xdg = tmp_path / "xdg"
    (xdg / "hpctrain").mkdir(parents=True, exist_ok=True)
    if config is not None:
        (xdg / "hpctrain" / "config.toml").write_text(textwrap.dedent(config))
    env = dict(os.environ, XDG_CONFIG_HOME=str(xdg))
    env.pop("HPCTRAIN_SITE", None)
    env.pop("HPCTRAIN_STORAGE_PATH", None)
    env.update(variables)
    return env, str(xdg / "hpctrain" / "config.toml")


def sbatch_lines(script):
    return [l[len("#SBATCH "):] for l in script.splitlines() if l.startswith("#SBATCH ")]


def test_user_config_gives_the_site_and_account_of_a_job_without_them(tmp_path):
    env, _ = user_env(tmp_path, 'site = "test-cluster"\naccount = "proj42"\n')
    jobfile = job(tmp_path, str(tmp_path / "runs"))
    lines = sbatch_lines(cli("render", jobfile, env=env).stdout)
    assert "--partition=debug" in lines          # test-cluster's partition
    assert "--account=proj42" in lines
    # the job file's own account wins; --set wins over both
    jobfile = job(tmp_path, str(tmp_path / "runs"), extra='[scheduler]\naccount = "mine"\n')
    assert "--account=mine" in sbatch_lines(cli("render", jobfile, env=env).stdout)
    out = cli("render", jobfile, "--set", "scheduler.account=cli", env=env).stdout
    assert "--account=cli" in sbatch_lines(out)


def test_site_precedence_cli_then_job_then_variable_then_user_config(tmp_path):
    env, _ = user_env(tmp_path, 'site = "generic-pbs"\n', HPCTRAIN_SITE="test-cluster")
    plain = job(tmp_path, str(tmp_path / "runs"))
    # $HPCTRAIN_SITE beats the user config: a Slurm script
    assert "#SBATCH --partition=debug" in cli("render", plain, env=env).stdout
    # the job file's site beats $HPCTRAIN_SITE
    pbs_job = job(tmp_path, str(tmp_path / "runs"), file="pbs.toml")
    open(pbs_job, "r+").write('site = "generic-pbs"\n' + open(pbs_job).read())
    assert "#PBS " in cli("render", pbs_job, env=env).stdout
    # --site beats everything
    assert "#SBATCH " in cli("render", pbs_job, "--site", "test-cluster", env=env).stdout
    # without the variable, the user config's site
    env.pop("HPCTRAIN_SITE")
    assert "#PBS " in cli("render", plain, env=env).stdout


def test_user_config_storage_path_and_the_variable_over_it(tmp_path):
    mine = tmp_path / "mine"
    env, _ = user_env(tmp_path, f'storage_path = "{mine}"\n')
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "job.toml").write_text('[job]\nentrypoint = "train.py:train"\n'
                                       '[run]\nname = "u1"\n')
    p = cli("run", str(tmp_path / "job.toml"), env=env)
    assert f"run FINISHED: {mine}/u1" in p.stdout
    assert os.path.isdir(mine / "u1" / "checkpoints" / "checkpoint_000001")
    # the run name resolves under it
    assert "FINISHED" in cli("results", "u1", env=env).stdout
    env["HPCTRAIN_STORAGE_PATH"] = str(tmp_path / "var")
    out = cli("validate", str(tmp_path / "job.toml"), env=env).stdout
    assert "storage_path =" not in out  # the variable is the default: nothing written in the spec
    assert f"{tmp_path}/var" in cli("sites", env=env).stdout


@pytest.mark.parametrize("config, expected", [
    pytest.param('acount = "p1"\n', ["acount: unknown key in the user config",
                                     "HINT: did you mean 'account'? valid keys: site, "
                                     "account, storage_path"], id="unknown-key"),
    pytest.param('account = 5\n', ["account: expected a non-empty string, got 5 (integer)",
                                   'HINT: e.g. account = "m1234"'], id="wrong-type"),
    pytest.param('site = "perlmuter"\n', ["site: unknown site 'perlmuter'",
                                          "did you mean 'perlmutter'?"], id="unknown-site"),
    pytest.param('storage_path = "runs"\n', ["storage_path: expected an absolute path"],
                 id="relative-storage"),
    pytest.param('site = "x\n', ["invalid TOML at line 1"], id="malformed"),
])
def test_a_bad_user_config_is_named_with_its_key(tmp_path, config, expected):
    env, path = user_env(tmp_path, config)
    for args in (["render", job(tmp_path, str(tmp_path / "runs"))], ["sites"]):
        p = cli(*args, env=env, check=False)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert f"hpctrain: error: {path}: " in p.stderr
        for text in expected:
            assert text in p.stderr


def test_sites_shows_where_each_default_comes_from(tmp_path):
    env, path = user_env(tmp_path, 'site = "perlmutter"\naccount = "m1234"\n',
                         HPCTRAIN_SITE="polaris")
    out = cli("sites", env=env).stdout
    rows = {l.split("│")[1].strip(): [c.strip() for c in l.split("│")[2:4]]
            for l in out.splitlines() if l.count("│") == 4}
    assert rows["site"] == ["polaris", "$HPCTRAIN_SITE"]
    assert rows["account"] == ["m1234", path]
    assert rows["storage_path"] == [os.path.expanduser("~/hpctrain_results"),
                                    "hpctrain's default"]
    assert f"user config: {path}\n" in out
    shown = cli("sites", "polaris", env=env)
    assert f"# account = 'm1234' from {path} (over this site's value)" in shown.stderr


# ------------------------------------------------------- c. the center: site and center config
def center_env(tmp_path, *, site_run="", center=None, user=None, **variables):
    """A center's install seen by one user: a site ``ctr`` (Slurm, ``[run]`` ``site_run``)
    on ``$HPCTRAIN_SITE_PATH``, the default site through ``$HPCTRAIN_SITE`` (an Lmod
    module's), ``center`` as the center config (``$HPCTRAIN_CENTER_CONFIG``), ``user`` as
    the user config, ``$SCRATCH`` a directory of this test."""
    sites = tmp_path / "sites"
    sites.mkdir(exist_ok=True)
    (sites / "ctr.toml").write_text('[site]\nname = "ctr"\nscheduler = "slurm"\n'
                                    '[scheduler]\npartition = "p"\n' + textwrap.dedent(site_run))
    env, _ = user_env(tmp_path, user, HPCTRAIN_SITE_PATH=str(sites), HPCTRAIN_SITE="ctr",
                      SCRATCH=str(tmp_path / "scratch"), **variables)
    center_file = tmp_path / "etc" / "config.toml"
    center_file.parent.mkdir(exist_ok=True)
    if center is not None:
        center_file.write_text(textwrap.dedent(center))
    env["HPCTRAIN_CENTER_CONFIG"] = str(center_file)
    return env, str(center_file), str(sites / "ctr.toml")


def defaults_table(out):
    """``{key: [value, from]}`` of ``hpctrain sites``' table of defaults."""
    return {l.split("│")[1].strip(): [c.strip() for c in l.split("│")[2:4]]
            for l in out.splitlines() if l.count("│") == 4}


def test_a_sites_storage_path_finds_runs_by_name(tmp_path):
    """The site's ``[run] storage_path = "$SCRATCH/..."`` (issue 31): the run goes there,
    and ``results``, ``status``, ``list`` find it by name; ``sites`` names the site file."""
    env, _, site_file = center_env(tmp_path, site_run='[run]\nstorage_path = '
                                                      '"$SCRATCH/hpctrain_runs"\n')
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "job.toml").write_text('[job]\nentrypoint = "train.py:train"\n'
                                       '[run]\nname = "s1"\n')
    runs = tmp_path / "scratch" / "hpctrain_runs"
    assert f"run FINISHED: {runs}/s1" in cli("run", str(tmp_path / "job.toml"), env=env).stdout
    assert "FINISHED" in cli("results", "s1", env=env).stdout
    assert "FINISHED" in cli("status", "s1", env=env).stdout
    assert [l.split("\t")[:2] for l in cli("list", env=env).stdout.splitlines()] == \
        [["s1", "run"]]
    assert defaults_table(cli("sites", env=env).stdout)["storage_path"] == [str(runs), site_file]
    # a variable set to elsewhere does not hide the site's runs from a lookup by name
    env["HPCTRAIN_STORAGE_PATH"] = str(tmp_path / "elsewhere")
    assert "FINISHED" in cli("results", "s1", env=env).stdout
    p = cli("results", "nope", env=env, check=False)
    assert p.returncode == 2 and f"or '{runs}/nope'" in p.stderr, p.stderr


def test_the_center_config_sits_below_the_site_and_the_user_config(tmp_path):
    center = 'account = "center-acct"\nstorage_path = "$SCRATCH/center_runs"\nsite = "ctr"\n'
    env, center_file, site_file = center_env(tmp_path, center=center)
    env.pop("HPCTRAIN_SITE")  # the center config's site, then
    jobfile = job(tmp_path, str(tmp_path / "runs"))
    lines = sbatch_lines(cli("render", jobfile, env=env).stdout)
    assert "--account=center-acct" in lines and "--partition=p" in lines
    rows = defaults_table(cli("sites", env=env).stdout)
    assert rows["site"] == ["ctr", center_file]
    assert rows["account"] == ["center-acct", center_file]
    assert rows["storage_path"] == [str(tmp_path / "scratch" / "center_runs"), center_file]
    # the site's account and storage path beat the center's; the user's account the site's
    (tmp_path / "b").mkdir()
    env, _, site_file = center_env(tmp_path / "b", center=center, site_run=(
        'account = "site-acct"\n[run]\nstorage_path = "/x/site_runs"\n'))
    assert "--account=site-acct" in sbatch_lines(cli("render", jobfile, env=env).stdout)
    assert defaults_table(cli("sites", env=env).stdout)["storage_path"] == \
        ["/x/site_runs", site_file]
    env, _, _ = center_env(tmp_path / "b", center=center, user='account = "mine"\n')
    assert "--account=mine" in sbatch_lines(cli("render", jobfile, env=env).stdout)


@pytest.mark.parametrize("center, mode, expected", [
    pytest.param('acount = "p1"\n', 0o644, ["acount: unknown key in the center config",
                                            "HINT: did you mean 'account'?"], id="unknown-key"),
    pytest.param('storage_path = 5\n', 0o644,
                 ["storage_path: expected a non-empty string, got 5 (integer)"], id="type"),
    pytest.param('account = "p1"\n', 0o666,
                 ["the center config is refused: refusing the center config",
                  "it is writable by group and other users (mode 0666)",
                  "HINT: every user's hpctrain reads it, so it must be owned by root"],
                 id="writable-by-others"),
])
def test_a_bad_or_unsafe_center_config_is_refused_naming_the_file(tmp_path, center, mode,
                                                                   expected):
    env, center_file, _ = center_env(tmp_path, center=center)
    os.chmod(center_file, mode)
    for args in (["render", job(tmp_path, str(tmp_path / "runs"))], ["sites"]):
        p = cli(*args, env=env, check=False)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert f"hpctrain: error: {center_file}: " in p.stderr
        for text in expected:
            assert text in p.stderr, p.stderr


# --------------------------------------------------------------------------- d. list, sweeps
def test_list_shows_runs_and_sweeps_with_status(finished):
    p = cli("list", finished)  # stdout is a pipe here: plain, tab-separated
    rows = [l.split("\t") for l in p.stdout.splitlines()]
    assert {r[0]: r[1:4] for r in rows} == {"r1": ["run", "FINISHED", "2"],
                                           "sw": ["sweep", "2 trials: 2 finished", "-"]}
    assert {r[0]: r[5] for r in rows} == {"r1": os.path.join(finished, "r1"),
                                          "sw": os.path.join(finished, "sw")}


def test_list_on_a_terminal_is_a_table(finished):
    """Under a pseudo-terminal (as in a shell), a rich table with a title."""
    import pty

    out = []
    pid, fd = pty.fork()
    if pid == 0:  # the child: hpctrain list, its stdout the terminal
        os.execvpe(sys.executable, [sys.executable, "-m", "hpctrain.cli", "list", finished],
                   dict(os.environ, COLUMNS="200"))
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out.append(chunk.decode(errors="replace"))
    os.waitpid(pid, 0)
    text = "".join(out)
    assert f"{finished}: 2 runs and sweeps" in text
    assert "FINISHED" in text and "2 trials: 2 finished" in text and "\t" not in text


def test_list_defaults_to_the_default_storage_path(finished, tmp_path):
    env = dict(os.environ, HPCTRAIN_STORAGE_PATH=finished)
    names = [l.split("\t")[0] for l in cli("list", env=env).stdout.splitlines()]
    assert sorted(names) == ["r1", "sw"]
    p = cli("list", str(tmp_path / "nothing"), check=False)
    assert p.returncode == 2 and "no such directory" in p.stderr and "HINT: " in p.stderr


def test_status_of_a_sweep_directory_lists_its_trials(finished):
    out = cli("status", os.path.join(finished, "sw")).stdout
    assert "sw  2 trials: 2 finished, 0 failed, 0 unfinished  ranked by loss (min)" in out
    assert "trial_00000" in out and "trial_00001" in out


def test_plot_of_a_sweep_directory_draws_every_trial(finished, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "loss.png"
    p = cli("plot", os.path.join(finished, "sw"), "--metric", "loss", "-o", str(out))
    assert "loss: trial_00000, trial_00001" in p.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- e. shared storage
TWO_NODES = 'num_nodes = 2\nworkers_per_node = 1\n[scheduler]\ntime = "00:05:00"\n'


def test_a_multi_node_job_with_storage_under_tmp_is_refused(tmp_path):
    storage = tmp_path / "runs"
    jobfile = job(tmp_path, str(storage), extra=TWO_NODES)
    for extra in ([], ["--dry-run"]):
        p = cli("submit", jobfile, "--site", "generic-slurm", *extra, check=False)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert (f"job.toml: run.storage_path: a job on 2 nodes needs its run directory on a "
                f"filesystem every node sees, but {storage}/r1 is not: it is under /tmp, "
                "which is local to each node") in p.stderr
        assert "HINT: put run.storage_path on a filesystem every node mounts" in p.stderr
        assert "list it in [limits] shared_paths of " in p.stderr
        assert not storage.exists()  # nothing created, nothing submitted
    # one node: the same storage is fine (the script is printed)
    p = cli("submit", jobfile, "--site", "generic-slurm", "--dry-run",
            "--set", "scaling.num_nodes=1")
    assert p.stdout.startswith("#!/bin/bash")


def test_a_site_declares_its_local_looking_paths_shared(tmp_path):
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "tmp-shared.toml").write_text(
        '[site]\nscheduler = "slurm"\n[limits]\nshared_paths = ["/tmp"]\n')
    env = dict(os.environ, HPCTRAIN_SITE_PATH=str(sites))
    jobfile = job(tmp_path, str(tmp_path / "runs"), extra=TWO_NODES)
    p = cli("submit", jobfile, "--site", "tmp-shared", "--dry-run", env=env)
    assert "#SBATCH --nodes=2" in p.stdout
    # the test cluster's site does so for every path (its nodes are one host)
    p = cli("submit", jobfile, "--site", "test-cluster", "--dry-run")
    assert "#SBATCH --nodes=2" in p.stdout
    (sites / "bad.toml").write_text('[site]\nscheduler = "slurm"\n[limits]\nshared_paths = "/tmp"\n')
    p = cli("submit", jobfile, "--site", "bad", "--dry-run", env=env, check=False)
    assert p.returncode == 2
    assert "bad.toml: limits.shared_paths: expected an array of absolute paths, got '/tmp'" \
        in p.stderr


def test_a_tmpfs_outside_tmp_is_found_by_its_filesystem_type(tmp_path):
    import uuid

    point = f"/srv/hpctrain-tmpfs-{uuid.uuid4().hex[:8]}"
    os.makedirs(point)
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", point],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            pytest.skip(reason=f"a tmpfs could not be mounted (needs root): "
                               f"{mounted.stderr.strip()}")
        try:
            jobfile = job(tmp_path, f"{point}/runs", extra=TWO_NODES)
            p = cli("submit", jobfile, "--site", "generic-slurm", "--dry-run", check=False)
            assert p.returncode == 2, p.stderr
            assert (f"but {point}/runs/r1 is not: it is on a tmpfs filesystem (mounted at "
                    f"{point}), which is local to each node") in p.stderr
        finally:
            subprocess.run(["umount", "-l", point])
    finally:
        os.rmdir(point)


# --------------------------------------------------------------------------- g. resume
def test_continuing_a_run_with_a_changed_scale_or_config_asks_for_force(tmp_path):
    storage = tmp_path / "runs"
    jobfile = job(tmp_path, str(storage), name="grow", extra="[config]\nsteps = 3\nfail_at = 1\n")
    first = cli("run", jobfile, check=False)
    assert first.returncode == 1  # failed at step 1, with step 0's checkpoint committed
    spec_before = (storage / "grow" / "spec.toml").read_text()
    # a routine change (more retries) continues without --force
    again = cli("run", jobfile, "--set", "failure.max_failures=0", check=False)
    assert again.returncode == 1 and "different spec" not in again.stderr, again.stderr
    # the config and the scale changed: refused, each change named, nothing touched
    p = cli("run", jobfile, "--set", "config.fail_at=-1", "--set", "scaling.num_workers=2",
            check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert ("run.name: the run 'grow' at " + str(storage / "grow") + " would continue from "
            "its checkpoints with a different spec (config.fail_at: 1 → -1; "
            "scaling.num_workers: 1 → 2)") in p.stderr
    assert "HINT: add --force to continue it so all the same" in p.stderr
    assert (storage / "grow" / "spec.toml").read_text() == spec_before
    # --force continues from the committed checkpoint: steps 1, 2, 3 follow step 0
    forced = cli("run", jobfile, "--set", "config.fail_at=-1", "--force")
    assert "run FINISHED" in forced.stdout
    rows = [json.loads(l) for l in open(storage / "grow" / "result.json")]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]


# --------------------------------------------------------------------------- f. logging
def test_the_cli_shows_hpctrains_notes_and_quiet_hides_them(tmp_path):
    extra = f'[failure]\nmax_failures = 1\n[config]\nfail_once_marker = "{tmp_path}/m1"\n'
    p = cli("run", job(tmp_path, str(tmp_path / "runs"), name="loud", extra=extra))
    assert "[hpctrain] rank 0 failed (" in p.stderr and "restarting the worker group" in p.stderr
    assert "(rank 0) " in p.stdout + p.stderr  # the ranks' output, echoed (verbose = 1)
    extra = extra.replace("m1", "m2")
    q = cli("run", "-q", job(tmp_path, str(tmp_path / "runs"), name="quiet", extra=extra))
    assert "restarting the worker group" not in q.stderr
    assert "(rank 0) " not in q.stdout + q.stderr and "iter " not in q.stdout + q.stderr
    assert "[hpctrain] run FINISHED" in q.stdout  # the outcome is still said


def test_as_a_library_hpctrain_logs_through_logging(tmp_path):
    """Quiet by default (INFO notes stay in the logger); the application turns them on."""
    (tmp_path / "train.py").write_text(TRAIN)
    script = textwrap.dedent(f"""
        import logging, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from train import train
        from hpctrain import FailureConfig, RunConfig, ScalingConfig
        from hpctrain.torch import TorchTrainer
        if sys.argv[1] == "configured":
            logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
        TorchTrainer(train, train_loop_config={{"fail_once_marker": sys.argv[2]}},
                     scaling_config=ScalingConfig(num_workers=1),
                     run_config=RunConfig(name=sys.argv[1], storage_path={str(tmp_path)!r},
                                          verbose=0,
                                          failure_config=FailureConfig(max_failures=1))).fit()
        """)
    (tmp_path / "lib.py").write_text(script)
    runs = {}
    for mode in ("default", "configured"):
        runs[mode] = subprocess.run([sys.executable, str(tmp_path / "lib.py"), mode,
                                     str(tmp_path / f"marker-{mode}")], capture_output=True,
                                    text=True, timeout=180)
        assert runs[mode].returncode == 0, runs[mode].stderr
    assert "restarting the worker group" not in runs["default"].stderr
    assert "hpctrain.supervisor INFO rank 0 failed (" in runs["configured"].stderr


def test_a_multi_node_sweep_with_storage_under_tmp_is_refused(tmp_path):
    storage = tmp_path / "runs"
    jobfile = job(tmp_path, str(storage), name="sw2", extra=TWO_NODES + (
        '[sweep]\nmetric = "loss"\nmode = "min"\n'
        '[sweep.param_space]\nsteps = {grid_search = [1, 2]}\n'))
    p = cli("sweep", jobfile, "--site", "generic-slurm", check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"but {storage}/sw2 is not: it is under /tmp" in p.stderr
    assert not storage.exists()
