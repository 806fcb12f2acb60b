"""Memory a burst left behind, given back once the broker has been quiet a while.

Theory of operation. After a burst (a backlog published, then drained) some memory is
held that nothing uses until the next one:

- RocksDB keeps what was written in memtables until one fills (64 MiB each): the queue
  entries' records, deleted since, hold that memory for good.
- The message stores keep the last log batches they decoded (``queues/msgstore.py``),
  for a queue drained in order: thousands of small records.
- Topic exchanges cache the route of each routing key they saw (``routing/matchers.py``):
  made during the burst, small objects that would hold the allocator's arenas the burst
  filled (decision 0027).
- Connections closed since the last full collection wait in reference cycles (protocol
  and transport, session and callbacks): ``server.tune_gc`` makes full collections
  rare, and an idle broker allocates too little to run one.

None of it is worth giving back while the work goes on. ``QuietSpell.check`` runs once a
second (``Broker._check_resources``): once ``activity()`` (a count that moves with the
work: the log's appends, the queue journal's commits, the message stores' log reads,
connections closed; appends count because messages through queues that journal
nothing, an MQTT clean session's, are work too)
has not moved for ``QUIET_SECONDS``, ``Leftovers.release`` runs, once per quiet spell.
What it frees goes back to the system with the next trim of ``memory.py``.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .queues.msgstore import MessageStore
    from .routing.router import Router
    from .state import StateStore

log = logging.getLogger(__name__)

QUIET_SECONDS = 10.0
MEMTABLE_BYTES = 8 << 20  # memtables worth writing out when quiet


class QuietSpell:
    """Calls ``release`` once ``activity()`` has not moved for ``quiet_seconds``, and
    again only after it moved."""

    def __init__(self, activity: Callable[[], int], release: Callable[[], None], *,
                 quiet_seconds: float = QUIET_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.activity = activity
        self.release = release
        self.quiet_seconds = quiet_seconds
        self.clock = clock
        self._seen = -1
        self._since = 0.0  # 0: released in this spell (or no spell yet)
        self.spells = 0  # releases run (for tests)

    def check(self) -> None:
        seen = self.activity()
        if seen != self._seen:
            self._seen, self._since = seen, self.clock()
            return
        if self._since and self.clock() - self._since >= self.quiet_seconds:
            self._since = 0.0
            self.spells += 1
            self.release()


class Leftovers:
    """What a quiet broker gives back (``release``): memtables written out (in RocksDB's
    background thread) when they hold more than MEMTABLE_BYTES, the message stores'
    decoded batches, the routers' cached routes, and, when connections closed since the last time, a full
    collection (it walks every object made since start: about 140 ms with a million
    queued entries, so not for nothing)."""

    def __init__(self, state: Callable[[], StateStore | None], stores: Callable[[], Iterable[MessageStore]],
                 closes: Callable[[], int], routers: Callable[[], Iterable[Router]] = lambda: ()) -> None:
        self.state = state
        self.stores = stores
        self.closes = closes
        self.routers = routers
        self._closes_seen = 0

    def release(self) -> None:
        state = self.state()
        if state is not None and state.failed is None and state.memtable_bytes() > MEMTABLE_BYTES:
            log.info("state store quiet: its memtables are written out to give their memory back")
            state.flush_memtables()
        batches = sum(s.drop_batches() for s in self.stores())
        routes = sum(r.forget_routes() for r in self.routers())
        closes = self.closes()
        if closes == self._closes_seen:
            log.debug("quiet: %d decoded log batches and %d cached routes dropped", batches, routes)
            return
        self._closes_seen = closes
        started = time.perf_counter()
        found = gc.collect()
        log.debug("quiet: %d decoded log batches and %d cached routes dropped; full collection, %d objects "
                  "unreachable, %.1f ms", batches, routes, found, (time.perf_counter() - started) * 1000)
