"""A tiny TCP group of the ranks of one attempt, for backends without a usable collective.

TensorFlow's and Horovod's collectives live inside the framework (a strategy, ``hvd``) and
are the user's: hpctrain must not call them from ``report()``. This group is the
bookkeeping channel they share instead: rank 0 listens at ``master_addr:master_port`` (the
rendezvous port every launcher already gives a job), every other rank connects once and
keeps the connection for the attempt. Two operations:

* :meth:`TcpGroup.allgather` — every rank's JSON value, in rank order, on every rank
  (the TensorFlow backend gathers each worker's ``host:port`` for ``TF_CONFIG`` with it);
* :meth:`TcpGroup.allreduce_max` — the element-wise max of a few integers
  (``report()``'s agreement, the :class:`~hpctrain._internal.context.Coordinator` API).

A rank that dies closes its socket: a rank waiting in one of these operations gets
:class:`ConnectionError` instead of hanging (a rank blocked inside the framework's own
collective is ended by the supervisor or by ``srun --kill-on-bad-exit``), and the
supervisor restarts the attempt.

Joining is checked: each rank sends a token (job id, attempt, run directory) and waits for
rank 0's acknowledgement, so a rank that reached another job's group (two jobs whose
derived ports collide on a shared node) or its own socket (a connect that raced rank 0's
listen in the ephemeral range) is refused and retries, and a connection that says nothing
is dropped after ``HELLO_TIMEOUT_S``.

Messages are a 4-byte big-endian length and UTF-8 JSON (at most ``MAX_MESSAGE`` bytes).
Single-rank groups never open a socket.
"""
from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any, Dict, List, Optional, Sequence

from hpctrain._internal.context import Coordinator

_LEN = struct.Struct(">I")
HELLO_TIMEOUT_S = 10.0
MAX_MESSAGE = 64 << 20


