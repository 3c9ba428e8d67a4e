"""A shared machine, for real: the attacks of a hostile co-user, run as three uids.

``scripts/test-users.sh`` (called by the test command) makes them: ``hpct-alice`` the
user, ``hpct-bob`` a member of alice's project group ``hpct-proj``, ``hpct-eve`` an
outsider. Each attack below made alice's job run the attacker's code (or read alice's
run) on the code before issue 25; each asserts here that it is refused, with the message
alice sees, and that the attacker's code never ran as alice: the attacker's "evidence"
file is what their code would write (``id -u``), so its absence is the outcome.

Needs root (to run processes as those users); skipped otherwise.
"""
from __future__ import annotations

import grp
import json
import os
import pwd
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from multiuser import NEEDS_USERS, have_users, machine  # noqa: F401 - machine: a fixture

pytestmark = pytest.mark.skipif(not have_users(), reason=NEEDS_USERS)


def uid(user: str) -> int:
    return pwd.getpwnam(user).pw_uid


# alice's training: its first attempt fails (the run stays resumable), the next one
# reports and records which uid ran it
ALICE_FIRST = """
import os, sys, hpctrain
from hpctrain import RunConfig, ScalingConfig
from hpctrain.torch import TorchTrainer

def train_func(config):
    first = os.path.join(config["out"], "first-attempt")
    if not os.path.exists(first):
        open(first, "w").write(str(os.getuid()))
        raise RuntimeError("the first attempt fails, as planned")
    open(os.path.join(config["out"], "ran-as"), "w").write(str(os.getuid()))
    hpctrain.report({"done": 1})

storage, name, share = sys.argv[1], sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else None)
out = os.path.join(os.environ["HOME"], "out")
os.makedirs(out, exist_ok=True)
try:
    TorchTrainer(train_func, train_loop_config={"out": out},
                 scaling_config=ScalingConfig(num_workers=1),
                 run_config=RunConfig(name=name, storage_path=storage, verbose=0,
                                      **({"share": share} if share else {}))).fit()
    print("FIT FINISHED")
except hpctrain.TrainingFailedError:
    print("FIRST ATTEMPT FAILED")
except Exception as e:
    print("REFUSED:", type(e).__name__, e)
"""

ALICE_RESTORE = """
import sys
from hpctrain.torch import TorchTrainer
try:
    result = TorchTrainer.restore(sys.argv[1]).fit()
    print("RESTORED", result.metrics["done"])
except Exception as e:
    print("REFUSED:", type(e).__name__, e)
"""

# an attacker's pickle: unpickling it runs `id -u > $EVIDENCE/<who>`
EVIL_PICKLE = """
import os, pickle, sys
class Evil:
    def __reduce__(self):
        return (os.system, (f"id -u > {os.environ['EVIDENCE']}/{sys.argv[2]}",))
target = sys.argv[1]
tmp = os.path.join(os.path.dirname(target), "mine.pkl")
try:
    with open(tmp, "wb") as f:
        f.write(pickle.dumps(Evil()))
    os.rename(tmp, target)
    print("SWAPPED")
except OSError as e:
    print("DENIED:", type(e).__name__, e)
"""


def alice_first_run(machine, storage, name, *, umask, share=None):
    args = ["-c", textwrap.dedent(ALICE_FIRST), storage, name] + ([share] if share else [])
    p = machine.run("hpct-alice", "", args=args, umask=umask)
    assert "FIRST ATTEMPT FAILED" in p.stdout, p.stdout + p.stderr
    return os.path.join(storage, name)


