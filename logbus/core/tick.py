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

Work asked for with ``paced`` instead (the MQTT gateway's turn of publishes, whose cost is
per pass more than per publish: the pipeline's pass, the log's write and sync, the journal's
commit, the dispatch, a send per subscriber) runs at the end of its turn after a quiet spell,
and under a steady load no sooner than ``pace`` after the last pass that ran paced work
began: a fleet of devices, each read carrying one publish, pays that cost once per
millisecond, not once per read (decision 0055). The reactor wakes for it on time
(``Tick.wait``; logbus/reactor.py keeps poll timeouts under 10 ms to the microsecond).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Callable

log = logging.getLogger(__name__)

MAX_PER_PASS = 100_000  # what is asked for beyond this waits for the next turn
# The longest work asked for ``paced`` (the MQTT gateway's turn of publishes) waits after
# the last pass that ran such work began (decision 0055): under a steady load one pass
# then appends, writes and dispatches the publishes of several turns. Asked for after a
# quiet spell (that long since the last), it runs at the end of its turn.
TURN_PACE_SECONDS = 0.001

_ticks: weakref.WeakKeyDictionary[Any, Tick] = weakref.WeakKeyDictionary()


def tick_of(reactor: Any) -> Tick:
    """The one Tick of ``reactor`` (anything with ``callLater``; a reactor with
    ``drive_tick`` runs its passes itself, and paces ``paced`` work)."""
    t = _ticks.get(reactor)
    if t is None:
        t = _ticks[reactor] = Tick(reactor)
        drive = getattr(reactor, "drive_tick", None)
        if drive is not None:
            drive(t)
            t._driven = True
    return t


class Tick:
    __slots__ = ("_reactor", "_work", "_paced", "_running", "_driven", "pace", "_last", "paced_passes",
                 "__weakref__")

    def __init__(self, reactor: Any, pace: float = TURN_PACE_SECONDS) -> None:
        self._reactor = reactor
        self._work: list[Callable[[], object]] = []  # this turn's end
        self._paced: list[Callable[[], object]] = []  # a driven tick's: when the pace allows
        self._running = False
        self._driven = False  # the reactor calls ``run_pending`` at the end of each turn
        self.pace = pace  # the longest ``paced`` work waits (0: it never does)
        self._last = -1e9  # when the last pass that ran ``paced`` work began (time.monotonic)
        self.paced_passes = 0

    def later(self, f: Callable[[], object]) -> None:
        """Run ``f()`` at the end of this turn (in this pass, when one is running)."""
        if not self._work and not self._paced and not self._running and not self._driven:
            self._reactor.callLater(0, self._run_all)
        self._work.append(f)

    def paced(self, f: Callable[[], object]) -> None:
        """Run ``f()`` at the end of this turn, or (a driven tick, under a steady load) up
        to ``pace`` after the last pass that ran paced work began: work whose cost is per
        pass more than per item, such as a turn of publishes."""
        if not self._work and not self._paced and not self._running and not self._driven:
            self._reactor.callLater(0, self._run_all)
        self._paced.append(f)

    @property
    def pending(self) -> bool:
        """Work waits for a pass."""
        return bool(self._work) or bool(self._paced)

    def wait(self, now: float) -> float:
        """Seconds from ``now`` (``time.monotonic``) until a pass is due (0.0: now); call
        while ``pending``."""
        if self._work:
            return 0.0
        rest = self._last + self.pace - now
        return rest if rest > 0.0 else 0.0

    def run_pending(self, now: float) -> None:
        """The reactor's end of a turn, ``now`` on its clock (``time.monotonic``): the
        turn's work, and the paced work if the pace allows; a negative ``now`` (the reactor
        stops): all of it."""
        if self._running:
            return
        paced = bool(self._paced) and (now < 0.0 or now - self._last >= self.pace)
        if paced:
            self._last = now
            self.paced_passes += 1
            self._run(True)
        elif self._work:
            self._run(False)

    def _run_all(self) -> None:
        if not self._running:
            self._run(True)

    def _run(self, paced: bool) -> None:
        """Run what is asked (with ``paced``, the paced work first), including what that
        asks for (paced work asked for meanwhile waits), up to ``MAX_PER_PASS`` calls."""
        self._running = True
        batch: list[Callable[[], object]] = []
        i = n = 0
        from_paced = False
        try:
            while n < MAX_PER_PASS:
                if paced and self._paced:
                    batch, self._paced, from_paced = self._paced, [], True
                    paced = False
                elif self._work:
                    batch, self._work, from_paced = self._work, [], False
                else:
                    break
                i = 0
                while i < len(batch):
                    f = batch[i]
                    i += 1
                    n += 1
                    try:
                        f()
                    except Exception:
                        log.exception("end-of-tick work %r failed", f)
                batch = []
        finally:
            self._running = False
            if i < len(batch):  # something escaped (not an Exception): the rest goes first next time
                if from_paced:
                    self._paced[:0] = batch[i:]
                else:
                    self._work[:0] = batch[i:]
            if (self._work or self._paced) and not self._driven:
                self._reactor.callLater(0, self._run_all)
