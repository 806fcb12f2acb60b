"""Accepting connections when the process is out of file descriptors: stop accepting, and
leave new clients waiting in the kernel's listen backlog, as RabbitMQ and Mosquitto do.

Twisted's ``tcp.Port`` does otherwise. On EMFILE it closes a descriptor it keeps in
reserve, accepts every waiting connection with it and closes each at once (the clients
see their connection reset), then fails to take the reserve back while still out of
descriptors, so the next EMFILE just logs; on ENFILE, ENOBUFS or ENOMEM it logs and
returns with the listening socket still readable, and the reactor calls it again at
once, round after round.

``Port`` here is ``tcp.Port`` with its own ``doRead``: when ``accept`` fails for want of
descriptors or memory the port stops reading its socket (``stopReading``), so nothing
is accepted and the kernel keeps the connections in the listen backlog (``backlog``,
50 by default, beyond which it ignores new SYNs and the client retries). It reads again
when one of the process's connections closes (``Server.connectionLost``: a descriptor
is free) or ``RETRY_SECONDS`` later (a file closed instead: RabbitMQ's acceptor retries
after 100 ms too), whichever comes first; a failed retry pauses it again. The reactor
(``logbus.reactor``) makes every TCP and TLS listener one of these.
"""

from __future__ import annotations

import errno
import logging
import socket
from typing import Any, ClassVar

from twisted.internet import tcp

log = logging.getLogger(__name__)

OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
RETRY_SECONDS = 0.1


class Server(tcp.Server):
    """An accepted connection: its end frees a descriptor, so paused ports read again."""

    def connectionLost(self, reason: Any) -> None:
        super().connectionLost(reason)
        Port.resume_all()


class Port(tcp.Port):
    transport = Server
    paused: ClassVar[set[Port]] = set()  # ports not reading for want of descriptors
    _retry: Any = None  # the pending IDelayedCall of a paused port
    _out_since_logged = False  # a pause was logged and no accept has succeeded since

    @classmethod
    def resume_all(cls) -> None:
        for port in list(cls.paused):
            port._resume()

    def doRead(self) -> None:
        accepted = 0
        try:
            for _ in range(self.numberAccepts):
                try:
                    skt, addr = self.socket.accept()
                except OSError as e:
                    if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                        break
                    if e.errno in OUT_OF_DESCRIPTORS:
                        self._pause(e)
                        return
                    if e.errno in (errno.EPERM, errno.ECONNABORTED):  # refused by netfilter, gone already
                        continue
                    raise
                accepted += 1
                if self._out_since_logged:
                    self._out_since_logged = False
                    log.warning("%s: accepting connections again", self._name())
                self._connect(skt, addr)
        except Exception:
            log.exception("%s: accepting a connection failed", self._name())
        # as tcp.Port: more accepts per read while clients keep coming, fewer when not
        self.numberAccepts = self.numberAccepts + 20 if accepted == self.numberAccepts else max(1, accepted)

    def _connect(self, skt: socket.socket, addr: Any) -> None:
        if len(addr) == 4:  # IPv6: keep the scope id
            host = socket.getnameinfo(addr, socket.NI_NUMERICHOST | socket.NI_NUMERICSERV)
            addr = (host[0], *addr[1:])
        factory: Any = self.factory  # twisted's annotations know no zope interfaces
        protocol = factory.buildProtocol(self._buildAddr(addr))
        if protocol is None:
            skt.close()
            return
        session = self.sessionno
        self.sessionno = session + 1
        transport: Any = self.transport(skt, protocol, addr, self, session, self.reactor)
        protocol.makeConnection(transport)

    def _pause(self, e: OSError) -> None:
        self.stopReading()
        Port.paused.add(self)
        if self._retry is None or not self._retry.active():
            self._retry = self.reactor.callLater(RETRY_SECONDS, self._resume)
        if not self._out_since_logged:
            self._out_since_logged = True
            log.warning("%s: out of file descriptors (%s): not accepting; new connections wait in the listen "
                        "backlog until a descriptor is free", self._name(), errno.errorcode.get(e.errno or 0, e))

    def _resume(self) -> None:
        Port.paused.discard(self)
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        self._retry = None
        if self.connected and not self.disconnecting:
            self.startReading()

    def connectionLost(self, reason: Any) -> None:
        Port.paused.discard(self)
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        self._retry = None
        super().connectionLost(reason)

    def _name(self) -> str:
        host = self.getHost()
        return f"port {host.host}:{host.port}"
