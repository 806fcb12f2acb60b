"""Connections the broker does not read (a resource alarm): has the peer gone?

A transport that is not read (``pauseProducing``) is out of the reactor's read set, so a
client that closes its socket is not noticed: what the connection holds (an unfinished
body, a held request) would stay until the alarm clears, and under the memory alarm
that memory may be what keeps the alarm set. ``UnreadWatch`` looks at each such
connection once a second: when the kernel says the peer has closed its side
(``TCP_INFO``: CLOSE_WAIT, or CLOSE after a reset, or the socket is gone), the
connection is aborted, so its memory is freed at once. Unread bytes still in the socket
do not hide a close, as a peeking read would.

A close is not always seen that way. While our receive window is full (the unread bytes
fill it, which is how a client that goes on sending is held back), the peer's FIN cannot
be sent: it waits in the peer's kernel behind the bytes our window refuses, and our side
stays ESTABLISHED for as long as we do not read. Only data we send tells: a socket whose
process has closed it answers new data with a reset (RFC 1122 4.2.2.13; Linux counts it
as TCPAbortOnData), and our side becomes CLOSE. So a protocol that may send something
harmless at any time passes ``probe``, called at each look while the peer has not been
seen to close (AMQP sends a heartbeat frame when nothing was sent for a while): a peer
gone meanwhile is seen at the next look. A live peer takes the probe and is left alone.

A transport without a TCP socket of its own (TLS, WebSocket) is not looked at.

    watch = UnreadWatch(reactor)
    watch.add(transport, probe)  # paused; probe: None, or send the peer something harmless
    watch.discard(transport)     # read again, or closed
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

TCP_CLOSE_WAIT = 8  # tcpi_state (include/net/tcp_states.h): the peer sent its FIN
TCP_CLOSE = 7
INTERVAL = 1.0  # seconds between two looks


def peer_closed(transport: Any) -> bool:
    """Whether the peer of ``transport``'s TCP socket has closed its side (False when
    it cannot be told)."""
    try:
        sock = transport.getHandle()
    except Exception:  # noqa: BLE001  (a wrapper without a handle)
        return False
    if not isinstance(sock, socket.socket):
        return False
    try:
        state = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
    except OSError:
        return True  # the socket itself is gone
    return state in (TCP_CLOSE_WAIT, TCP_CLOSE)


class UnreadWatch:
    def __init__(self, reactor: Any, interval: float = INTERVAL) -> None:
        self.reactor = reactor
        self.interval = interval
        self.transports: dict[Any, Callable[[], None] | None] = {}  # transport -> its probe
        self._call: Any = None

    def add(self, transport: Any, probe: Callable[[], None] | None = None) -> None:
        self.transports[transport] = probe
        if self._call is None:
            self._call = self.reactor.callLater(self.interval, self._look)

    def discard(self, transport: Any) -> None:
        self.transports.pop(transport, None)

    def _look(self) -> None:
        self._call = None
        try:
            for t, probe in list(self.transports.items()):
                if peer_closed(t):
                    del self.transports[t]
                    log.info("connection from %s closed by its peer while not read (resource alarm): dropped",
                             t.getPeer())
                    t.abortConnection()
                elif probe is not None:
                    probe()
        finally:  # a probe that failed (the reactor logs it) does not end the watch of the others
            if self.transports:
                self._call = self.reactor.callLater(self.interval, self._look)
