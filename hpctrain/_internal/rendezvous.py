"""A tiny TCP group of the ranks of one attempt, for backends without a usable collective.

TensorFlow's and Horovod's collectives live inside the framework (a strategy, ``hvd``) and
are the user's: hpctrain must not call them from ``report()``. This group is the
bookkeeping channel they share instead: rank 0 listens at ``master_addr:master_port`` (the
rendezvous port every launcher already gives a job), every other rank connects once and
keeps the connection for the attempt. Two operations:

* :meth:`TcpGroup.allgather` — every rank's JSON value, in rank order, on every rank
  (the TensorFlow backend gathers each worker's ``host:port`` for ``TF_CONFIG`` with it);
* :meth:`TcpGroup.allreduce_max` — the element-wise max of a few integers
  (``report()``'s agreement, the :class:`~hpctrain._internal.session.Coordinator` API).

A rank that dies closes its socket: the others get :class:`ConnectionError` at their next
operation instead of hanging, and the supervisor restarts the attempt.

Messages are a 4-byte big-endian length and UTF-8 JSON. Single-rank groups never open a
socket.
"""
from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any, Dict, List, Optional, Sequence

from .session import Coordinator

_LEN = struct.Struct(">I")


class TcpGroup(Coordinator):
    """All ``world_size`` ranks, rank 0 the hub at ``(addr, port)``.

    ``connect_timeout_s`` bounds how long a rank waits for rank 0 to listen (rank 0 may
    still be importing its framework); ``timeout_s`` bounds one operation (a slow rank
    writing a large checkpoint keeps the others waiting that long at most)."""

    def __init__(self, *, rank: int, world_size: int, addr: str, port: int,
                 timeout_s: float = 1800.0, connect_timeout_s: float = 300.0):
        self.rank = rank
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
        family = socket.AF_INET6 if ":" in _resolve(addr) else socket.AF_INET
        try:
            server = socket.create_server(("", port), family=family, backlog=self.world_size)
        except OSError as e:
            raise OSError(
                f"rank 0 cannot listen on port {port} for the other ranks ({e}).\n"
                "HINT: another process holds that port; set MASTER_PORT to a free port, or "
                "leave it unset so that hpctrain derives one per job") from e
        server.settimeout(connect_timeout_s)
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
                conn.settimeout(self.timeout_s)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                hello = _recv(conn)
                self._peers[int(hello["rank"])] = conn
        finally:
            server.close()

    def _connect(self, addr: str, port: int, connect_timeout_s: float) -> None:
        deadline = time.monotonic() + connect_timeout_s
        delay = 0.02
        while True:
            try:
                conn = socket.create_connection((addr, port), timeout=5.0)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"rank {self.rank} could not reach rank 0 at {addr}:{port} within "
                        f"{connect_timeout_s:.0f} s ({e})") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        conn.settimeout(self.timeout_s)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _send(conn, {"rank": self.rank})
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


def free_port(host: str = "") -> int:
    """A TCP port that was free on this host a moment ago (the kernel's choice)."""
    family = socket.AF_INET6 if host and ":" in _resolve(host) else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]
