"""gateway/unread.py on real loopback sockets and a fake clock: the kernel's TCP state
is what tells a peer gone from a connection the broker does not read."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator

import pytest
from twisted.internet.task import Clock

from logbus.gateway.unread import INTERVAL, UnreadWatch, peer_closed

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="TCP_INFO is Linux's")

DEADLINE = 5.0


class Transport:
    """What UnreadWatch uses of a Twisted TCP transport: its socket, its peer, abort."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.peer = "%s:%d" % sock.getpeername()  # Twisted keeps it too: a reset socket has none
        self.aborted = False

    def getHandle(self) -> socket.socket:  # noqa: N802  (Twisted's name)
        return self.sock

    def getPeer(self) -> str:  # noqa: N802
        return self.peer

    def abortConnection(self) -> None:  # noqa: N802
        self.aborted = True


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(ours, the client's): a loopback TCP connection."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        ours, _ = listener.accept()
    try:
        yield ours, client
    finally:
        ours.close()
        client.close()


def fill(client: socket.socket) -> int:
    """Send until our receive window and the client's send buffer are full (we read nothing)."""
    client.setblocking(False)
    sent = 0
    chunk = b"x" * 65536
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            sent += client.send(chunk)
        except BlockingIOError:
            return sent
    raise AssertionError("the client's socket never filled")


def wait_closed(t: Transport) -> None:
    """The kernel's view changes when a segment arrives: wait for it, with a deadline."""
    deadline = time.monotonic() + DEADLINE
    while not peer_closed(t):
        assert time.monotonic() < deadline, "the peer's close never reached our socket"
        time.sleep(0.01)


def test_a_live_peer_is_probed_and_kept(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, client = pair
    clock = Clock()
    watch = UnreadWatch(clock)
    t = Transport(ours)
    probes: list[int] = []
    watch.add(t, lambda: probes.append(1))
    clock.advance(INTERVAL)
    clock.advance(INTERVAL)
    assert probes == [1, 1] and not t.aborted
    watch.discard(t)
    clock.advance(INTERVAL)
    assert probes == [1, 1] and not clock.getDelayedCalls()  # nothing watched: no timer


def test_a_close_that_reached_us_is_seen(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, client = pair
    client.send(b"unread")  # bytes we have not read do not hide the FIN behind them
    client.close()
    t = Transport(ours)
    wait_closed(t)  # CLOSE_WAIT
    clock = Clock()
    watch = UnreadWatch(clock)
    probes: list[int] = []
    watch.add(t, lambda: probes.append(1))
    clock.advance(INTERVAL)
    assert t.aborted and probes == [] and not watch.transports


def test_a_close_behind_a_full_window_is_seen_once_probed(pair: tuple[socket.socket, socket.socket]) -> None:
    """The client filled our window and closed: its FIN cannot be sent, and our side
    stays ESTABLISHED. Data from us makes its kernel answer with a reset."""
    ours, client = pair
    fill(client)
    client.close()
    t = Transport(ours)
    clock = Clock()
    watch = UnreadWatch(clock)
    watch.add(t, lambda: ours.send(b"\x08\x00\x00\x00\x00\x00\x00\xce"))  # an AMQP heartbeat frame
    clock.advance(INTERVAL)
    assert not t.aborted  # nothing told us yet: probed
    wait_closed(t)  # the reset
    clock.advance(INTERVAL)
    assert t.aborted and not watch.transports


def test_without_a_probe_a_close_behind_a_full_window_is_not_seen(
        pair: tuple[socket.socket, socket.socket]) -> None:
    """Why the probe: the same close, nothing sent to the peer, stays hidden."""
    ours, client = pair
    fill(client)
    client.close()
    t = Transport(ours)
    clock = Clock()
    watch = UnreadWatch(clock)
    watch.add(t)
    for _ in range(3):
        clock.advance(INTERVAL)
    assert not t.aborted and ours.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == 1  # ESTABLISHED