def test_a_group_member_cannot_swap_the_payload_in_a_setgid_project_directory(machine):
    """The group member renamed their own pickle over ``payload.pkl`` (umask 002, setgid
    project directory) and alice's resume unpickled it. Now the run directory is 0700:
    bob cannot reach it; and a run directory that was left group-writable (by an older
    hpctrain, or by hand) is refused before its payload is read."""
    storage = os.path.join(machine.proj, "runs")
    run = alice_first_run(machine, storage, "r1", umask=0o002)
    assert stat.S_IMODE(os.stat(run).st_mode) == 0o700  # umask 002, setgid parent
    payload = os.path.join(run, ".hpctrain", "payload.pkl")
    bob = machine.run("hpct-bob", "", args=["-c", textwrap.dedent(EVIL_PICKLE), payload, "bob"])
    assert bob.stdout.startswith("DENIED: PermissionError"), bob.stdout + bob.stderr

    # the same attack on a run directory its owner left group-writable (as older
    # hpctrain did in a setgid project directory under umask 002)
    for d, _dirs, _files in os.walk(run):
        os.chown(d, -1, grp.getgrnam("hpct-proj").gr_gid)
        os.chmod(d, 0o2775)
    bob = machine.run("hpct-bob", "", args=["-c", textwrap.dedent(EVIL_PICKLE), payload, "bob"])
    assert bob.stdout.startswith("SWAPPED"), bob.stdout + bob.stderr
    alice = machine.run("hpct-alice", ALICE_RESTORE, args=["-c", textwrap.dedent(ALICE_RESTORE),
                                                           run])
    assert alice.stdout.startswith("REFUSED: UnsafePathError refusing"), alice.stdout + alice.stderr
    assert "writable by group" in alice.stdout and run in alice.stdout
    assert "HINT:" in alice.stdout
    assert machine.evidence_files() == []  # bob's code never ran as alice

    # once alice takes the group's write away, her own code continues her run
    for d, _dirs, _files in os.walk(run):
        os.chmod(d, 0o700)
    os.unlink(payload)  # bob's file: alice's resume has no payload of its own now
    alice = machine.run("hpct-alice", "", args=["-c", textwrap.dedent(ALICE_RESTORE), run])
    assert alice.stdout.startswith("REFUSED: RunNotFoundError"), alice.stdout + alice.stderr
    assert machine.evidence_files() == []


def test_an_outsiders_precreated_run_directory_is_refused_before_anything_is_written(machine):
    """The outsider made ``<shared>/runs/<name>/.hpctrain`` 0777 before alice's run
    (umask 077): alice's run used it and unpickled what eve put there. Now alice's
    ``fit()`` is refused, naming the directory and its owner, and writes nothing in it."""
    storage = os.path.join(machine.scratch, "runs")
    eve = machine.run("hpct-eve", f"""
        import os
        os.makedirs({storage!r}, exist_ok=True); os.chmod({storage!r}, 0o1777)
        d = os.path.join({storage!r}, "r2", ".hpctrain")
        os.makedirs(d); os.chmod(d, 0o777); os.chmod(os.path.dirname(d), 0o777)
        print("PLANTED")
    """)
    assert "PLANTED" in eve.stdout, eve.stderr
    args = ["-c", textwrap.dedent(ALICE_FIRST), storage, "r2"]
    alice = machine.run("hpct-alice", "", args=args, umask=0o077)
    run = os.path.join(storage, "r2")
    assert f"REFUSED: UnsafePathError refusing run directory {run}: it is owned by hpct-eve, " \
           "not by you (hpct-alice)" in alice.stdout, alice.stdout + alice.stderr
    assert os.listdir(run) == [".hpctrain"] and os.listdir(os.path.join(run, ".hpctrain")) == []
    assert not os.path.exists(os.path.join(machine.base, "home-hpct-alice", "out",
                                           "first-attempt"))  # nothing of alice's ran


BATCH_STEP = """
import subprocess, sys
run = sys.argv[1]
with open(run + "/spec.toml") as spec:
    p = subprocess.run([sys.executable, "-m", "hpctrain.cli.batch", run], stdin=spec,
                       capture_output=True, text=True)
print("EXIT", p.returncode)
print(p.stdout + p.stderr)
"""

BOB_EDITS_DRIVER_JSON = """
import json, os, sys
path, mine = sys.argv[1], os.path.join(os.environ["HOME"], "lib")
os.makedirs(mine, exist_ok=True); os.chmod(mine, 0o755); os.chmod(os.environ["HOME"], 0o755)
with open(os.path.join(mine, "sitecustomize.py"), "w") as f:
    f.write("import os; os.system('id -u > ' + os.environ.get('EVIDENCE', '/tmp') + '/bob')\\n")
try:
    with open(path, "r+") as f:
        data = json.load(f)
        data["pythonpath"] = mine + os.pathsep + data["pythonpath"]
        f.seek(0); f.truncate(); json.dump(data, f)
    print("EDITED")
except OSError as e:
    print("DENIED:", type(e).__name__, e)
"""


