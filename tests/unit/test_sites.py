"""Site configs: lookup order, validation, layering (site < job file < --set), and the
per-rank GPU binding a site asks for."""
import os
import subprocess
import sys

import pytest

from hpctrain.common.registry import describe, scheduler_names
from hpctrain.cluster_env import gpu_binding
from hpctrain.errors import ConfigError
from hpctrain.launchers import launcher_for
from hpctrain.sites import PACKAGE_SITE_DIR, available_sites
from hpctrain.spec import load_site
from hpctrain.spec import load_job_spec
from helpers import SUPPORT

ENTRY = os.path.join(SUPPORT, "workloads.py") + ":deterministic"


def write(path, text):
    path.write_text(text)
    return str(path)


@pytest.fixture
def site_dir(tmp_path, monkeypatch):
    d = tmp_path / "sites"
    d.mkdir()
    monkeypatch.setenv("HPCTRAIN_SITE_PATH", str(d))
    return d


MYSITE = """
[site]
name = "mysite"
scheduler = "slurm"
description = "a test site"
[limits]
max_walltime = "12:00:00"
gpus_per_node = 4
[limits.partitions.cpu]
gpus_per_node = 0
[limits.partitions.gpu]
max_walltime = "06:00:00"
[scheduler]
partition = "gpu"
time = "01:00:00"
launcher_args = ["--cpu-bind=cores"]
[scheduler.directives]
gres = "gpu:4"
exclusive = true
[env]
NCCL_DEBUG = "WARN"
SITE_ONLY = "1"
[setup]
modules = ["pytorch/2.3"]
"""


def job(tmp_path, text=""):
    return write(tmp_path / "job.toml", f'site = "mysite"\n[job]\nentrypoint = "{ENTRY}"\n{text}')


def test_layers_site_then_job_then_overrides(tmp_path, site_dir):
    write(site_dir / "mysite.toml", MYSITE)
    path = job(tmp_path, '[scheduler]\ntime = "02:00:00"\n[scheduler.directives]\n'
                         'exclusive = ""\nmail-type = "END"\n[env]\nNCCL_DEBUG = "INFO"\n')
    spec = load_job_spec(path, ["env.NCCL_DEBUG=TRACE", "scheduler.directives.gres=gpu:2"])
    assert spec.site == "mysite" and spec.site_config.path == str(site_dir / "mysite.toml")
    assert spec.scheduler.kind == "slurm"            # from [site] scheduler
    assert spec.scheduler.partition == "gpu"         # site
    assert spec.scheduler.time == "02:00:00"         # job file beats site
    # directives merge key by key; "" removes the site's; the override wins
    assert spec.scheduler.directives == {"gres": "gpu:2", "exclusive": "", "mail-type": "END"}
    assert spec.env == {"NCCL_DEBUG": "TRACE", "SITE_ONLY": "1"}
    assert spec.setup.modules == ["pytorch/2.3"]
    assert spec.where("scheduler.partition") == str(site_dir / "mysite.toml")
    assert spec.where("scheduler.time") == path
    assert spec.where("env.NCCL_DEBUG") == "override 'env.NCCL_DEBUG=TRACE'"


def test_site_flag_beats_the_files_site_and_limits_name_their_origin(tmp_path, site_dir):
    write(site_dir / "mysite.toml", MYSITE)
    path = job(tmp_path, '[scheduler]\ntime = "08:00:00"\n')
    with pytest.raises(ConfigError) as e:
        load_job_spec(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: scheduler.time: walltime 08:00:00 (8h) is over the limit "
                          "of 06:00:00 (6h) for partition 'gpu'")
    assert "HINT:" in msg and "mysite.toml" in msg
    # the same job on the generic site has no limit
    spec = load_job_spec(path, site="generic-slurm")
    assert spec.site == "generic-slurm" and spec.scheduler.time == "08:00:00"


