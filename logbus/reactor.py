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

It runs the end-of-turn pass (``core/tick.py``) itself, after each turn's I/O and after
its timed calls, instead of the pass asking for a ``callLater(0)`` per turn; and its loop
(``mainLoop``) skips Twisted's timed-call machinery in a turn where no timer is due, no
thread handed a call over and no stop was asked for. With a fleet of connections, each read carrying one message,
those two cost about a tenth of the broker's Python time per message (a DelayedCall, two
heap operations among a timer per connection, three clock reads, two logging contexts).

Its TCP and TLS listeners are ``accepting.Port``: out of file descriptors, they leave new
connections in the listen backlog instead of accepting and closing them.
"""

from __future__ import annotations

import errno
import logging
import time
from typing import Any

from twisted.internet.epollreactor import EPollReactor

from . import accepting
from .core.tick import Tick
from .finetimer import FINE_TIMEOUT, FineTimer
from .stalls import StallTrace

log = logging.getLogger(__name__)


class Reactor(EPollReactor):
    _tick: Tick | None = None  # the end-of-turn pass this reactor runs

    def __init__(self) -> None:
        super().__init__()
        # the poll's sub-millisecond timer, opened now: opened on the first short poll, it
        # could take the one descriptor a closed connection freed for a listener paused
        # out of descriptors (accepting.py), and leave a client in the backlog for good
        self._fine: FineTimer | None = FineTimer.open(self._poller)

    def drive_tick(self, tick: Tick) -> None:
        """Run ``tick``'s passes at the end of each turn (``tick_of`` hands it over)."""
        self._tick = tick

    def mainLoop(self) -> None:
        """Twisted's loop (timed calls, poll, I/O), with the end-of-turn pass after the
        I/O and after the timed calls, and the timed calls skipped when none is due."""
        while self._started:
            try:
                self._loop()
            except Exception:  # as Twisted's loop: log it and go on
                log.exception("unexpected error in the reactor's main loop")

    def _loop(self) -> None:
        seconds = self.seconds
        clock = time.monotonic
        while self._started:
            tick = self._tick
            calls = self._pendingTimedCalls
            if (self.threadCallQueue or self._newTimedCalls or self._justStopped
                    or (calls and calls[0].time <= seconds())):
                self.runUntilCurrent()
                if tick is not None:
                    tick.run_pending(clock())
            if not self.running:
                timeout: float | None = 0.0
                if tick is not None:
                    tick.run_pending(-1.0)  # stopping: what waits for the pace runs now
            elif tick is not None and tick.pending:
                # a pass's leftovers (past MAX_PER_PASS): at once; a paced pass: when due
                timeout = tick.wait(clock())
                if timeout:
                    t = self.timeout()
                    if t is not None and t < timeout:
                        timeout = t
            else:
                timeout = self.timeout()
            self.doPoll(timeout)
            if tick is not None:
                tick.run_pending(clock())

    def doPoll(self, timeout: float | None) -> None:
        # epoll_wait counts whole milliseconds and rounds a timeout up: a timer due in
        # 0.2 ms would wake the loop 1 ms later. A timeout under FINE_TIMEOUT is also armed
        # on the timerfd in the poll set (its expiry wakes the poll); the poll's own
        # timeout stays as a bound.
        fine = self._fine
        if fine is not None and timeout is not None and 0 < timeout < FINE_TIMEOUT:
            fine.arm(timeout)
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
                fine = self._fine
                if fine is not None and fd == fine.fd:
                    fine.expired()
                continue
            try:
                handle(selectable, fd, event)
            except Exception:
                log.exception("I/O event on %r", selectable)

    def doIteration(self, timeout: float | None) -> None:  # Twisted's name (iterate())
        self.doPoll(timeout)

    def listenTCP(self, port: int, factory: Any, backlog: int = 50, interface: str = "") -> Any:
        """A TCP (and, through ``listenSSL``, TLS) listener that stops accepting while the
        process is out of file descriptors (logbus/accepting.py)."""
        p = accepting.Port(port, factory, backlog, interface, self)
        p.startListening()
        return p


class TracingReactor(Reactor):
    """``Reactor`` writing what held the thread past a threshold (logbus/stalls.py)."""

    def __init__(self, trace: StallTrace) -> None:
        self._trace = trace
        super().__init__()
        trace.attach_gc()

    def runUntilCurrent(self) -> None:
        now = self.seconds()
        # a cancelled call waiting to be dropped from the heap has no func any more
        due = [getattr(c, "func", None) for calls in (self._pendingTimedCalls, self._newTimedCalls)
               for c in calls if c.time <= now]
        start, cpu = time.monotonic_ns(), time.thread_time_ns()
        super().runUntilCurrent()
        if due or self.threadCallQueue:
            names = sorted({getattr(f, "__qualname__", repr(f)) for f in due if f is not None})
            self._trace.note(start, "timed", ",".join(names), cpu)

    def _doReadOrWrite(self, selectable: Any, fd: int, event: int) -> None:
        start, cpu = time.monotonic_ns(), time.thread_time_ns()
        try:
            super()._doReadOrWrite(selectable, fd, event)
        finally:
            self._trace.note(start, "io", f"{type(selectable).__name__}/{event:#x}", cpu)


def install() -> Any:
    """Install ``Reactor`` as Twisted's global reactor; before anything imports it
    (``TracingReactor`` when the environment asks for a stall trace)."""
    from twisted.internet.main import installReactor

    trace = StallTrace.from_environment()
    reactor = Reactor() if trace is None else TracingReactor(trace)
    installReactor(reactor)
    return reactor