def test_a_group_member_cannot_put_their_code_on_the_ranks_path_through_driver_json(machine):
    """``driver.json``'s ``pythonpath`` goes first on every rank's PYTHONPATH; it was
    0664 under umask 002, editable in place by the group. Now it is 0600 (bob is denied
    even in a run shared with the group), and a ``driver.json`` made group-writable is
    refused by the batch step, which then runs nothing."""
    storage = os.path.join(machine.proj, "runs")
    run = alice_first_run(machine, storage, "r3", umask=0o002, share="group")
    assert stat.S_IMODE(os.stat(run).st_mode) == 0o2750  # shared with the group: read only
    driver = os.path.join(run, ".hpctrain", "driver.json")
    assert stat.S_IMODE(os.stat(driver).st_mode) == 0o600
    bob = machine.run("hpct-bob", "", args=["-c", textwrap.dedent(BOB_EDITS_DRIVER_JSON), driver])
    assert bob.stdout.startswith("DENIED: PermissionError"), bob.stdout + bob.stderr

    os.chmod(driver, 0o660)  # as older hpctrain left it under umask 002
    bob = machine.run("hpct-bob", "", args=["-c", textwrap.dedent(BOB_EDITS_DRIVER_JSON), driver])
    assert bob.stdout.startswith("EDITED"), bob.stdout + bob.stderr
    alice = machine.run("hpct-alice", "", args=["-c", textwrap.dedent(BATCH_STEP), run])
    assert alice.stdout.startswith("EXIT 2"), alice.stdout
    assert f"refusing the driver's path list {driver}: it is writable by group" in alice.stdout
    assert machine.evidence_files() == []
    ran = os.path.join(machine.base, "home-hpct-alice", "out", "ran-as")
    assert not os.path.exists(ran)  # the job ran nothing


def test_result_from_path_of_someone_elses_run_runs_none_of_their_code(machine):
    """``Result.from_path(dir).config`` unpickled ``payload.pkl`` of any directory: a
    world-readable run of eve's ran eve's code as alice. Now ``config`` comes from
    ``spec.toml`` as data."""
    storage = os.path.join(machine.scratch, "eve-runs")
    eve = machine.run("hpct-eve", f"""
        import os, pickle, json
        class Evil:
            def __reduce__(self):
                return (os.system, ("id -u > " + os.environ["EVIDENCE"] + "/eve",))
        run = os.path.join({storage!r}, "public")
        os.makedirs(os.path.join(run, ".hpctrain"))
        for d in ({storage!r}, run, os.path.join(run, ".hpctrain")):
            os.chmod(d, 0o755)
        open(os.path.join(run, ".hpctrain", "payload.pkl"), "wb").write(pickle.dumps(Evil()))
        open(os.path.join(run, "spec.toml"), "w").write('[config]\\nlr = 0.1\\n')
        json.dump({{"status": "FINISHED", "attempts": []}}, open(os.path.join(run, "state.json"), "w"))
        for f in ("spec.toml", "state.json", ".hpctrain/payload.pkl"):
            os.chmod(os.path.join(run, f), 0o644)
        print("PUBLISHED")
    """)
    assert "PUBLISHED" in eve.stdout, eve.stderr
    alice = machine.run("hpct-alice", f"""
        from hpctrain import Result
        r = Result.from_path({os.path.join(storage, "public")!r})
        print("CONFIG", r.config)
    """)
    assert "CONFIG {'lr': 0.1}" in alice.stdout, alice.stdout + alice.stderr  # as data
    assert machine.evidence_files() == []
    # alice's own run's config still reads back (from its spec.toml)
    own = alice_first_run(machine, os.path.join(machine.proj, "runs"), "r4", umask=0o077)
    alice = machine.run("hpct-alice", f"""
        from hpctrain import Result
        print("CONFIG", Result.from_path({own!r}).config)
    """)
    assert "CONFIG {'out': " in alice.stdout, alice.stdout + alice.stderr


def test_a_fifo_planted_as_a_workers_exception_does_not_hang_the_driver(machine):
    """A FIFO planted as ``error.rank-0.pickle`` hung whoever read the failed run's
    Result (opened before the file type was checked, without O_NONBLOCK). Now it is
    refused at once: the Result still says what failed."""
    storage = os.path.join(machine.proj, "runs")
    run = alice_first_run(machine, storage, "r5", umask=0o002)
    state = json.load(open(os.path.join(run, "state.json")))
    attempt = state["attempts"][-1]["attempt"]
    pickle_path = os.path.join(run, ".hpctrain", f"attempt-{attempt:03d}", "error.rank-0.pickle")
    gid = grp.getgrnam("hpct-proj").gr_gid
    os.chown(os.path.dirname(pickle_path), -1, gid)
    os.chmod(os.path.dirname(pickle_path), 0o2770)  # a directory bob can reach and write
    for d in (run, os.path.dirname(os.path.dirname(pickle_path))):
        os.chown(d, -1, gid)
        os.chmod(d, 0o2750)
    bob = machine.run("hpct-bob", f"""
        import os
        p = {pickle_path!r}
        os.rename(p, p + ".old") if os.path.exists(p) else None
        os.mkfifo(p, 0o666); print("PLANTED")
    """)
    assert "PLANTED" in bob.stdout, bob.stdout + bob.stderr
    began = time.monotonic()
    alice = machine.run("hpct-alice", f"""
        from hpctrain import Result
        r = Result.from_path({run!r})
        print("STATUS", r.status, type(r.error).__name__)
    """, timeout=60)
    assert "STATUS FAILED WorkerGroupError" in alice.stdout, alice.stdout + alice.stderr
    assert time.monotonic() - began < 60