def test_gpu_on_cpu_partition_and_unknown_partition(tmp_path, site_dir):
    write(site_dir / "mysite.toml", MYSITE)
    path = job(tmp_path, "[scaling]\nuse_gpu = true\n")
    with pytest.raises(ConfigError, match="GPUs requested .* but partition 'cpu' has CPU-only"):
        load_job_spec(path, ["scheduler.partition=cpu"])
    with pytest.raises(ConfigError) as e:
        load_job_spec(path, ["scheduler.partition=gpus"])
    assert "has no partition 'gpus'" in str(e.value)
    assert "did you mean 'gpu'?" in str(e.value)
    with pytest.raises(ConfigError, match="8 GPUs per node, but nodes of site 'mysite' have 4"):
        load_job_spec(path, ["scaling.num_workers=8", "scaling.workers_per_node=8"])


def test_site_path_beats_the_package_and_lists_every_site(site_dir):
    write(site_dir / "generic-slurm.toml", '[site]\ndescription = "ours"\n')
    assert load_site("generic-slurm").description == "ours"
    sites = available_sites()
    assert sites["generic-slurm"] == str(site_dir / "generic-slurm.toml")
    assert sites["perlmutter"] == os.path.join(PACKAGE_SITE_DIR, "perlmutter.toml")
    assert {"generic-slurm", "generic-pbs", "perlmutter", "frontier", "polaris", "lumi",
            "juwels-booster", "jean-zay", "test-cluster"} <= set(sites)


def test_a_center_wide_install_is_found_between_the_users_path_and_the_package(
        tmp_path, site_dir, monkeypatch):
    """The search order docs/sites.md gives: $HPCTRAIN_SITE_PATH, then the center's
    directory (/etc/hpctrain/sites, here a temporary one), then the package."""
    import hpctrain.sites as sites

    center = tmp_path / "etc-hpctrain-sites"
    center.mkdir()
    monkeypatch.setattr(sites, "SYSTEM_SITE_DIR", str(center))
    write(center / "perlmutter.toml", '[site]\ndescription = "the center\'s own"\n')
    write(center / "ourcluster.toml", '[site]\ndescription = "only at the center"\n')
    assert sites.search_path() == [str(site_dir), str(center), PACKAGE_SITE_DIR]
    assert load_site("perlmutter").description == "the center's own"     # beats the package
    assert load_site("ourcluster").description == "only at the center"
    write(site_dir / "perlmutter.toml", '[site]\ndescription = "the user\'s own"\n')
    assert load_site("perlmutter").description == "the user's own"       # beats the center
    assert available_sites()["ourcluster"] == str(center / "ourcluster.toml")


BAD_SITES = [
    ("unknown-section", "[site]\n[job]\nentrypoint = 'x.py:f'\n", "job: a site config cannot set"),
    ("unknown-limit", "[limits]\nmax_gpus = 3\n", "limits.max_gpus: unknown limit"),
    ("bad-walltime", '[limits]\nmax_walltime = 60\n', "limits.max_walltime: walltime 60 is a bare"),
    ("wrong-name", '[site]\nname = "other"\n', "site.name: expected 'broken'"),
    # every registered batch scheduler is named (a new one registered is named too)
    ("bad-scheduler", '[site]\nscheduler = "condor"\n',
     f'site.scheduler: expected {describe(scheduler_names(batch_only=True))}, got \'condor\''),
    ("bad-key", "[scheduler]\nqueu = 'x'\n", "scheduler.queu: unknown key"),
]


@pytest.mark.parametrize("name,text,message", BAD_SITES, ids=[b[0] for b in BAD_SITES])
def test_a_broken_site_config_is_blamed_on_itself(site_dir, name, text, message):
    path = write(site_dir / "broken.toml", text)
    with pytest.raises(ConfigError) as e:
        load_site("broken")
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)


@pytest.mark.parametrize("name", ["../etc/passwd", "a;b", "", "a/b"])
def test_unsafe_site_names_are_refused(name):
    with pytest.raises(ConfigError, match="expected a site name"):
        load_site(name)


