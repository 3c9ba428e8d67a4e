"""A tiny TCP group of the ranks of one attempt, for backends without a usable collective.

TensorFlow's and Horovod's collectives live inside the framework (a strategy, ``hvd``) and
are the user's: hpctrain must not call them from ``report()``. This group is the
bookkeeping channel they share instead: rank 0 listens at ``master_addr:master_port`` (the
rendezvous port every launcher already gives a job), every other rank connects once and
keeps the connection for the attempt. Two operations:

* :meth:`TcpGroup.allgather` — every rank's JSON value, in rank order, on every rank
  (the TensorFlow backend gathers each worker's ``host:port`` for ``TF_CONFIG`` with it);
* :meth:`TcpGroup.allreduce_max` — the element-wise max of a few integers
  (``report()``'s agreement, the :class:`~hpctrain.common.context.Coordinator` API).

A rank that dies closes its socket: a rank waiting in one of these operations gets
:class:`ConnectionError` instead of hanging (a rank blocked inside the framework's own
collective is ended by the supervisor or by ``srun --kill-on-bad-exit``), and the
supervisor restarts the attempt.

**Joining is authenticated** (other users share the nodes; see ``docs/guide/security.md``).
The supervisor makes a random 128-bit secret per attempt and hands it to the ranks in
their environment (``HPCTRAIN_GROUP_SECRET``, :data:`ENV_GROUP_SECRET`; never on a
command line). The hello is a mutual HMAC-SHA256 challenge-response:

1. rank 0 accepts and sends a fresh nonce ``n0``;
2. the rank answers with its rank ``r``, the group token ``t`` (:func:`group_token`:
   public facts that tell two jobs whose derived ports collide apart), its own nonce
   ``n1`` and ``HMAC(secret, ["rank", n0, n1, t, r])``;
3. rank 0 checks it (:func:`hmac.compare_digest`) and answers with
   ``HMAC(secret, ["hub", n0, n1, t, r])``, which the rank checks in turn, so a rank never
   hands its values to a process that grabbed the port without knowing the secret.

Who knows every public fact of the job (``squeue`` shows them) but not the secret can
neither join nor inject values; a rank of another job (another token) is refused and
retries; a rank whose secret differs from rank 0's fails at once with an error naming the
variable. The handshake runs off the accept loop (one selector, a deadline of
``HELLO_TIMEOUT_S`` per connection, at most ``PENDING_MAX`` + world size handshakes in
progress, the oldest silent one dropped first): a connection that says nothing costs the
real ranks nothing. Only the hello is authenticated: what follows is neither signed nor
encrypted (a co-user cannot inject into an established TCP connection without root).

Rank 0 listens only on the addresses the master address resolves to (see :func:`bind_plan`
for the two cases where it listens on every interface instead).

Messages are a 4-byte big-endian length and UTF-8 JSON (at most ``MAX_MESSAGE`` bytes,
``MAX_HELLO`` during the handshake). Single-rank groups never open a socket.
"""
from __future__ import annotations

import base64
import errno
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
import selectors
import socket
import struct
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hpctrain.common.context import Coordinator
from hpctrain.common.log import get_logger
from hpctrain.cluster_env import derive_port

_LEN = struct.Struct(">I")
HELLO_TIMEOUT_S = 10.0
MAX_MESSAGE = 64 << 20
#: a hello is a few hundred bytes; a longer one is not hpctrain's group protocol
MAX_HELLO = 4096
#: handshakes in progress at once, on top of one per rank of the group
PENDING_MAX = 64
#: the secret a hand-set variable must at least have (the supervisor's has 32 hex digits)
MIN_SECRET_CHARS = 16
PROTOCOL = "hpctrain-group/2"
#: The attempt's secret, set by the supervisor for every rank (also
#: ``hpctrain.worker.entry.ENV_GROUP_SECRET``, beside the other variables it sets)
ENV_GROUP_SECRET = "HPCTRAIN_GROUP_SECRET"
#: names that mean "this host, loopback" whatever they resolve to
_LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")

_log = get_logger("rendezvous")


class GroupAuthError(PermissionError):
    """Rank 0 refused this rank's proof of the group secret (the secrets differ)."""