class TcpGroup(Coordinator):
    """All ``world_size`` ranks, rank 0 the hub at ``(addr, port)``.

    ``connect_timeout_s`` bounds how long a rank waits for rank 0 to listen (rank 0 may
    still be importing its framework); ``timeout_s`` bounds one operation (a slow rank
    writing a large checkpoint keeps the others waiting that long at most)."""

    def __init__(self, *, rank: int, world_size: int, addr: str, port: int,
                 timeout_s: float = 1800.0, connect_timeout_s: float = 300.0,
                 token: str = ""):
        self.rank = rank
        self.token = token
        self.world_size = world_size
        self.timeout_s = timeout_s
        self._peers: Dict[int, socket.socket] = {}
        self._hub: Optional[socket.socket] = None
        if world_size <= 1:
            return
        if rank == 0:
            self._serve(addr, port, connect_timeout_s)
        else:
            self._connect(addr, port, connect_timeout_s)

    # -- set-up ----------------------------------------------------------------------------
    def _serve(self, addr: str, port: int, connect_timeout_s: float) -> None:
        try:
            if socket.has_dualstack_ipv6():  # IPv4 and IPv6 peers alike
                server = socket.create_server(("", port), family=socket.AF_INET6,
                                              dualstack_ipv6=True, backlog=self.world_size)
            else:
                server = socket.create_server(("", port), backlog=self.world_size)
        except OSError as e:
            raise OSError(
                f"rank 0 cannot listen on port {port} for the other ranks ({e}).\n"
                "HINT: another process holds that port; set MASTER_PORT to a free port, or "
                "leave it unset so that hpctrain derives one per job") from e
        deadline = time.monotonic() + connect_timeout_s
        try:
            while len(self._peers) < self.world_size - 1:
                server.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    conn, _ = server.accept()
                except socket.timeout:
                    missing = sorted(set(range(1, self.world_size)) - set(self._peers))
                    raise TimeoutError(
                        f"ranks {missing} did not connect to rank 0 at port {port} within "
                        f"{connect_timeout_s:.0f} s") from None
                conn.settimeout(HELLO_TIMEOUT_S)
                try:
                    hello = _recv(conn)
                    peer = int(hello["rank"])
                    ok = (hello.get("token") == self.token and 0 < peer < self.world_size
                          and peer not in self._peers)
                except (OSError, ValueError, KeyError, TypeError):
                    ok = False
                if not ok:  # not one of ours (another job, a port scanner, a duplicate)
                    conn.close()
                    continue
                _send(conn, {"ok": True})
                conn.settimeout(self.timeout_s)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._peers[peer] = conn
        finally:
            server.close()

    def _connect(self, addr: str, port: int, connect_timeout_s: float) -> None:
        deadline = time.monotonic() + connect_timeout_s
        delay = 0.02
        while True:
            conn = None
            try:
                conn = socket.create_connection((addr, port), timeout=HELLO_TIMEOUT_S)
                if conn.getsockname() == conn.getpeername():
                    raise ConnectionError("connected to itself (rank 0 was not listening yet)")
                _send(conn, {"rank": self.rank, "token": self.token})
                if _recv(conn, who="rank 0").get("ok") is not True:
                    raise ConnectionError("rank 0 did not acknowledge")
                break
            except (OSError, ValueError) as e:
                if conn is not None:
                    conn.close()
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"rank {self.rank} could not join rank 0's group at {addr}:{port} "
                        f"within {connect_timeout_s:.0f} s ({e})") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        conn.settimeout(self.timeout_s)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._hub = conn

    # -- operations ------------------------------------------------------------------------
    def allgather(self, value: Any) -> List[Any]:
        """Every rank's ``value`` (JSON-serialisable), in rank order, on every rank."""
        if self.world_size <= 1:
            return [value]
        if self.rank != 0:
            assert self._hub is not None
            _send(self._hub, value)
            return _recv(self._hub, who="rank 0")
        values = [value] + [_recv(self._peers[r], who=f"rank {r}")
                            for r in range(1, self.world_size)]
        for r in range(1, self.world_size):
            _send(self._peers[r], values)
        return values

    def allreduce_max(self, values: Sequence[int]) -> List[int]:
        rows = self.allgather([int(v) for v in values])
        return [max(column) for column in zip(*rows)]

    def close(self) -> None:
        for conn in list(self._peers.values()) + ([self._hub] if self._hub else []):
            try:
                conn.close()
            except OSError:
                pass
        self._peers.clear()
        self._hub = None


def _resolve(host: str) -> str:
    try:
        return socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0]
    except OSError:
        return host


def _send(conn: socket.socket, value: Any) -> None:
    data = json.dumps(value).encode()
    conn.sendall(_LEN.pack(len(data)) + data)


def _recv(conn: socket.socket, who: str = "a rank") -> Any:
    (size,) = _LEN.unpack(_read(conn, _LEN.size, who))
    if size > MAX_MESSAGE:
        raise ValueError(f"{who} sent a {size}-byte message: not hpctrain's group protocol")
    return json.loads(_read(conn, size, who))


def _read(conn: socket.socket, n: int, who: str) -> bytes:
    chunks = []
    while n:
        try:
            chunk = conn.recv(min(n, 1 << 20))
        except socket.timeout:
            raise TimeoutError(f"{who} did not answer within {conn.gettimeout():.0f} s") from None
        if not chunk:
            raise ConnectionError(f"{who} left the group (its process ended or lost the "
                                  "connection)")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def group_token(info) -> str:
    """What every rank of one attempt of one run has in common (and no other job has)."""
    import os

    return "/".join((info.job_id, os.environ.get("HPCTRAIN_ATTEMPT", ""),
                     os.environ.get("HPCTRAIN_RUN_DIR", ""), str(info.world_size)))


def reserve_port(key: str, *, tries: int = 64) -> int:
    """A port that is free on this host now, outside the kernel's ephemeral range (so no
    outgoing connection is handed it before the framework binds it), chosen by hashing
    ``key`` (as :func:`~hpctrain.cluster_env.derive_port`) and probing the next
    candidates when one is taken; the kernel's choice as a last resort."""
    from hpctrain.cluster_env import derive_port

    for i in range(tries):
        port = derive_port(key, step=str(i))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]
