"""The reactor ``logbus serve`` runs: Twisted's epoll reactor without the logging context
it builds around every I/O event.

``EPollReactor.doPoll`` hands each ready descriptor to ``log.callWithLogger``, which asks
the descriptor for its ``logPrefix()``, copies the current log context, pushes the copy
and pops it again, so that Twisted's legacy ``log.msg`` calls made meanwhile name the
connection. logbus logs through the stdlib ``logging`` module and reads no such context.
At 1,000 QoS 1 messages a second, one per read, the broker wakes three times per message
(the PUBLISH, the subscriber's PUBACK, the sync's completion), and the wrapper cost about
15 µs of the ~370 µs of broker CPU per message.

What the wrapper also did, catching an exception, is kept: ``_doReadOrWrite`` already
catches whatever a descriptor raises and disconnects it (Twisted logs that error without
the connection's prefix now); anything that still escapes is logged here and the other
descriptors of the poll are still served.
"""

from __future__ import annotations

import errno
import logging
from typing import Any

from twisted.internet.epollreactor import EPollReactor

log = logging.getLogger(__name__)


class Reactor(EPollReactor):
    def doPoll(self, timeout: float | None) -> None:
        try:
            events = self._poller.poll(-1 if timeout is None else timeout, len(self._selectables))
        except OSError as err:
            if err.errno == errno.EINTR:
                return
            raise
        selectables = self._selectables
        handle = self._doReadOrWrite
        for fd, event in events:
            selectable = selectables.get(fd)
            if selectable is None:
                continue
            try:
                handle(selectable, fd, event)
            except Exception:
                log.exception("I/O event on %r", selectable)

    doIteration = doPoll


def install() -> Any:
    """Install ``Reactor`` as Twisted's global reactor; before anything imports it."""
    from twisted.internet.main import installReactor

    reactor = Reactor()
    installReactor(reactor)
    return reactor