class TcpGroup(Coordinator):
    """All ``world_size`` ranks, rank 0 the hub at ``(addr, port)``.

    ``connect_timeout_s`` bounds how long a rank waits for rank 0 to listen (rank 0 may
    still be importing its framework); ``timeout_s`` bounds one operation (a slow rank
    writing a large checkpoint keeps the others waiting that long at most). ``token``:
    what tells this attempt's group from another job's (:func:`group_token`, not secret);
    ``secret``: the attempt's shared secret, by default the environment's
    ``HPCTRAIN_GROUP_SECRET`` (required when ``world_size`` > 1)."""

    def __init__(self, *, rank: int, world_size: int, addr: str, port: int,
                 timeout_s: float = 1800.0, connect_timeout_s: float = 300.0,
                 token: str = "", secret: Optional[str] = None):
        self.rank = rank
        self.token = token
        self.world_size = world_size
        self.timeout_s = timeout_s
        self._peers: Dict[int, socket.socket] = {}
        self._hub: Optional[socket.socket] = None
        #: rank 0: the addresses it listened on while the group formed (getsockname())
        self.listening_on: List[tuple] = []
        if world_size <= 1:
            return
        self._key = _secret_key(group_secret() if secret is None else secret, rank=rank)
        if rank == 0:
            self._serve(addr, port, connect_timeout_s)
        else:
            self._connect(addr, port, connect_timeout_s)

    # -- set-up: rank 0 --------------------------------------------------------------------
    def _serve(self, addr: str, port: int, connect_timeout_s: float) -> None:
        servers = _listen(addr, port, backlog=max(128, self.world_size))
        self.listening_on = [s.getsockname() for s in servers]
        sel = selectors.DefaultSelector()
        for s in servers:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ, None)
        pending: Dict[socket.socket, _Hello] = {}  # insertion order: the oldest first
        self._refusals = 0
        deadline = time.monotonic() + connect_timeout_s
        try:
            while len(self._peers) < self.world_size - 1:
                now = time.monotonic()
                for conn in [c for c, h in pending.items() if h.deadline <= now]:
                    _drop(sel, pending, conn)  # said nothing (or not all of it) in time
                if now >= deadline:
                    missing = sorted(set(range(1, self.world_size)) - set(self._peers))
                    raise TimeoutError(
                        f"ranks {missing} did not connect to rank 0 at port {port} within "
                        f"{connect_timeout_s:.0f} s")
                wake = min([deadline] + [h.deadline for h in pending.values()])
                for key, _ in sel.select(max(0.0, wake - now)):
                    if key.data is None:
                        self._accept(key.fileobj, sel, pending)
                    elif key.fileobj in pending:  # not dropped earlier in this round
                        self._advance(key.fileobj, sel, pending)
        finally:
            for conn in list(pending):
                _drop(sel, pending, conn)
            for s in servers:
                s.close()
            sel.close()

    def _accept(self, server: socket.socket, sel, pending: Dict[socket.socket, "_Hello"]):
        try:
            conn, peer = server.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:  # out of descriptors (EMFILE): make room; else transient
            if pending:
                _drop(sel, pending, _oldest(pending))
            else:
                time.sleep(0.05)
            _log.debug(f"accept failed: {e}")
            return
        if len(pending) >= PENDING_MAX + self.world_size:
            _drop(sel, pending, _oldest(pending))
        conn.setblocking(False)
        nonce = secrets.token_hex(16)
        frame = _frame({"group": PROTOCOL, "nonce": nonce})
        try:  # a few dozen bytes into the empty send buffer of a new connection
            if conn.send(frame) != len(frame):
                raise OSError("short send")
        except OSError:
            conn.close()
            return
        hello = _Hello(conn, peer, nonce, time.monotonic() + HELLO_TIMEOUT_S)
        pending[conn] = hello
        sel.register(conn, selectors.EVENT_READ, hello)

    def _advance(self, conn: socket.socket, sel, pending: Dict[socket.socket, "_Hello"]):
        hello = pending[conn]
        try:
            chunk = conn.recv(hello.need - len(hello.buf))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            _drop(sel, pending, conn)
            return
        hello.buf += chunk
        if len(hello.buf) == _LEN.size:
            (size,) = _LEN.unpack(hello.buf)
            if not 0 < size <= MAX_HELLO:
                _drop(sel, pending, conn)  # not hpctrain's group protocol
                return
            hello.need = _LEN.size + size
        if len(hello.buf) == hello.need and hello.need > _LEN.size:
            sel.unregister(conn)
            del pending[conn]
            self._admit(conn, hello)

    def _admit(self, conn: socket.socket, hello: "_Hello") -> None:
        """A complete hello: admit the rank, or refuse it (and say why: nothing secret)."""
        why = None
        try:
            msg = _loads(hello.buf[_LEN.size:])
            peer, token = msg["rank"], msg["token"]
            their_nonce, proof = msg["nonce"], msg["proof"]
            if not (type(peer) is int and isinstance(token, str)
                    and isinstance(their_nonce, str) and isinstance(proof, str)):
                raise TypeError("bad field types")
        except (ValueError, KeyError, TypeError):
            conn.close()  # not one of ours (a port scanner, garbage)
            return
        expected = _proof(self._key, "rank", hello.nonce, their_nonce, token, peer)
        if token != self.token:
            why = "token"  # another job's rank (derived ports collide), or a stale attempt
        elif not hmac.compare_digest(proof.encode(), expected.encode()):
            why = "secret"
        elif not 0 < peer < self.world_size or peer in self._peers:
            why = "rank"
        if why is not None:
            if why != "token" and self._refusals < 3:  # another job's rank is no news
                self._refusals += 1
                _log.warning(f"rank 0 refused a connection from {_where(hello.peer)} "
                             f"claiming rank {peer}: " + (
                                 "it does not know this attempt's group secret" if
                                 why == "secret" else f"not a free rank of this group of {self.world_size}"))
            try:
                conn.send(_frame({"ok": False, "why": why}))
            except OSError:
                pass
            conn.close()
            return
        try:
            conn.settimeout(HELLO_TIMEOUT_S)
            _send(conn, {"ok": True, "proof": _proof(self._key, "hub", hello.nonce,
                                                      their_nonce, token, peer)})
        except OSError:
            conn.close()
            return
        conn.settimeout(self.timeout_s)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._peers[peer] = conn

    # -- set-up: the other ranks -----------------------------------------------------------
    def _connect(self, addr: str, port: int, connect_timeout_s: float) -> None:
        deadline = time.monotonic() + connect_timeout_s
        delay = 0.02
        while True:
            conn = None
            try:
                conn = socket.create_connection((addr, port), timeout=HELLO_TIMEOUT_S)
                if conn.getsockname() == conn.getpeername():
                    raise ConnectionError("connected to itself (rank 0 was not listening yet)")
                self._hello(conn, addr, port)
                break
            except GroupAuthError:
                conn.close()
                raise
            except (OSError, ValueError) as e:
                if conn is not None:
                    conn.close()
                if time.monotonic() > deadline:
                    hint = ""
                    if isinstance(e, ConnectionRefusedError):
                        hint = ("\nHINT: rank 0 listens only on the addresses its own host "
                                f"resolves {addr!r} to; if this host resolves it to another "
                                "address, set MASTER_ADDR to rank 0's IP address")
                    raise TimeoutError(
                        f"rank {self.rank} could not join rank 0's group at {addr}:{port} "
                        f"within {connect_timeout_s:.0f} s ({e}){hint}") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        conn.settimeout(self.timeout_s)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._hub = conn

    def _hello(self, conn: socket.socket, addr: str, port: int) -> None:
        where = f"{addr}:{port}"
        challenge = _recv(conn, who="rank 0", limit=MAX_HELLO)
        if not (isinstance(challenge, dict) and challenge.get("group") == PROTOCOL
                and isinstance(challenge.get("nonce"), str)):
            raise ConnectionError(f"the process at {where} is not rank 0 of an hpctrain group")
        theirs, mine = challenge["nonce"], secrets.token_hex(16)
        _send(conn, {"rank": self.rank, "token": self.token, "nonce": mine,
                     "proof": _proof(self._key, "rank", theirs, mine, self.token, self.rank)})
        answer = _recv(conn, who="rank 0", limit=MAX_HELLO)
        if not isinstance(answer, dict):
            raise ValueError(f"rank 0 at {where} sent {answer!r}: not a hello")
        if answer.get("ok") is not True:
            why = answer.get("why")
            if why == "secret":
                raise GroupAuthError(
                    f"rank {self.rank}: rank 0 at {where} refused this rank's proof of the "
                    f"group secret: this rank's {ENV_GROUP_SECRET} differs from rank 0's, "
                    "or the process at that port is not this attempt's rank 0.\nHINT: the "
                    f"supervisor sets {ENV_GROUP_SECRET} for every rank of an attempt; ranks "
                    "started by hand must all get the same value")
            raise ConnectionError(f"rank 0 at {where} refused this rank ({why}: another "
                                  "job's group, or this rank is already taken)")
        expected = _proof(self._key, "hub", theirs, mine, self.token, self.rank)
        if not hmac.compare_digest(str(answer.get("proof", "")).encode(), expected.encode()):
            raise ConnectionError(f"the process at {where} does not know this attempt's group "
                                  "secret: it is not this attempt's rank 0")

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

    def broadcast_bytes(self, data: Optional[bytes]) -> bytes:
        """Rank 0's ``data`` on every rank, in one exchange (base64 in the JSON)."""
        rows = self.allgather(base64.b64encode(data).decode("ascii")
                              if data is not None else None)
        return base64.b64decode(rows[0] or "")

    def close(self) -> None:
        for conn in list(self._peers.values()) + ([self._hub] if self._hub else []):
            try:
                conn.close()
            except OSError:
                pass
        self._peers.clear()
        self._hub = None


