"""The timer index: messages that become visible at a due time (retries, delayed messages).

Theory of operation. A timer is one RocksDB record in CF ``timers`` under
``state.timer_key(due_ms, id)``: the due time first, so byte order is due order and
"everything due by now" is one range scan from the start of the family; then an id that
is never used twice (ids are reserved in blocks of ``ID_BLOCK`` by a synced put of
``TIMER_IDS_KEY``, as Kafka reserves producer ids), so two timers due in the same
millisecond never share a key (RocketMQ issue 10276: a key made of the due time alone
dropped retries). The value is a ``TimerRecord``: a RETRY (an entry given back to a
queue with a backoff) or a DELAY (a published message with a deliver-at time).

Timers are written through the queue journal's per-tick batch (``QueueStore``), so a
retry's timer and the deletion of its queue entry are one atomic write, and a delayed
message's timer is stored before the publisher's confirm (the batch commits before the
log's flusher can fire it). Nothing waits in memory but the earliest due time: a
million pending timers cost RocksDB space, not broker memory.

``arm(on_due)`` keeps one reactor call armed for the earliest due time. When it fires,
the due records are read in order, at most ``RELEASE_BATCH`` per reactor turn, deleted,
and handed to ``on_due`` in the same tick, so what ``on_due`` writes (queue entries) and
the deletions commit together: a timer is released once, even across a kill -9.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from ..state import (
    TIMER_IDS_KEY,
    TIMER_PREFIX,
    StateStore,
    pack_uint64,
    timer_key,
    timer_key_fields,
    unpack_uint64,
)
from ..state_pb2 import TimerRecord
from .journal import CF_TIMERS, QueueStore

log = logging.getLogger(__name__)

CF_METADATA = "metadata"
TIMER_END = TIMER_PREFIX[:-1] + b"\x01"  # above every timer key
ID_BLOCK = 1 << 16  # timer ids reserved per synced put
RELEASE_BATCH = 2_000  # due timers released per reactor turn (a turn of ~25 ms: other work goes between)
OnDue = Callable[[list[tuple[int, TimerRecord]]], None]  # [(due_ms, record)]


class Timers:
    def __init__(self, queue_store: QueueStore, store: StateStore | None,
                 clock: Callable[[], int], reactor: Any = None) -> None:
        self._qs = queue_store
        self._store = store
        self._clock = clock  # epoch ms
        self._reactor = reactor
        self._next_id = 0
        self._id_limit = 0  # ids below this are reserved
        self._mem: dict[bytes, bytes] = {}  # without a store: the records themselves
        self._earliest: int | None = None  # the earliest due time, if known to be pending
        # no timer key is below this: scans start here, not at the family's start, so
        # they do not step over the tombstones of timers already released
        self._low = TIMER_PREFIX
        self._on_due: OnDue | None = None
        self._call: Any = None
        self._call_at = 0

    # -- writing -------------------------------------------------------------------------

    def add(self, due_ms: int, record: TimerRecord) -> bytes:
        """Keep ``record`` until ``due_ms`` (epoch ms); returns its key."""
        key = timer_key(due_ms, self._take_id())
        if key < self._low:
            self._low = key
        value = record.SerializeToString()
        if self._store is None:
            self._mem[key] = value
        else:
            self._qs.put_timer(key, value)
        if self._earliest is None or due_ms < self._earliest:
            self._earliest = due_ms
            self._rearm()
        return key

    def _take_id(self) -> int:
        if self._next_id >= self._id_limit:
            start = 0
            if self._store is not None:
                raw = self._store.get(CF_METADATA, TIMER_IDS_KEY)
                start = 0 if raw is None else unpack_uint64(raw)
                self._store.put(CF_METADATA, TIMER_IDS_KEY, pack_uint64(start + ID_BLOCK), sync=True)
            else:
                start = self._id_limit
            self._next_id, self._id_limit = start, start + ID_BLOCK
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

    def remove(self, key: bytes) -> None:
        if self._store is None:
            self._mem.pop(key, None)
        else:
            self._qs.delete_timer(key)

    def floors(self, floors: dict[tuple[str, int], int]) -> None:
        """Lower ``floors[(topic, partition)]`` to the lowest offset a pending timer points
        at (retention keeps those segments). A scan of every timer: housekeeping calls it
        only when some segment is due for deletion."""
        for _, value in self._scan(None, TIMER_PREFIX):
            rec = TimerRecord.FromString(value)
            key = (rec.topic, rec.partition)
            low = floors.get(key)
            if low is None or rec.offset < low:
                floors[key] = rec.offset

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

    def _rearm(self) -> None:
        if self._on_due is None or self._reactor is None or self._earliest is None:
            return
        if self._call is not None and self._call.active():
            if self._call_at <= self._earliest:
                return
            self._call.cancel()
        self._call_at = self._earliest
        delay = max(0.0, (self._earliest - self._clock()) / 1000.0)
        self._call = self._reactor.callLater(delay, self._fire)

    def _fire(self) -> None:
        self._call = None
        on_due = self._on_due
        if on_due is None:
            return
        now = self._clock()
        batch = self.due(now)
        for key, _, _ in batch:
            self.remove(key)
        if batch:  # released in key order: nothing is left below the last one
            self._low = max(self._low, batch[-1][0] + b"\x00")
        if batch:
            try:
                on_due([(due, rec) for _, due, rec in batch])
            except Exception:
                log.exception("releasing %d due timers failed", len(batch))
        self._earliest = now if len(batch) >= RELEASE_BATCH else self.earliest()
        self._rearm()
