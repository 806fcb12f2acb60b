"""Connections the broker does not read (a resource alarm): has the peer gone?

A transport that is not read (``pauseProducing``) is out of the reactor's read set, so a
client that closes its socket is not noticed: what the connection holds (an unfinished
body, a held request) would stay until the alarm clears, and under the memory alarm
that memory may be what keeps the alarm set. ``UnreadWatch`` looks at each such
connection once a second: when the kernel says the peer has closed its side
(``TCP_INFO``: CLOSE_WAIT, or the socket is gone), the connection is aborted, so its
memory is freed at once. Unread bytes still in the socket do not hide a close, as a
peeking read would. A transport without a TCP socket of its own (TLS, WebSocket) is not
looked at.

    watch = UnreadWatch(reactor)
    watch.add(transport)      # paused
    watch.discard(transport)  # read again, or closed
"""

from __future__ import annotations

import logging
import socket
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
        self.transports: set[Any] = set()
        self._call: Any = None

    def add(self, transport: Any) -> None:
        self.transports.add(transport)
        if self._call is None:
            self._call = self.reactor.callLater(self.interval, self._look)

    def discard(self, transport: Any) -> None:
        self.transports.discard(transport)

    def _look(self) -> None:
        self._call = None
        for t in list(self.transports):
            if peer_closed(t):
                self.transports.discard(t)
                log.info("connection from %s closed by its peer while not read (resource alarm): dropped",
                         t.getPeer())
                t.abortConnection()
        if self.transports:
            self._call = self.reactor.callLater(self.interval, self._look)