class _Hello:
    """A connection rank 0 accepted whose hello is not complete yet."""

    __slots__ = ("conn", "peer", "nonce", "deadline", "buf", "need")

    def __init__(self, conn: socket.socket, peer, nonce: str, deadline: float):
        self.conn, self.peer, self.nonce, self.deadline = conn, peer, nonce, deadline
        self.buf = b""
        self.need = _LEN.size


def _drop(sel, pending: Dict[socket.socket, _Hello], conn: socket.socket) -> None:
    pending.pop(conn, None)
    try:
        sel.unregister(conn)
    except (KeyError, ValueError):
        pass
    conn.close()


def _oldest(pending: Dict[socket.socket, _Hello]) -> socket.socket:
    """The connection to give up first: the oldest that sent nothing, else the oldest."""
    for conn, hello in pending.items():
        if not hello.buf:
            return conn
    return next(iter(pending))


def _where(peer) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)


# -- the secret -----------------------------------------------------------------------------
def group_secret(env=None) -> str:
    """This attempt's group secret from ``env`` (default: the environment), or ``""``."""
    return ((env if env is not None else os.environ).get(ENV_GROUP_SECRET) or "").strip()


def _secret_key(secret: str, *, rank: int) -> bytes:
    if len(secret or "") < MIN_SECRET_CHARS:
        what = "is not set" if not secret else f"has fewer than {MIN_SECRET_CHARS} characters"
        raise RuntimeError(
            f"rank {rank}: {ENV_GROUP_SECRET} {what}: the ranks of an attempt authenticate "
            "each other with it before they exchange anything.\nHINT: hpctrain's supervisor "
            "sets it for every rank it starts (`hpctrain run`, Trainer.fit()); ranks started "
            "by hand need the same random value in each rank's environment, e.g. "
            f"export {ENV_GROUP_SECRET}=$(python -c 'import secrets; "
            "print(secrets.token_hex(16))') before the launcher, never on its command line")
    return secret.encode()


