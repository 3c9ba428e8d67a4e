"""hpctrain's TCP group (the agreement channel of the TensorFlow and Horovod backends),
with real sockets: results in rank order, a rank that dies is an error and not a hang,
and only the ranks of the same attempt can join: the attacks of a co-user on the same
node (issue 25) are run for real on 127.0.0.1."""
import json
import logging
import os
import socket
import struct
import threading
import time
from types import SimpleNamespace

import pytest

from helpers import hpctrain_log_to

from hpctrain import rendezvous
from hpctrain.rendezvous import TcpGroup, group_token, reserve_port

SECRET_VAR = "HPCTRAIN_GROUP_SECRET"
SECRET = "5f0c2a9e4b7d61a38c2e90f1d4b6a7c3"  # what the supervisor would hand this attempt


@pytest.fixture(autouse=True)
def attempt_secret(monkeypatch, caplog):
    """The ranks of these tests are threads of one process: they share the attempt's
    secret through the environment, as the ranks a supervisor starts do."""
    monkeypatch.setenv(SECRET_VAR, SECRET)
    # (another test of this process may have let hpctrain's CLI configure its logger,
    # which then stops propagating)
    hpctrain_log_to(caplog, monkeypatch)


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def start_group(world, port, token="job/1/run", **kw):
    groups, errors = {}, {}

    def member(rank):
        try:
            groups[rank] = TcpGroup(rank=rank, world_size=world, addr="127.0.0.1", port=port,
                                    token=token, connect_timeout_s=20, **kw)
        except Exception as e:  # noqa: BLE001
            errors[rank] = e

    threads = [threading.Thread(target=member, args=(r,)) for r in reversed(range(world))]
    for t in threads:
        t.start()
    return groups, errors, threads


