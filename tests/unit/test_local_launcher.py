"""The local launcher's port for rank 0's process group."""
import collections
import socket

from hpctrain.launchers import local


def test_free_port_never_hands_out_a_port_it_just_gave(monkeypatch):
    """Two trials of a local sweep start at once in one process: the kernel may give the
    port one of them just released to the other's bind(0); the second must get another."""
    given = iter([40001, 40001, 40001, 40002])

    class Kernel:  # bind(0) as a kernel that re-uses a released port
        def __init__(self, *a):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def bind(self, address):
            self.port = next(given)

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(local, "_HANDED_OUT", collections.deque(maxlen=256))
    monkeypatch.setattr(local.socket, "socket", Kernel)
    assert [local.free_port(), local.free_port()] == [40001, 40002]


def test_free_port_is_bindable():
    port = local.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