def _proof(key: bytes, role: str, hub_nonce: str, rank_nonce: str, token: str,
           rank: int) -> str:
    """HMAC-SHA256 over (role, both nonces, token, rank), JSON-encoded: unambiguous."""
    msg = json.dumps([PROTOCOL, role, hub_nonce, rank_nonce, token, rank]).encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


# -- where rank 0 listens ---------------------------------------------------------------------
def _is_loopback_name(addr: str) -> bool:
    name = addr.strip().strip("[]").lower().rstrip(".")
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name.split("%")[0]).is_loopback
    except ValueError:
        return False


def bind_plan(addr: str) -> Tuple[List[Tuple[int, tuple]], str]:
    """Where rank 0 listens for master address ``addr``: ``([(family, sockaddr)…], "")``,
    or ``([], why)`` for every interface.

    The rule: the addresses ``addr`` resolves to on rank 0's host, because the other ranks
    connect to what it resolves to on theirs: ``127.0.0.1``/``localhost`` (the local
    launcher, a single-node run) gives the loopback interface only, a node's name or IP
    (Slurm/PBS: the first host of the job, ``cluster_env``) gives that interface. Every
    interface only where a narrower bind would lock out the job's own ranks:

    * a host name (not ``localhost``) that resolves to a loopback address only: a
      ``/etc/hosts`` line such as Debian's ``127.0.1.1 <hostname>`` on rank 0's node,
      while the other nodes resolve the name to its network address;
    * ``addr`` does not resolve here (the other ranks will say so themselves).

    :func:`_listen` adds a third: none of the addresses is on this host (a NAT, a name
    that maps elsewhere here). Either way the hello is authenticated: a wider bind lets
    more hosts knock, not join.

    >>> [(family.name, sockaddr[0]) for family, sockaddr in bind_plan("127.0.0.1")[0]]
    [('AF_INET', '127.0.0.1')]
    """
    try:
        infos = socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM,
                                   proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as e:
        return [], f"{addr!r} does not resolve on this host ({e})"
    found: List[Tuple[int, tuple]] = []
    for family, _, _, _, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6) and (family, sockaddr) not in found:
            found.append((family, sockaddr))
    if not found:
        return [], f"{addr!r} resolves to no IPv4/IPv6 address"

    def loopback(sockaddr) -> bool:
        try:
            return ipaddress.ip_address(str(sockaddr[0]).split("%")[0]).is_loopback
        except ValueError:
            return False

    if all(loopback(sa) for _, sa in found) and not _is_loopback_name(addr):
        return [], (f"{addr!r} resolves to {', '.join(str(sa[0]) for _, sa in found)} on "
                    "this host only (an /etc/hosts line for its own name): the other nodes "
                    "reach it by its network address")
    return found, ""