def run_all(groups, fn):
    out = {}
    threads = [threading.Thread(target=lambda r=r: out.__setitem__(r, fn(groups[r])))
               for r in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_broadcast_bytes_gives_rank_zeros_bytes_to_every_rank():
    """hpctrain.train.collective.broadcast_from_rank_zero over this group (the backends
    without a process group of hpctrain's: TensorFlow, Horovod, XGBoost, LightGBM)."""
    groups, errors, threads = start_group(3, free_port())
    for t in threads:
        t.join(30)
    assert not errors
    data = bytes(range(256)) * 5 + b"\0"
    out = run_all(groups, lambda g: g.broadcast_bytes(data if g.rank == 0 else None))
    assert out == {0: data, 1: data, 2: data}
    out = run_all(groups, lambda g: g.broadcast_bytes(b"" if g.rank == 0 else None))
    assert out == {0: b"", 1: b"", 2: b""}
    for g in groups.values():
        g.close()


def test_allgather_and_allreduce_max_in_rank_order():
    groups, errors, threads = start_group(3, free_port())
    for t in threads:
        t.join(30)
    assert not errors
    out = run_all(groups, lambda g: g.allgather({"r": g.rank}))
    assert all(v == [{"r": 0}, {"r": 1}, {"r": 2}] for v in out.values())
    out = run_all(groups, lambda g: g.allreduce_max([g.rank, 5 - g.rank, 0]))
    assert all(v == [2, 5, 0] for v in out.values())
    for g in groups.values():
        g.close()


def test_a_posted_allreduce_max_returns_at_once_and_its_result_later():
    """report()'s posted agreement over this group: rank 0 posts and goes on while rank 1
    has not posted yet; each later gets the max, then a blocking operation follows in
    order; a rank that left makes the posted one's wait raise."""
    groups, errors, threads = start_group(2, free_port())
    for t in threads:
        t.join(30)
    assert not errors
    started = time.monotonic()
    posted0 = groups[0].allreduce_max_async([1, 7])
    assert time.monotonic() - started < 0.5  # rank 1 has not posted: rank 0 did not wait
    posted1 = groups[1].allreduce_max_async([3, 2])
    assert posted0.wait() == [3, 7] and posted1.wait() == [3, 7] and posted0.wait() == [3, 7]
    out = run_all(groups, lambda g: g.allreduce_max([g.rank]))
    assert out == {0: [1], 1: [1]}
    groups[1].close()
    with pytest.raises(ConnectionError, match="rank 1 left the group"):
        groups[0].allreduce_max_async([0]).wait()
    groups[0].close()


def test_a_rank_that_dies_is_an_error_at_the_next_operation_not_a_hang():
    groups, errors, threads = start_group(2, free_port())
    for t in threads:
        t.join(30)
    groups[1].close()  # rank 1's process ended
    with pytest.raises(ConnectionError, match="rank 1 left the group"):
        groups[0].allgather(1)


def test_strangers_are_refused_and_the_group_still_forms(monkeypatch):
    monkeypatch.setattr(rendezvous, "HELLO_TIMEOUT_S", 0.3)
    port = free_port()
    # rank 0 listens; before the real rank 1 joins: a silent connection, garbage, and a
    # rank of another job (wrong token) that gives up after 1.5 s
    g0 = {}
    t0 = threading.Thread(target=lambda: g0.setdefault(0, TcpGroup(
        rank=0, world_size=2, addr="127.0.0.1", port=port, token="mine", connect_timeout_s=20)))
    t0.start()
    for _ in range(200):
        try:
            silent = socket.create_connection(("127.0.0.1", port), timeout=1)
            break
        except OSError:
            threading.Event().wait(0.02)
    garbage = socket.create_connection(("127.0.0.1", port), timeout=1)
    garbage.sendall(struct.pack(">I", 1 << 30))
    with pytest.raises(TimeoutError, match="could not join"):
        TcpGroup(rank=1, world_size=2, addr="127.0.0.1", port=port, token="other-job",
                 connect_timeout_s=1.5)
    g1 = TcpGroup(rank=1, world_size=2, addr="127.0.0.1", port=port, token="mine",
                  connect_timeout_s=20)
    t0.join(30)
    out = run_all({0: g0[0], 1: g1}, lambda g: g.allgather(g.rank))
    assert out == {0: [0, 1], 1: [0, 1]}
    silent.close()
    garbage.close()


def test_reserve_port_is_free_below_the_ephemeral_range_and_stable_per_key():
    a, b = reserve_port("job-1/0"), reserve_port("job-1/1")
    assert a == reserve_port("job-1/0") and a != b
    assert 20000 <= a < 32000 and 20000 <= b < 32000
    with socket.socket() as s:  # a taken candidate is skipped
        s.bind(("", a))
        s.listen()
        assert reserve_port("job-1/0") != a


# ---------------------------------------------------------------- the attacks of issue 25
def frame(value):
    """The group's wire format (4-byte length, JSON), as a stranger would write it."""
    data = json.dumps(value).encode()
    return struct.pack(">I", len(data)) + data


def read_message(conn):
    def exactly(n):
        buf = b""
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    (size,) = struct.unpack(">I", exactly(4))
    if size > 4096:
        raise ValueError("too long")
    return json.loads(exactly(size))


def public_facts(monkeypatch, world=2):
    """The group token as anyone on the node can rebuild it (squeue / scontrol show job)."""
    monkeypatch.setenv("HPCTRAIN_ATTEMPT", "1")
    monkeypatch.setenv("HPCTRAIN_RUN_DIR", "/scratch/alice/runs/r1")
    return group_token(SimpleNamespace(job_id="4242", world_size=world))


def serve_in_thread(world, port, token, **kw):
    box = {}

    def hub():
        try:
            box["group"] = TcpGroup(rank=0, world_size=world, addr="127.0.0.1", port=port,
                                    token=token, **kw)
        except Exception as e:  # noqa: BLE001
            box["error"] = e
        box["formed_at"] = time.monotonic()

    t = threading.Thread(target=hub, daemon=True)
    t.start()
    return t, box


def wait_listening(port, host="127.0.0.1"):
    """A connection to rank 0 once it listens (itself a stranger that says nothing)."""
    for _ in range(500):
        try:
            return socket.create_connection((host, port), timeout=1)
        except OSError:
            time.sleep(0.01)
    raise AssertionError(f"nothing listens on {host}:{port}")


def test_an_impostor_with_every_public_fact_but_not_the_secret_cannot_join_or_inject(
        monkeypatch, caplog):
    token = public_facts(monkeypatch)
    port = free_port()
    t0, hub = serve_in_thread(2, port, token, connect_timeout_s=20)
    wait_listening(port).close()

    # impostor 1: the hello of the old protocol (rank and the public token), then values
    old_style = socket.create_connection(("127.0.0.1", port), timeout=2)
    old_style.sendall(frame({"rank": 1, "token": token}))
    replies = []
    try:
        while True:
            replies.append(read_message(old_style))
            if replies[-1] == {"ok": True}:  # joined: inject
                old_style.sendall(frame([10 ** 9, 10 ** 9]))
                break
    except (OSError, ValueError):
        pass
    assert {"ok": True} not in replies

    # impostor 2: speaks today's protocol, with a secret guessed from the public facts
    for guess in (token, "4242" * 8, ""):
        with pytest.raises((PermissionError, RuntimeError)):
            TcpGroup(rank=1, world_size=2, addr="127.0.0.1", port=port, token=token,
                     secret=guess, connect_timeout_s=2)

    # the real rank 1 still joins, and the agreement is the ranks' own
    with caplog.at_level(logging.WARNING, logger="hpctrain.rendezvous"):
        g1 = TcpGroup(rank=1, world_size=2, addr="127.0.0.1", port=port, token=token,
                      connect_timeout_s=5)
        t0.join(10)
    assert "error" not in hub
    out = run_all({0: hub["group"], 1: g1}, lambda g: g.allreduce_max([g.rank + 1, 7]))
    assert out == {0: [2, 7], 1: [2, 7]}
    old_style.close()
    for g in (hub["group"], g1):
        g.close()


def test_a_rank_with_the_wrong_secret_gets_a_clear_error_at_once(monkeypatch, caplog):
    token = public_facts(monkeypatch)
    port = free_port()
    t0, hub = serve_in_thread(2, port, token, connect_timeout_s=20)
    wait_listening(port).close()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="hpctrain.rendezvous"):
        with pytest.raises(PermissionError, match=f"{SECRET_VAR} differs from rank 0's"):
            TcpGroup(rank=1, world_size=2, addr="127.0.0.1", port=port, token=token,
                     secret="0" * 32, connect_timeout_s=20)
    assert time.monotonic() - started < 5  # not after connect_timeout_s
    assert "does not know this attempt's group secret" in caplog.text
    g1 = TcpGroup(rank=1, world_size=2, addr="127.0.0.1", port=port, token=token,
                  connect_timeout_s=5)
    t0.join(10)
    assert run_all({0: hub["group"], 1: g1}, lambda g: g.allgather(g.rank)) == {
        0: [0, 1], 1: [0, 1]}


