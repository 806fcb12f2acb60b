"""The timer index: messages that become visible at a due time (retries, delayed messages).

Theory of operation. A timer is one RocksDB record in CF ``timers`` under
``state.timer_key(due_ms, id)``: the due time first, so byte order is due order and
"everything due by now" is one range scan from the start of the family; then an id that
is never used twice, so two timers due in the same millisecond never share a key
(RocketMQ issue 10276: a key made of the due time alone dropped retries). Ids are
reserved in blocks of ``ID_BLOCK``: the end of the block, ``TIMER_IDS_KEY``, is put in
the journal's batch with the first timer of the block, so no timer is stored without the
reservation of its id, and adding a timer writes nothing at once (while the state store
refuses writes, the journal keeps it with the rest). The value is a ``TimerRecord``: a
RETRY (an entry given back to a queue with a backoff) or a DELAY (a published message
with a deliver-at time).

Timers are written through the queue journal's per-tick batch (``QueueStore``), so a
retry's timer and the deletion of its queue entry are one atomic write, and a delayed
message's timer is stored before the publisher's confirm (the batch commits before the
log's flusher can fire it). Nothing waits in memory but the earliest due time and the
timers' pins (``pins.py``: how many timers point into each block of 1,024 offsets of a
partition, counted from the index at start, for retention): a million pending timers
cost RocksDB space, not broker memory.

``arm(on_due)`` keeps one reactor call armed for ``LEAD_MS`` before the earliest due
time. When it fires, the records due within ``LEAD_MS`` are read in key order, in
chunks of ``RELEASE_CHUNK``, until ``RELEASE_BUDGET_S`` of the reactor call is spent (or
``RELEASE_BATCH`` are released); if more are due, the next reactor turn goes on, so
other clients' work goes between. A release costs about 25 µs of reactor time here
(reading the message, routing it, journaling its entries), so 100,000 timers due in one
second take 2.5-3 s to release: the lead is long enough that they are all staged before
the first is due, and the due second itself is left to making them ready and to the
consumers (with 2 s, the last few thousand were still being released while four pop
members received, and became ready up to 200-500 ms late: docs/decisions/0028). Each is handed to
``on_due`` with its due time, and deleted once ``on_due`` returned for it, in the same
tick, so what ``on_due`` wrote (queue entries, staged until the due time: ``queue.py``)
and the deletion commit together: a timer is released once, even across a kill -9.

When ``on_due`` raises for a timer, the others go on; that one is logged, counted
(``failed``) and stored again to be handed over after a backoff (``FAILED_BACKOFF_MS``,
doubling per failure up to ``FAILED_BACKOFF_MAX_MS``; it becomes visible that much
later), so a failure loses nothing. What ``on_due`` did before it raised stays done:
handing over again may repeat it (a queue that got the message may get it twice: at
least once, never lost). A StorageError (the disk, not a bug) is logged as a warning
line, anything else with its traceback.

While the state store refuses writes nothing is released: the journal's batch must be
committed before the index is scanned (a scan that missed this tick's deletions would
release those timers again). The release is tried again every ``FAILED_BACKOFF_MS``,
with one warning for the whole spell; the timers wait in the index.

Releasing ahead moves the cost of a release (reading the message, routing it,
journaling its entries) before the due time, so a burst of timers due in one second is
visible within milliseconds of each due time, not after a second of CPU. At most
``MAX_AHEAD`` released timers wait for their due time at once (the staged entries are
in memory); past that, timers are released when due.
"""

from __future__ import annotations

import logging
from collections import deque
from time import perf_counter
from typing import Any, Callable

from ..errors import StorageError
from ..state import (
    CF_METADATA,
    TIMER_IDS_KEY,
    TIMER_PREFIX,
    StateStore,
    pack_uint64,
    timer_key,
    timer_key_fields,
    unpack_uint64,
)
from ..state_pb2 import TimerRecord
from ..state import CF_TIMERS
from .journal import QueueStore
from .lateness import Lateness
from .pins import OffsetPins

log = logging.getLogger(__name__)

TIMER_END = TIMER_PREFIX[:-1] + b"\x01"  # above every timer key
ID_BLOCK = 1 << 16  # timer ids reserved at a time (one put of TIMER_IDS_KEY)
RELEASE_BATCH = 2_000  # due timers released per reactor turn, at most
RELEASE_CHUNK = 250  # timers read from the index at a time
RELEASE_BUDGET_S = 0.005  # a reactor call releases chunks until it has spent this
LEAD_MS = 5_000  # timers are released this long before they are due (decision 0028)
PIN_SHIFT = 10  # timers' pins count blocks of 1,024 offsets (memory per block, not per timer)
MAX_AHEAD = 250_000  # released timers not yet due, at most (a staged entry costs ~310 B: ~80 MB in all)
FAILED_BACKOFF_MS = 1_000  # a timer on_due failed for is handed over again this long after, at first
FAILED_BACKOFF_MAX_MS = 60_000  # doubling per failure up to this
OnDue = Callable[[int, TimerRecord], None]  # (due_ms, record)