def test_sites_command_lists_and_shows(site_dir):
    out = subprocess.run([sys.executable, "-m", "hpctrain.cli", "sites"], capture_output=True,
                         text=True, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0 and "perlmutter" in out.stdout and "polaris" in out.stdout
    show = subprocess.run([sys.executable, "-m", "hpctrain.cli", "sites", "polaris"],
                          capture_output=True, text=True)
    assert show.returncode == 0 and 'filesystems = "home:eagle"' in show.stdout
    bad = subprocess.run([sys.executable, "-m", "hpctrain.cli", "sites", "nowhere"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown site 'nowhere'" in bad.stderr


@pytest.mark.parametrize("mode,local_rank,local_size,per,expected", [
    ("none", 0, 4, 1, None),
    ("local_rank", 0, 4, 1, "0"),
    ("local_rank", 3, 4, 1, "3"),
    ("local_rank_reverse", 0, 4, 1, "3"),     # Polaris: rank 0 ↔ GPU 3
    ("local_rank_reverse", 3, 4, 1, "0"),
    ("local_rank", 1, 2, 2, "2,3"),
    ("local_rank_reverse", 0, 2, 2, "3,2"),
    ("local_rank", 7, 8, 1, "7"),             # LUMI: ROCR_VISIBLE_DEVICES=$SLURM_LOCALID
])
def test_gpu_binding(mode, local_rank, local_size, per, expected):
    assert gpu_binding(mode, local_rank=local_rank, local_world_size=local_size,
                       gpus_per_worker=per) == expected


def test_launcher_for_spec(tmp_path, site_dir):
    write(site_dir / "mysite.toml", MYSITE)
    spec = load_job_spec(job(tmp_path, "[scaling]\nnum_nodes = 2\nworkers_per_node = 4\n"
                                       "cpus_per_worker = 8\nuse_gpu = true\n"))
    launcher = launcher_for(spec)
    from hpctrain.launchers.srun import srun_argv

    assert launcher.name == "srun"
    assert srun_argv(nodes=launcher.nodes, workers_per_node=launcher.workers_per_node,
                     cpus_per_worker=launcher.cpus_per_worker,
                     gpus_per_worker=launcher.gpus_per_worker, extra_args=launcher.extra_args,
                     command=["w"]) == [
        "srun", "--kill-on-bad-exit=1", "--nodes=2", "--ntasks=8", "--ntasks-per-node=4",
        "--cpus-per-task=8", "--gpus-per-task=1", "--cpu-bind=cores", "w"]


def test_restore_of_a_batch_run_keeps_its_scheduler_setup_and_env(tmp_path):
    from hpctrain.rundir.layout import RunDir
    from hpctrain.schedulers import BatchRequest
    from hpctrain.run import Run
    from hpctrain.torch import TorchTrainer
    path = write(tmp_path / "j.toml", f'''site = "test-cluster"
[job]
entrypoint = "{ENTRY}"
[run]
name = "rs"
storage_path = "{tmp_path}"
[setup]
commands = ["source /opt/venv/bin/activate"]
[env]
DATA_DIR = "/data/x"
''')
    Run.from_spec(load_job_spec(path)).prepare()
    with RunDir(tmp_path / "rs").update_state() as s:
        s["status"] = "FAILED"
    restored = TorchTrainer.restore(str(tmp_path / "rs"))
    run = Run.for_trainer(restored)
    spec = run.spec
    assert (spec.scheduler.kind, spec.site) == ("slurm", "test-cluster")
    assert run.path == str(tmp_path / "rs")
    script = BatchRequest(spec, run.path).materialize()
    assert "\nsource /opt/venv/bin/activate\n" in script
    assert '\nexport DATA_DIR="/data/x"\n' in script
    # scheduler="local" continues it here instead
    assert Run.for_trainer(TorchTrainer.restore(str(tmp_path / "rs"), scheduler="local")
                           ).spec.scheduler.kind == "local"


def test_submit_dry_run_prints_the_script_and_creates_nothing(tmp_path):
    from helpers import cli

    storage = tmp_path / "runs"
    path = write(tmp_path / "j.toml", f'''site = "generic-pbs"
[job]
entrypoint = "{ENTRY}"
[run]
name = "dry"
storage_path = "{storage}"
[scheduler]
queue = "workq"
time = "30m"
''')
    p = cli("submit", path, "--dry-run")
    assert p.stdout.startswith("#!/bin/bash\n# Rendered by hpctrain")
    assert "#PBS -l walltime=00:30:00\n" in p.stdout and "#PBS -q workq\n" in p.stdout
    assert "would write" in p.stderr and "qsub" in p.stderr
    assert not storage.exists()
    assert p.stdout == cli("render", path).stdout
