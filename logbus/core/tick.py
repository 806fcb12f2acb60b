"""End-of-tick work: what the reactor thread runs once after handling this turn's I/O.

Writing the log, committing queue entries, sending publisher confirms and flushing a
connection's output each happen once per reactor turn, after every read of the turn
was handled. Each used to ask for its own ``callLater(0)``, and as one led to the next
(the log's sync fires confirms, confirms are written to the socket) a publish took
three reactor iterations, with an ``epoll_wait`` and Twisted's timer bookkeeping each.
``Tick`` runs them all in one pass instead, in the order they were asked for, including
work asked for by work already running in the pass.

The pass is asked for with ``callLater(0)``, unless the reactor runs it itself: logbus's
own reactor (``logbus/reactor.py``) calls ``run_pending`` at the end of every turn, after
its I/O and after its timed calls. Then asking costs a list append: no DelayedCall, no
push into (and pop from) the reactor's heap of timers, whose every comparison is a
Python call (with a keep-alive timer per connection, about ten of each per turn).

    tick = tick_of(reactor)
    tick.later(flush)   # once per turn: the caller keeps its own "scheduled" flag
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Callable

log = logging.getLogger(__name__)

MAX_PER_PASS = 100_000  # what is asked for beyond this waits for the next turn

_ticks: weakref.WeakKeyDictionary[Any, Tick] = weakref.WeakKeyDictionary()


def tick_of(reactor: Any) -> Tick:
    """The one Tick of ``reactor`` (anything with ``callLater``; a reactor with
    ``drive_tick`` runs its passes itself)."""
    t = _ticks.get(reactor)
    if t is None:
        t = _ticks[reactor] = Tick(reactor)
        drive = getattr(reactor, "drive_tick", None)
        if drive is not None:
            drive(t)
            t._driven = True
    return t


class Tick:
    __slots__ = ("_reactor", "_work", "_running", "_driven", "__weakref__")

    def __init__(self, reactor: Any) -> None:
        self._reactor = reactor
        self._work: list[Callable[[], object]] = []
        self._running = False
        self._driven = False  # the reactor calls ``run_pending`` at the end of each turn

    def later(self, f: Callable[[], object]) -> None:
        """Run ``f()`` at the end of this turn (in this pass, when one is running)."""
        work = self._work
        if not work and not self._running and not self._driven:
            self._reactor.callLater(0, self._run)
        work.append(f)

    @property
    def pending(self) -> bool:
        """Work waits for a pass."""
        return bool(self._work)

    def run_pending(self) -> None:
        """The reactor's end of a turn: a pass if work waits (its own reactor's)."""
        if self._work and not self._running:
            self._run()

    def _run(self) -> None:
        self._running = True
        work = self._work
        i = 0
        try:
            while i < len(work) and i < MAX_PER_PASS:
                f = work[i]
                i += 1
                try:
                    f()
                except Exception:
                    log.exception("end-of-tick work %r failed", f)
        finally:
            self._running = False
            self._work = rest = work[i:]
            if rest and not self._driven:
                self._reactor.callLater(0, self._run)
