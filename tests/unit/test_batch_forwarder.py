"""The batch step moved to ``hpctrain.cli.batch`` (issue 26); a job script rendered before
execs the old address, which forwards to it, so that a requeued old job still runs."""
import subprocess
import sys

OLD_ADDRESS = "hpctrain._internal.batch"  # the old address (hpctrain._internal maps it)


def batch_step(module, *args, stdin=""):
    return subprocess.run([sys.executable, "-m", module, *args], input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_a_job_script_rendered_before_the_move_still_runs_the_batch_step(tmp_path):
    new, old = batch_step("hpctrain.cli.batch", "--help"), batch_step(OLD_ADDRESS, "--help")
    assert new.returncode == old.returncode == 0, old.stderr
    assert "RUN_DIR" in old.stdout and old.stdout == new.stdout
    # a bad spec on stdin: the same exit status (2) and message from both addresses
    bad = ["[job]\nname = 3\n"]
    new = batch_step("hpctrain.cli.batch", str(tmp_path / "r"), stdin=bad[0])
    old = batch_step(OLD_ADDRESS, str(tmp_path / "r2"), stdin=bad[0])
    assert new.returncode == old.returncode == 2, (new.stderr, old.stderr)
    assert new.stderr.replace("/r:", ":").replace("/r/", "/") == \
        old.stderr.replace("/r2:", ":").replace("/r2/", "/")