def _first_line(proc: subprocess.Popen) -> str:
    """The process's first line of output, read from the pipe byte by byte: a buffered
    readline() can take the next line along too (on a loaded machine it is often there
    already), and communicate(timeout=...), which reads the pipe itself, would miss it."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(proc.stdout.fileno(), 1)
        if not byte:
            break
        line += byte
    return line.decode()


ALICE_GROUP = """
import os, sys, json
from hpctrain.rendezvous import TcpGroup
rank, port, token = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
print("PID", os.getpid(), flush=True)
g = TcpGroup(rank=rank, world_size=2, addr="127.0.0.1", port=port, token=token,
             connect_timeout_s=60)
print("RESULT", json.dumps(g.allreduce_max([rank + 1, 7])), flush=True)
g.close()
"""

EVE_JOINS = """
import os, socket, sys, time
from hpctrain.rendezvous import TcpGroup
port, token, pid = int(sys.argv[1]), sys.argv[2], sys.argv[3]
try:
    open(f"/proc/{pid}/environ", "rb").read()
    print("READ ALICE'S ENVIRONMENT")
except OSError as e:
    print("ENVIRONMENT DENIED:", type(e).__name__)
silent = socket.create_connection(("127.0.0.1", port), timeout=5)  # says nothing
for guess in (token, "0" * 32):
    try:
        g = TcpGroup(rank=1, world_size=2, addr="127.0.0.1", port=port, token=token,
                     secret=guess, connect_timeout_s=3)
        g.allreduce_max([10 ** 9, 10 ** 9])
        print("JOINED")
    except Exception as e:
        print("REFUSED:", type(e).__name__)
print("SILENT STILL OPEN", flush=True)
time.sleep(30)
"""


def test_an_outsider_on_the_node_can_neither_join_alices_group_nor_stall_it(machine):
    """The coordination group's token was made of public facts (job id, attempt, run
    directory, world size), so an impostor joined as rank 1 and injected values, and a
    connection that sent nothing stalled the accept loop. Now eve, who knows those facts
    but cannot read alice's environment (where the secret is), is refused, and her silent
    connection does not delay alice's real rank 1."""
    import secrets
    import socket as socketlib

    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = f"4242/1/{machine.base}/runs/r6/2"  # what squeue and scontrol show
    secret = secrets.token_hex(16)
    pw = pwd.getpwnam("hpct-alice")

    def alice(rank):
        env = {"PATH": os.environ["PATH"], "HPCTRAIN_GROUP_SECRET": secret,
               "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        return subprocess.Popen([sys.executable, "-c", ALICE_GROUP, str(rank), str(port), token],
                                user=pw.pw_uid, group=pw.pw_gid, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    hub = alice(0)
    pid = _first_line(hub).split()[1]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until rank 0 listens
        try:
            socketlib.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    eve_pw = pwd.getpwnam("hpct-eve")
    eve = subprocess.Popen([sys.executable, "-c", EVE_JOINS, str(port), token, pid],
                           user=eve_pw.pw_uid, group=eve_pw.pw_gid, text=True,
                           env={"PATH": os.environ["PATH"],
                                "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        seen = []
        while not seen or not seen[-1].startswith("SILENT STILL OPEN"):
            line = eve.stdout.readline()
            assert line, "".join(seen)
            seen.append(line)
        assert "ENVIRONMENT DENIED: PermissionError\n" in seen, seen
        assert "JOINED\n" not in seen and seen.count("REFUSED: GroupAuthError\n") + \
            seen.count("REFUSED: TimeoutError\n") == 2, seen
        rank1 = alice(1)  # while eve's silent connection is still open
        _first_line(rank1)  # its PID line: imports done, it joins now
        began = time.monotonic()
        out1, _ = rank1.communicate(timeout=60)
        out0, _ = hub.communicate(timeout=60)
        # (the old accept loop waited 10 s on a silent connection)
        assert time.monotonic() - began < 5, "eve's silent connection delayed the group"
        assert 'RESULT [2, 7]' in out0 and 'RESULT [2, 7]' in out1, out0 + out1
    finally:
        for p in (eve, hub):
            if p.poll() is None:
                p.kill()