def test_a_rank_never_joins_an_impostor_hub_that_holds_the_port(monkeypatch):
    """Mutual: the impostor took rank 0's port first and says yes to everything."""
    token = public_facts(monkeypatch)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    got = []

    def impostor_hub():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.settimeout(0.3)
            try:
                try:  # the old protocol: the rank speaks first
                    got.append(read_message(conn))
                except TimeoutError:  # today's: a challenge first
                    conn.sendall(frame({"group": getattr(rendezvous, "PROTOCOL", ""),
                                        "nonce": "ab" * 16}))
                    got.append(read_message(conn))
                conn.sendall(frame({"ok": True, "proof": "00" * 32}))
                conn.settimeout(5)
                got.append(read_message(conn))  # a value handed over
            except (OSError, ValueError):
                pass
            conn.close()

    threading.Thread(target=impostor_hub, daemon=True).start()
    with pytest.raises(TimeoutError, match="does not know this attempt's group secret"):
        g = TcpGroup(rank=1, world_size=2, addr="127.0.0.1", port=port, token=token,
                     connect_timeout_s=1)
        g.allgather({"loss": 0.25})
    server.close()
    assert {"loss": 0.25} not in got


def test_silent_connections_do_not_delay_the_group(monkeypatch):
    """Strangers that connect and say nothing, more than rank 0 keeps pending at once,
    before the real rank connects: the group forms at once, HELLO_TIMEOUT_S (10 s)
    untouched."""
    token = public_facts(monkeypatch)
    port = free_port()
    t0, hub = serve_in_thread(2, port, token, connect_timeout_s=30)
    silent = [wait_listening(port)]
    silent += [socket.create_connection(("127.0.0.1", port), timeout=2)
               for _ in range(rendezvous.PENDING_MAX + 20 if hasattr(rendezvous, "PENDING_MAX")
                              else 84)]
    half = socket.create_connection(("127.0.0.1", port), timeout=2)
    half.sendall(b"\x00\x00")  # half a length prefix, then nothing
    silent.append(half)
    time.sleep(0.2)  # all of them reached rank 0 before the real rank 1
    started = time.monotonic()
    g1 = TcpGroup(rank=1, world_size=2, addr="127.0.0.1", port=port, token=token,
                  connect_timeout_s=5)
    t0.join(5)
    assert "group" in hub and hub["formed_at"] - started < 2.0 < rendezvous.HELLO_TIMEOUT_S
    assert run_all({0: hub["group"], 1: g1}, lambda g: g.allgather(g.rank)) == {
        0: [0, 1], 1: [0, 1]}
    for c in silent:
        c.close()