class Timers:
    def __init__(self, queue_store: QueueStore, store: StateStore | None,
                 clock: Callable[[], int], reactor: Any = None, *,
                 failed: Callable[[], object] | None = None, pin_shift: int = PIN_SHIFT) -> None:
        self._qs = queue_store
        self._count_failure = failed  # called once per failed hand-over (a metric's inc)
        self._failures: dict[bytes, int] = {}  # key of a timer stored again after failing -> failures
        self._store = store
        self._clock = clock  # epoch ms
        self.reactor = reactor
        raw = None if store is None else store.get(CF_METADATA, TIMER_IDS_KEY)
        self._next_id = self._id_limit = 0 if raw is None else unpack_uint64(raw)  # ids below the limit are reserved
        self._refused = False  # a release failed because the state store refuses writes (logged once)
        self._mem: dict[bytes, bytes] = {}  # without a store: the records themselves
        self._earliest: int | None = None  # the earliest due time, if known to be pending
        # no timer key is below this: scans start here, not at the family's start, so
        # they do not step over the tombstones of timers already released
        self._low = TIMER_PREFIX
        self._on_due: OnDue | None = None
        self._call: Any = None
        self._call_at = 0
        self._ahead: deque[int] = deque()  # due times of timers released before due, in release order
        # the log offsets pending timers point at, in blocks (retention keeps them): counted
        # from the index once here, then kept as timers come and go
        self.pins = OffsetPins(pin_shift)
        # how late what they release becomes ready, kept by the queues (the broker's)
        self.lateness: Lateness | None = None
        if store is not None:
            for _, value in self._scan(None, TIMER_PREFIX):
                rec = TimerRecord.FromString(value)
                self.pins.add(rec.topic, rec.partition, rec.offset)

    # -- writing -------------------------------------------------------------------------

    def add(self, due_ms: int, record: TimerRecord) -> bytes:
        """Keep ``record`` until ``due_ms`` (epoch ms); returns its key."""
        key = timer_key(due_ms, self._take_id())
        if key < self._low:
            self._low = key
        value = record.SerializeToString()
        self.pins.add(record.topic, record.partition, record.offset)
        if self._store is None:
            self._mem[key] = value
        else:
            self._qs.put_timer(key, value)
        if self._earliest is None or due_ms < self._earliest:
            self._earliest = due_ms
            self._rearm()
        return key

    def _take_id(self) -> int:
        if self._next_id >= self._id_limit:  # a new block, reserved in the batch of its first timer
            self._id_limit = self._next_id + ID_BLOCK
            if self._store is not None:
                self._qs.put_metadata(TIMER_IDS_KEY, pack_uint64(self._id_limit))
        tid = self._next_id
        self._next_id += 1
        return tid

    # -- reading -------------------------------------------------------------------------

    def due(self, now_ms: int, limit: int = RELEASE_BATCH) -> list[tuple[bytes, int, TimerRecord]]:
        """Up to ``limit`` timers due at ``now_ms`` or before, earliest first, as
        (key, due_ms, record). They stay stored until ``remove``."""
        out = []
        for key, value in self._scan(timer_key(now_ms + 1, 0)):
            out.append((key, timer_key_fields(key)[0], TimerRecord.FromString(value)))
            if len(out) >= limit:
                break
        return out

    def remove(self, key: bytes, record: TimerRecord) -> None:
        """Delete the timer at ``key`` (``record``: its record, as ``due`` gave it)."""
        self.pins.remove(record.topic, record.partition, record.offset)
        if self._store is None:
            self._mem.pop(key, None)
        else:
            self._qs.delete_timer(key)

    def forget_topic(self, topic: str) -> int:
        """Delete every timer pointing into ``topic`` (deleted with force: its offsets will
        be given again), with its pins; returns how many. A scan of every timer: a
        topic deletion, not a hot path."""
        n = 0
        for key, value in list(self._scan(None, TIMER_PREFIX)):
            if TimerRecord.FromString(value).topic == topic:
                if self._store is None:
                    self._mem.pop(key, None)
                else:
                    self._qs.delete_timer(key)
                n += 1
        self.pins.forget_topic(topic)
        return n

    def pinned_from(self, topic: str, partition: int) -> int | None:
        """The lowest offset a pending timer may point at in (topic, partition) (the
        start of its block of ``1 << PIN_SHIFT`` offsets; None: none). Retention keeps
        the segments from there. No scan: the pins are kept as timers come and go."""
        return self.pins.floor(topic, partition)

    def earliest(self) -> int | None:
        """The due time of the earliest stored timer (None: no timers)."""
        for key, _ in self._scan(None):
            return timer_key_fields(key)[0]
        return None

    def pending(self) -> int:
        """How many timers are stored (a scan: for tests and admin, not hot paths)."""
        return sum(1 for _ in self._scan(None, TIMER_PREFIX))

    def _scan(self, end: bytes | None, start: bytes | None = None) -> Any:
        if start is None:
            start = self._low
        if self._store is None:
            return ((k, self._mem[k]) for k in sorted(self._mem) if k >= start and (end is None or k < end))
        self._qs.commit()  # what this tick wrote is visible to the scan
        return self._store.scan_range(CF_TIMERS, start, TIMER_END if end is None else end)

    # -- firing --------------------------------------------------------------------------

    def arm(self, on_due: OnDue) -> None:
        """Release due timers to ``on_due`` from now on (needs the reactor)."""
        self._on_due = on_due
        self._earliest = self.earliest()
        self._rearm()

    def disarm(self) -> None:
        self._on_due = None
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _room(self, now: int) -> int:
        """How many more timers may be released before they are due."""
        ahead = self._ahead
        while ahead and ahead[0] <= now:
            ahead.popleft()
        return MAX_AHEAD - len(ahead)

    def _rearm(self) -> None:
        if self._on_due is None or self.reactor is None or self._earliest is None:
            return
        now = self._clock()
        if self._room(now) > 0:
            at = self._earliest - LEAD_MS
        else:  # when the first released ahead is due, or the earliest is
            at = min(self._earliest, self._ahead[0])
        if self._call is not None and self._call.active():
            if self._call_at <= at:
                return
            self._call.cancel()
        self._call_at = at
        self._call = self.reactor.callLater(max(0.0, (at - now) / 1000.0), self._fire)

    def _fire(self) -> None:
        """Release what is due within ``LEAD_MS``, in key order: chunks of
        ``RELEASE_CHUNK`` until ``RELEASE_BUDGET_S`` of this reactor call is spent (or
        ``RELEASE_BATCH`` are released); then again in the next turn if more are due, so
        that other clients' work goes between."""
        self._call = None
        on_due = self._on_due
        if on_due is None:
            return
        try:
            self._release(on_due)
        except StorageError as e:  # the journal's batch was refused before a scan
            if not self._refused:
                self._refused = True
                log.warning("due timers (retries, delayed messages) are not released while the state store "
                            "refuses writes; tried again every %d ms: %s", FAILED_BACKOFF_MS, e)
            if self._call is not None and self._call.active():
                self._call.cancel()
            self._call_at = self._clock() + FAILED_BACKOFF_MS
            self._call = self.reactor.callLater(FAILED_BACKOFF_MS / 1000.0, self._fire)
            return
        self._refused = False

    def _release(self, on_due: OnDue) -> None:
        now = self._clock()
        room = self._room(now)
        limit = min(RELEASE_BATCH, room) if room > 0 else RELEASE_BATCH
        horizon = now + LEAD_MS if room > 0 else now
        stop_at = perf_counter() + RELEASE_BUDGET_S
        ahead = self._ahead
        released = 0
        full = False
        while released < limit:
            want = min(RELEASE_CHUNK, limit - released)
            batch = self.due(horizon, want)
            for key, due, rec in batch:
                try:
                    on_due(due, rec)
                except Exception as e:
                    self._failed(key, due, rec, now, e)
                    continue
                self.remove(key, rec)
                if due > now:
                    ahead.append(due)
            released += len(batch)
            full = len(batch) == want
            if batch:  # released in key order: nothing is left below the last one
                self._low = max(self._low, batch[-1][0] + b"\x00")
            if not full or perf_counter() >= stop_at:
                break
        if self._call is not None and self._call.active():  # armed by a failed timer's add
            self._call.cancel()
        self._call = None
        self._earliest = self.earliest()
        if full and self._earliest is not None:
            self._call_at = now  # more to release: next turn
            self._call = self.reactor.callLater(0, self._fire)
        else:
            self._rearm()

    def _failed(self, key: bytes, due: int, rec: TimerRecord, now: int, error: Exception) -> None:
        """``on_due`` raised ``error`` for the timer at ``key``: store it again, to be
        handed over after a backoff that doubles per failure; log (a StorageError as a
        warning line, anything else with its traceback) and count it."""
        failures = self._failures.pop(key, 0) + 1
        backoff = min(FAILED_BACKOFF_MS << min(failures - 1, 16), FAILED_BACKOFF_MAX_MS)
        text = "handing over the timer due at %d for %s/%d offset %d failed (%d times); again in %d ms"
        args = (due, rec.topic, rec.partition, rec.offset, failures, backoff)
        if isinstance(error, StorageError):
            log.warning(text + ": %s", *args, error)
        else:
            log.exception(text, *args)
        if self._count_failure is not None:
            self._count_failure()
        self.remove(key, rec)
        # released LEAD_MS ahead of its (new) due time: that is ``backoff`` from now
        self._failures[self.add(now + LEAD_MS + backoff, rec)] = failures