def _listen(addr: str, port: int, *, backlog: int) -> List[socket.socket]:
    plan, why = bind_plan(addr)
    servers: List[socket.socket] = []
    try:
        for family, sockaddr in plan:
            s = socket.socket(family, socket.SOCK_STREAM)
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.bind((sockaddr[0], port) + tuple(sockaddr[2:]))
                s.listen(backlog)
            except OSError as e:
                s.close()
                if e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    continue  # not an address of this host (or no IPv6 here)
                raise
            servers.append(s)
        if not servers:
            if plan:
                why = (f"{addr!r} resolves to "
                       f"{', '.join(str(sa[0]) for _, sa in plan)}, not an address of this "
                       "host")
                _log.warning(f"rank 0: {why}; listening on every interface (joining is "
                             "authenticated either way)")
            else:
                _log.debug(f"rank 0: {why}; listening on every interface")
            if socket.has_dualstack_ipv6():  # IPv4 and IPv6 peers alike
                servers.append(socket.create_server(("", port), family=socket.AF_INET6,
                                                    dualstack_ipv6=True, backlog=backlog))
            else:
                servers.append(socket.create_server(("", port), backlog=backlog))
    except OSError as e:
        for s in servers:
            s.close()
        raise OSError(
            f"rank 0 cannot listen on port {port} for the other ranks ({e}).\n"
            "HINT: another process holds that port; set MASTER_PORT to a free port, or "
            "leave it unset so that hpctrain derives one per job") from e
    return servers


# -- framing ---------------------------------------------------------------------------------
def _resolve(host: str) -> str:
    try:
        return socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0]
    except OSError:
        return host


def _frame(value: Any) -> bytes:
    data = json.dumps(value).encode()
    return _LEN.pack(len(data)) + data


def _send(conn: socket.socket, value: Any) -> None:
    conn.sendall(_frame(value))


def _recv(conn: socket.socket, who: str = "a rank", limit: int = MAX_MESSAGE) -> Any:
    (size,) = _LEN.unpack(_read(conn, _LEN.size, who))
    if size > limit:
        raise ValueError(f"{who} sent a {size}-byte message: not hpctrain's group protocol")
    return _loads(_read(conn, size, who))


def _loads(data: bytes) -> Any:
    """``json.loads``, with a document nested too deeply for Python's parser (a few KiB
    of ``[``: a RecursionError) a ValueError like any other malformed message."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("a message nested too deeply: not hpctrain's group protocol") from None


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
    """What every rank of one attempt of one run has in common (and no other job has):
    public facts (job id, attempt, run directory, world size), not a secret. It tells two
    jobs whose derived ports collide apart; the attempt's secret
    (:func:`group_secret`) is what keeps everyone else out."""
    return "/".join((info.job_id, os.environ.get("HPCTRAIN_ATTEMPT", ""),
                     os.environ.get("HPCTRAIN_RUN_DIR", ""), str(info.world_size)))


def reserve_port(key: str, *, tries: int = 64) -> int:
    """A port that is free on this host now, outside the kernel's ephemeral range (so no
    outgoing connection is handed it before the framework binds it), chosen by hashing
    ``key`` (as :func:`~hpctrain.cluster_env.derive_port`) and probing the next
    candidates when one is taken; the kernel's choice as a last resort."""

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