def _non_loopback_ipv4():
    """An IPv4 address of this host that is not loopback, or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: only picks the route's source
            ip = s.getsockname()[0]
            if not ip.startswith("127.") and ip != "0.0.0.0":
                return ip
    except OSError:
        pass
    try:
        for ip in socket.gethostbyname_ex(socket.gethostname())[2]:
            if not ip.startswith("127."):
                return ip
    except OSError:
        pass
    return None


def test_with_a_loopback_master_address_rank_0_listens_on_loopback_only(monkeypatch):
    token = public_facts(monkeypatch)
    port = free_port()
    t0, hub = serve_in_thread(2, port, token, connect_timeout_s=20)
    wait_listening(port).close()
    outside = _non_loopback_ipv4()
    if outside is not None:  # another host of the network would knock here
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((outside, port), timeout=2).close()
    g1 = TcpGroup(rank=1, world_size=2, addr="127.0.0.1", port=port, token=token,
                  connect_timeout_s=5)
    t0.join(10)
    assert hub["group"].listening_on == [("127.0.0.1", port)]
    g1.close()
    hub["group"].close()


def _is_mine(ip):
    with socket.socket() as s:
        try:
            s.bind((ip, 0))
            return True
        except OSError:
            return False


def test_where_rank_0_listens_for_each_kind_of_master_address(monkeypatch, caplog):
    plan = rendezvous.bind_plan
    assert [sa[0] for _, sa in plan("127.0.0.1")[0]] == ["127.0.0.1"]
    assert {sa[0] for _, sa in plan("localhost")[0]} <= {"127.0.0.1", "::1"}
    # a node's own name that resolves to a loopback address only on that node (Debian's
    # "127.0.1.1 <hostname>"): the other nodes reach it by its network address
    real = socket.getaddrinfo
    monkeypatch.setattr(rendezvous.socket, "getaddrinfo", lambda host, *a, **k: (
        [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.1.1", 0))] if host == "node001"
        else real(host, *a, **k)))
    addresses, why = plan("node001")
    assert addresses == [] and "/etc/hosts" in why
    monkeypatch.setattr(rendezvous.socket, "getaddrinfo", real)
    # an address that is not this host's (documentation ranges): every interface, with a
    # warning
    port = free_port()
    elsewhere = next(ip for ip in ("203.0.113.7", "198.51.100.7", "192.0.2.254")
                     if not _is_mine(ip))
    with caplog.at_level(logging.WARNING, logger="hpctrain.rendezvous"):
        servers = rendezvous._listen(elsewhere, port, backlog=4)
    try:
        assert [s.getsockname()[0] for s in servers] in (["::"], ["0.0.0.0"])
        assert "not an address of this host" in caplog.text
    finally:
        for s in servers:
            s.close()


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6")
def test_an_ipv6_loopback_master_address_works(monkeypatch):
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        pytest.skip(reason="no ::1 on this host")
    token = public_facts(monkeypatch)
    port = free_port()
    groups, errors = {}, {}

    def member(rank):
        try:
            groups[rank] = TcpGroup(rank=rank, world_size=2, addr="::1", port=port,
                                    token=token, connect_timeout_s=10)
        except Exception as e:  # noqa: BLE001
            errors[rank] = e

    threads = [threading.Thread(target=member, args=(r,)) for r in (1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert not errors and groups[0].listening_on[0][:2] == ("::1", port)
    assert run_all(groups, lambda g: g.allgather(g.rank)) == {0: [0, 1], 1: [0, 1]}


def test_without_the_secret_a_group_of_two_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.delenv(SECRET_VAR)
    for rank in (0, 1):
        with pytest.raises(RuntimeError, match=f"{SECRET_VAR} is not set"):
            TcpGroup(rank=rank, world_size=2, addr="127.0.0.1", port=free_port(),
                     token="t", connect_timeout_s=0.5)
    assert TcpGroup(rank=0, world_size=1, addr="127.0.0.1", port=1).allgather(3) == [3]


def test_the_supervisor_hands_each_attempt_a_fresh_secret_in_the_environment_only(tmp_path):
    from hpctrain import FailureConfig
    from hpctrain.allocation.supervisor import AttemptPlan, Supervisor
    from hpctrain.rundir.layout import RunDir
    from hpctrain.launchers.base import ExitRecord, Launcher, WorkerGroup

    class Failed(WorkerGroup):  # both ranks failed at once
        def wait_any_failure(self, timeout):
            return self.exits()

        def exits(self):
            return [ExitRecord(r, 1, time.time()) for r in range(2)]

        def terminate(self, grace=10.0):
            pass

    class Recording(Launcher):
        def __init__(self):
            self.launches = []

        def launch(self, *, command, env, num_workers, log_dir, on_line=None):
            self.launches.append((list(command), dict(env)))
            return Failed()

    from hpctrain.worker import entry

    assert entry.ENV_GROUP_SECRET == rendezvous.ENV_GROUP_SECRET == SECRET_VAR
    run = RunDir(tmp_path / "run")
    run.create()
    launcher = Recording()
    plan = AttemptPlan(2, "77", failure=FailureConfig(max_failures=1), kill_grace_s=0.1)
    Supervisor(run, plan, launcher=launcher).run_to_end()
    assert len(launcher.launches) == 2
    found = [env[SECRET_VAR] for _, env in launcher.launches]
    assert all(len(s) == 32 and int(s, 16) >= 0 for s in found) and found[0] != found[1]
    assert found[0] != SECRET  # not the driver's own environment's
    for (command, _), secret in zip(launcher.launches, found):
        assert not any(secret in arg for arg in command)
    for root, _, files in os.walk(run.path):  # state.json, logs, error.txt…
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
            assert not any(s.encode() in data for s in found), name


def test_module_doctests():
    import doctest

    assert doctest.testmod(rendezvous, optionflags=doctest.ELLIPSIS).failed == 0


def test_a_deeply_nested_hello_is_refused_like_garbage_and_the_group_still_forms(monkeypatch):
    """A hello of a few KiB of ``[`` made ``json.loads`` raise RecursionError, which
    escaped rank 0's accept loop: anyone who could reach the port ended the attempt."""
    token = public_facts(monkeypatch)
    port = free_port()
    t0, hub = serve_in_thread(2, port, token, connect_timeout_s=20)
    bomb = wait_listening(port)
    read_message(bomb)  # rank 0's nonce
    nested = b"[" * 2040 + b"]" * 2040  # within the hello's 4 KiB: parsed, not dropped
    bomb.sendall(struct.pack(">I", len(nested)) + nested)
    g1 = TcpGroup(rank=1, world_size=2, addr="127.0.0.1", port=port, token=token,
                  connect_timeout_s=10)
    t0.join(10)
    assert "error" not in hub, hub.get("error")
    out = run_all({0: hub["group"], 1: g1}, lambda g: g.allreduce_max([g.rank]))
    assert out == {0: [1], 1: [1]}
    bomb.close()
    for g in (hub["group"], g1):
        g.close()
