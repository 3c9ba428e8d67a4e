"""A run on this machine (`hpctrain run`, the local launcher) with a [container]: each of
its 2 ranks runs inside the test image through Charliecloud's ch-run
(scripts/container-image.sh), the supervisor on the host."""
import getpass
import json
import os
import sys

from helpers import cli, container_image, host_python_binds

PROBE = '''
import os
import hpctrain

def train_func(config):
    ctx = hpctrain.get_context()
    with open("/etc/hpctrain-test-image") as f:  # only the image has it
        image = f.read().strip()
    with open(os.path.join(ctx.get_run_dir(), f"rank-{ctx.get_world_rank()}.txt"), "w") as f:
        f.write(image)
    hpctrain.report({"rank": ctx.get_world_rank()})
'''


def test_local_ranks_run_in_the_container(request, tmp_path):
    storage = tmp_path / "runs"
    storage.mkdir()
    binds = host_python_binds()
    image = container_image(*binds, str(tmp_path))
    request.addfinalizer(lambda: os.removedirs(image + str(tmp_path)))
    (tmp_path / "probe.py").write_text(PROBE)
    job = tmp_path / "job.toml"
    job.write_text(
        '[job]\nentrypoint = "probe.py:train_func"\n[scaling]\nnum_workers = 2\n'
        f'[run]\nname = "boxed"\nstorage_path = {json.dumps(str(storage))}\nverbose = 0\n'
        f'[container]\nruntime = "charliecloud"\nimage = {json.dumps(image)}\n'
        f'python = {json.dumps(sys.executable)}\n'
        f'binds = {{{", ".join(f"{json.dumps(d)} = true" for d in binds)}, '
        f'{json.dumps(str(tmp_path))} = true}}\n')
    cli("run", str(job), env={**os.environ, "USER": getpass.getuser()})
    for rank in (0, 1):
        assert (storage / "boxed" / f"rank-{rank}.txt").read_text().startswith(
            "hpctrain test image")
