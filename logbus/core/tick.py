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
# Under a steady load a full pass runs at most once per this long (decision 0055): what a
# turn asks for ``later`` (appending a turn's publishes, writing the log, committing the
# journal, dispatching) waits until this long after the last full pass began, gathering
# the reads of several turns; what it asks for ``soon`` (sending output already decided)
# runs at the end of the turn. A pass asked for after a quiet spell runs at once.
TURN_PACE_SECONDS = 0.001

_ticks: weakref.WeakKeyDictionary[Any, Tick] = weakref.WeakKeyDictionary()


def tick_of(reactor: Any) -> Tick:
    """The one Tick of ``reactor`` (anything with ``callLater``; a reactor with
    ``drive_tick`` runs its passes itself, paced)."""
    t = _ticks.get(reactor)
    if t is None:
        t = _ticks[reactor] = Tick(reactor)
        drive = getattr(reactor, "drive_tick", None)
        if drive is not None:
            drive(t)
            t._driven = True
    return t


class Tick:
    __slots__ = ("_reactor", "_work", "_soon", "_running", "_driven", "pace", "_last", "full_passes",
                 "__weakref__")

    def __init__(self, reactor: Any, pace: float = TURN_PACE_SECONDS) -> None:
        self._reactor = reactor
        self._work: list[Callable[[], object]] = []  # asked for ``later``: may wait for the pace
        self._soon: list[Callable[[], object]] = []  # asked for ``soon``: this turn's end
        self._running = False
        self._driven = False  # the reactor calls ``run_pending`` at the end of each turn
        self.pace = pace  # a driven tick's least time between full passes (0: none)
        self._last = -1e9  # when the last full pass began (the reactor's clock)
        self.full_passes = 0

    def later(self, f: Callable[[], object]) -> None:
        """Run ``f()`` in the next full pass: at the end of this turn, or (a driven tick,
        under a steady load) up to ``pace`` after the last full pass began; in this pass,
        when a full one is running."""
        if not self._work and not self._soon and not self._running and not self._driven:
            self._reactor.callLater(0, self._run_all)
        self._work.append(f)

    def soon(self, f: Callable[[], object]) -> None:
        """Run ``f()`` at the end of this turn, paced or not (output already decided on)."""
        if not self._work and not self._soon and not self._running and not self._driven:
            self._reactor.callLater(0, self._run_all)
        self._soon.append(f)

    @property
    def pending(self) -> bool:
        """Work waits for a pass."""
        return bool(self._work) or bool(self._soon)

    def wait(self, now: float) -> float:
        """Seconds from ``now`` until a pass is due (0.0: now); call while ``pending``."""
        if self._soon:
            return 0.0
        rest = self._last + self.pace - now
        return rest if rest > 0.0 else 0.0

    def run_pending(self, now: float) -> None:
        """The reactor's end of a turn, ``now`` on its clock: a full pass if one is due
        (``pace`` since the last began), else the ``soon`` work; a negative ``now`` (the
        reactor stops): a full pass whatever the pace."""
        if self._running:
            return
        if self._work and (now < 0.0 or now - self._last >= self.pace):
            self._last = now
            self.full_passes += 1
            self._run(True)
        elif self._soon:
            self._run(False)

    def _run_all(self) -> None:
        if not self._running:
            self._run(True)

    def _run(self, full: bool) -> None:
        """Run what is asked (``full``: both lists, the ``later`` work first; else the
        ``soon`` work only), including what that asks for, up to ``MAX_PER_PASS`` calls."""
        self._running = True
        batch: list[Callable[[], object]] = []
        i = n = 0
        try:
            while n < MAX_PER_PASS:
                if full and self._work:
                    batch, self._work = self._work, []
                elif self._soon:
                    batch, self._soon = self._soon, []
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
                rest = batch[i:]
                if full:
                    self._work[:0] = rest
                else:
                    self._soon[:0] = rest
            if (self._work or self._soon) and not self._driven:
                self._reactor.callLater(0, self._run_all)
