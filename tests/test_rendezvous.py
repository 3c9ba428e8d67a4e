"""hpctrain's TCP group (the agreement channel of the TensorFlow and Horovod backends),
with real sockets: results in rank order, a rank that dies is an error and not a hang,
and only the ranks of the same attempt can join."""
import socket
import struct
import threading

import pytest

from hpctrain._internal import rendezvous
from hpctrain._internal.rendezvous import TcpGroup, reserve_port


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
