"""Queue entries in RocksDB (CF ``queues``): what a queue must find again after a restart.

One record per unsettled entry, key ``state.queue_entry_key(vhost, queue, seq)``,
value a fixed-width struct (``pack_entry``): where the message is, its size, priority,
expiry, delivery count and the deadline of its lease (0: none); a staged entry's record
adds its visible time. Publishing puts the
record, settling deletes it. After a restart the records left are exactly the unsettled
entries (``Queue.restore``): those leased with a deadline (an invisible time) stay
leased until it, the others are ready.

The delivery count survives a restart in both ways a queue is kept
(``journal(..., exact=...)``):

- **exact** (a queue with priorities): every delivery rewrites the entry's record.
- otherwise the **delivered mark**, one record per queue (``state.queue_delivered_key``):
  the highest seq ever delivered, written at most once per batch. Such a queue hands
  entries out in seq order (requeued ones go back to their old place), so an entry
  at or below the mark whose record says "never delivered" was delivered once
  (``QueueStore.load``). Every other change of the count is written to the record: a
  lease with a deadline, a redelivery (count 2 and up), a requeue, and a delivery out
  of seq order (through a consumer filter's view), which leaves the mark where it is. The common case, a
  message delivered once and acked, costs a put and a delete, not a put, a rewrite and
  a delete.

Writes are collected and committed as one ``StateBatch`` at most once per
``COMMIT_INTERVAL`` (decision 0057), before a turn's appends are written (the log calls
``commit_due`` first: ``LogManager.before_drain`` and ``Partition.before_write``; a commit
the store refuses refuses those appends, its changes are kept for the next one, and every
turn tries again until one is taken), never synced on the confirm path: the log is the
truth, the journal a checkpoint (decision 0045). The log's end-of-turn drain notes a
*mark* per partition appended to in the turn (``state.journal_mark_key``, its end then),
which the next batch carries: every record below it has had its queue entries and timers
written in this batch or an earlier one. RocksDB writes its write-ahead log in order, so a power loss leaves a
prefix of the batches, and the records at or past a partition's mark are exactly those
whose entries and timers may be lost: start-up routes them again from the log
(``redo.py``). A partition's first mark is written with a synced batch, once (a missing
mark means "nothing to redo"), and only partitions of topics behind an exchange or read
by a pop group get marks (``journaled``). Changes with no confirm behind them (deliveries,
acks) may be lost to a power loss (a redelivery). A put followed by a delete of the same
key between two batches cancels out before it reaches RocksDB. Timers (CF ``timers``,
``timers.py``) are written through the same batch, so an entry given back with a
backoff leaves the queue and becomes a timer in one atomic write, with the reservation
of the block of timer ids it is the first of.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import StorageError
from .queue import Entry
from ..state import (
    CF_METADATA,
    CF_QUEUES,
    CF_TIMERS,
    JOURNAL_MARK_PREFIX,
    QUEUE_ENTRY_PREFIX,
    TIMER_PREFIX,
    StateStore,
    journal_mark_fields,
    journal_mark_key,
    journal_marks_prefix,
    pack_uint64,
    queue_delivered_key,
    queue_entries_prefix,
    queue_entry_key,
    queue_entry_seq,
    unpack_uint64,
)
from ..state_pb2 import TimerRecord
from ..tick import tick_of

# The broker's journal writes a turn's changes at most this often (decision 0057): under a
# steady load one batch then carries many turns, and an entry settled within it (put,
# then deleted) never reaches RocksDB. A kill -9 may bring back what was settled in the
# last interval (at-least-once), as a power loss already could.
COMMIT_INTERVAL = 0.010

# partition, offset, size, priority, expires_ms, deliveries; then the topic
_ENTRY_V0 = struct.Struct(">IqIBqI")
# a version byte (0x81: a partition's first byte is below 0x80), the fields of
# _ENTRY_V0, then the lease deadline; then the topic
_ENTRY_V1_TAG = 0x81
_ENTRY = struct.Struct(">BIqIBqIq")
# a staged entry (queue.py): version byte 0x82, the fields of _ENTRY, then the visible
# time; then the topic
_ENTRY_V2_TAG = 0x82
_STAGED = struct.Struct(">BIqIBqIqq")


_TOPIC_BYTES: dict[str, bytes] = {}


def pack_entry(e: Entry, deadline_ms: int = 0) -> bytes:
    topic = _TOPIC_BYTES.get(e.topic)
    if topic is None:
        if len(_TOPIC_BYTES) > 4096:
            _TOPIC_BYTES.clear()
        topic = _TOPIC_BYTES[e.topic] = e.topic.encode()
    if e.visible_ms:
        return _STAGED.pack(_ENTRY_V2_TAG, e.partition, e.offset, e.size, e.priority, e.expires_ms, e.deliveries,
                            deadline_ms, e.visible_ms) + topic
    return _ENTRY.pack(_ENTRY_V1_TAG, e.partition, e.offset, e.size, e.priority, e.expires_ms, e.deliveries,
                       deadline_ms) + topic


def unpack_entry(seq: int, raw: bytes) -> tuple[Entry, int]:
    """An entry record: the entry and its lease deadline (0: none)."""
    visible = 0
    if raw[0] == _ENTRY_V1_TAG:
        _, partition, offset, size, priority, expires_ms, deliveries, deadline = _ENTRY.unpack_from(raw)
        topic = raw[_ENTRY.size :].decode()
    elif raw[0] == _ENTRY_V2_TAG:
        _, partition, offset, size, priority, expires_ms, deliveries, deadline, visible = _STAGED.unpack_from(raw)
        topic = raw[_STAGED.size :].decode()
    else:
        partition, offset, size, priority, expires_ms, deliveries = _ENTRY_V0.unpack_from(raw)
        deadline, topic = 0, raw[_ENTRY_V0.size :].decode()
    return Entry(seq, topic, partition, offset, size, priority, expires_ms, deliveries, visible), deadline


def forget_from(store: StateStore, topic: str, partition: int, offset: int) -> tuple[int, int]:
    """Delete, in one write, every queue entry and timer that points at ``offset`` or
    later in ``topic``/``partition``: recovery cut the log there, and the offsets will be
    given to new records (run at start, before queues are loaded). Returns (entries,
    timers) deleted."""
    entries: list[bytes] = []
    for key, raw in store.scan_prefix(CF_QUEUES, QUEUE_ENTRY_PREFIX):
        e, _ = unpack_entry(queue_entry_seq(key), raw)
        if e.offset >= offset and e.partition == partition and e.topic == topic:
            entries.append(key)
    timers: list[bytes] = []
    for key, raw in store.scan_prefix(CF_TIMERS, TIMER_PREFIX):
        rec = TimerRecord.FromString(raw)
        if rec.offset >= offset and rec.partition == partition and rec.topic == topic:
            timers.append(key)
    mark_key = journal_mark_key(topic, partition)
    stored = store.get(CF_QUEUES, mark_key)
    mark_past = stored is not None and unpack_uint64(stored) > offset
    if entries or timers or mark_past:
        with store.batch(sync=True) as b:
            b.delete_many(CF_QUEUES, entries)
            b.delete_many(CF_TIMERS, timers)
            if mark_past:  # the records from ``offset`` on are gone: the next ones get their offsets
                b.put(CF_QUEUES, mark_key, pack_uint64(offset))
    return len(entries), len(timers)


def stored_marks(store: StateStore) -> dict[tuple[str, int], int]:
    """Every partition's journal mark, as (topic, partition) -> offset."""
    return {journal_mark_fields(k): unpack_uint64(v) for k, v in store.scan_prefix(CF_QUEUES, JOURNAL_MARK_PREFIX)}


def _always(topic: str) -> bool:
    return True


class QueueStore:
    """Every queue's journal on one state store; ``reactor`` None commits at once.

    ``interval`` (seconds; the broker's is ``COMMIT_INTERVAL``): the turns' own commits
    (``commit_due``: the end of a turn, the log's drain) write at most once per interval
    while the store takes writes; 0: every turn. Every other ``commit`` writes at once."""

    def __init__(self, store: StateStore | None, reactor: Any = None, interval: float = 0.0) -> None:
        self.store = store
        self.reactor = reactor
        self._tick = None if reactor is None else tick_of(reactor)
        self.interval = interval if reactor is not None else 0.0
        self._written_at = -1e18  # reactor.seconds() when the last batch was written
        self._due: Any = None  # the DelayedCall that writes a deferred batch no turn wrote
        self._refused = False  # the last batch was refused: every turn tries again
        self._puts: dict[bytes, bytes] = {}
        self._deletes: set[bytes] = set()
        self._new: set[bytes] = set()  # keys first put since the last commit
        self._timer_puts: dict[bytes, bytes] = {}  # CF timers, committed with the rest
        self._timer_deletes: set[bytes] = set()
        self._metadata_puts: dict[bytes, bytes] = {}  # CF metadata (the timers' id blocks), the same
        self._scheduled = False
        self.commits = 0  # batches written (the faults check watches it for quiet spells)
        # the journal marks as stored (``commit(appended)``), read at start (``load_marks``)
        self.marks: dict[tuple[str, int], int] = {}
        # partitions appended to whose marks are not written yet, each with its end at the
        # log's drain (every record below it routed): any batch may write them
        self._unmarked: dict[Any, int] = {}
        # whether a topic's records can make queue entries or timers (the broker's: it backs
        # an exchange, the default one too, or a pop group reads it); no other topic's
        # partitions get marks
        self.journaled: Callable[[str], bool] = _always
        self.first_marks = 0  # batches synced because they held a partition's first mark

    def journal(self, vhost: str, queue: str, *, exact: bool = True) -> QueueStoreJournal:
        """``exact``: rewrite an entry per delivery; else only what the delivered mark
        cannot tell (both keep the mark)."""
        return QueueStoreJournal(self, queue_entries_prefix(vhost, queue), queue_delivered_key(vhost, queue),
                                 self.delivered_mark(vhost, queue), exact)

    def delivered_mark(self, vhost: str, queue: str) -> int:
        """The highest seq ever delivered from a queue; -1: none."""
        if self.store is None:
            return -1
        key = queue_delivered_key(vhost, queue)
        raw = self._puts.get(key) or self.store.get(CF_QUEUES, key)
        return -1 if raw is None else unpack_uint64(raw)

    def load(self, vhost: str, queue: str, *, exact: bool = False) -> tuple[list[tuple[Entry, int]], int]:
        """The unsettled entries of a queue with their lease deadlines and the seq
        numbering must go on from: above every seq ever delivered, so a receipt
        (seq, delivery) is never issued twice. Not ``exact``: entries at or below the
        delivered mark were delivered at least once."""
        if self.store is None:
            return [], 0
        self.commit()
        entries = [unpack_entry(queue_entry_seq(k), v)
                   for k, v in self.store.scan_prefix(CF_QUEUES, queue_entries_prefix(vhost, queue))]
        mark = self.delivered_mark(vhost, queue)
        if not exact:
            for e, _ in entries:  # (a staged entry was never delivered: the mark may pass it)
                if e.seq <= mark and not e.deliveries and not e.visible_ms:
                    e.deliveries = 1
        return entries, max(mark + 1, max((e.seq + 1 for e, _ in entries), default=0))

    def drop(self, vhost: str, queue: str) -> None:
        """Delete every record of a deleted queue, with the journal's next commit (kept
        with its other changes while the store refuses writes)."""
        if self.store is None:
            return
        prefix = queue_entries_prefix(vhost, queue)
        for key in [k for k in self._puts if k.startswith(prefix)]:
            self._delete(key)
        for key, _ in self.store.scan_prefix(CF_QUEUES, prefix):
            self._new.discard(key)
            self._deletes.add(key)
        mark = queue_delivered_key(vhost, queue)
        self._puts.pop(mark, None)
        self._new.discard(mark)
        self._deletes.add(mark)
        self._schedule()

    def _put(self, key: bytes, value: bytes, new: bool) -> None:
        if new:
            self._new.add(key)
        self._puts[key] = value
        self._schedule()

    def _delete(self, key: bytes) -> None:
        self._puts.pop(key, None)
        if key in self._new:
            self._new.discard(key)  # never written: nothing to delete
        else:
            self._deletes.add(key)
        self._schedule()

    def _schedule(self) -> None:
        if self._tick is None:
            self.commit()
        elif not self._scheduled:
            self._scheduled = True
            self._tick.later(self._commit_at_tick_end)

    def put_timer(self, key: bytes, value: bytes) -> None:
        """A timer record (CF timers), written with this tick's queue changes."""
        self._timer_puts[key] = value
        self._schedule()

    def put_metadata(self, key: bytes, value: bytes) -> None:
        """A record of CF metadata written with this tick's queue changes (the timers'
        reserved ids, in the batch of the first timers that use them)."""
        self._metadata_puts[key] = value
        self._schedule()

    def delete_timer(self, key: bytes) -> None:
        if self._timer_puts.pop(key, None) is None:
            self._timer_deletes.add(key)
        self._schedule()

    @property
    def pending(self) -> bool:
        """Changes not yet committed."""
        return bool(self._puts or self._deletes or self._timer_puts or self._timer_deletes or self._metadata_puts)

    def load_marks(self) -> dict[tuple[str, int], int]:
        """The stored journal marks (kept as ``marks``)."""
        if self.store is not None:
            self.marks = stored_marks(self.store)
        return self.marks

    def set_marks(self, marks: dict[tuple[str, int], int | None], *, sync: bool = False) -> None:
        """Write ``marks`` ((topic, partition) -> offset; None: deleted) with what is
        pending, as one batch (start-up's redo, a topic's deletion)."""
        self._write(marks, sync)

    def forget_marks(self, topic: str) -> None:
        """Delete the marks of a deleted topic's partitions (its offsets will be given again)."""
        gone: dict[tuple[str, int], int | None] = {k: None for k in self.marks if k[0] == topic}
        if self.store is not None:
            gone.update({journal_mark_fields(k): None
                         for k, _ in self.store.scan_prefix(CF_QUEUES, journal_marks_prefix(topic))})
        self._unmarked = {p: end for p, end in self._unmarked.items() if p.topic != topic}
        if gone:
            self._write(gone, True)

    def _commit_at_tick_end(self) -> None:
        try:
            self.commit_due()
        except StorageError:
            pass  # the store logged it; the changes are kept for the next commit

    def commit_due(self, appended: Iterable[Any] = ()) -> None:
        """A turn's commit (the end of a turn, the log's drain, a partition's write):
        ``commit(appended)`` if ``interval`` has passed since the last batch (or the last
        was refused), else kept for a later one, which a timer writes if no turn does.
        Between batches nothing is on disk of what the turns changed, and a put and the
        delete of the same key cancel out: the log is the truth, the journal a
        checkpoint, and the records past a partition's mark are routed again at start
        (``redo.py``; decision 0057)."""
        wait = self._wait() if self.interval > 0.0 and not self._refused else 0.0
        if wait:
            self._scheduled = False
            self._note_ends(appended)
            if self._due is None and (self.pending or self._unmarked):
                # a fallback, an interval after the batch is due: under load a turn past
                # the interval writes it (no wake of its own, no timer churn)
                self._due = self.reactor.callLater(wait + self.interval, self._commit_deferred)
            return
        self.commit(appended)

    def _wait(self) -> float:
        """Seconds until the next batch is due (0.0: now; a clock that went back: now)."""
        wait = self._written_at + self.interval - self.reactor.seconds()
        return wait if 0.0 < wait <= self.interval else 0.0

    def _commit_deferred(self) -> None:
        """The fallback: what no turn wrote, written now with the marks it owes; if a
        turn wrote a batch meanwhile and more changed since, again an interval after
        that batch is due."""
        self._due = None
        if self.store is None or self.store.closed or not (self.pending or self._unmarked):
            return
        wait = self._wait()
        if wait:
            self._due = self.reactor.callLater(wait + self.interval, self._commit_deferred)
            return
        try:
            self.commit()
        except StorageError:
            pass  # kept; the next turn's commit tries again

    def commit(self, appended: Iterable[Any] = ()) -> None:
        """Write what changed since the last commit as one batch, with the marks owed.
        StorageError: the store refused it; the changes and marks are kept, and go with
        the next commit.

        ``appended``: partitions appended to since the last such call, every record of
        which has been routed (its entries and timers are in this batch or an earlier
        one): each owes its mark, its ``next_offset`` now. Only the log's end-of-turn
        drain passes them (no publish is half done then: an end taken in the middle of
        one, from a read, could pass a record not yet routed); a batch written later
        (``commit_due``'s deferred one, or any other) carries those ends. A partition's
        first mark is written with a synced batch, once: a missing mark means "nothing
        to redo"."""
        self._scheduled = False
        self._note_ends(appended)
        marks = self._marks_owed() if self._unmarked else None
        if not self.pending and not marks:
            self._unmarked.clear()  # each is at its mark already
            return
        try:
            self._write(marks, False)
        except StorageError:
            self._refused = True
            raise
        self._refused = False
        self._unmarked.clear()
        if self.reactor is not None:
            self._written_at = self.reactor.seconds()

    def _note_ends(self, appended: Iterable[Any]) -> None:
        unmarked = self._unmarked
        for p in appended:
            unmarked[p] = p.next_offset

    def _marks_owed(self) -> dict[tuple[str, int], int | None]:
        out: dict[tuple[str, int], int | None] = {}
        known, journaled = self.marks, self.journaled
        for p, end in self._unmarked.items():
            if p.failure is not None:  # closed (its topic deleted) or refusing appends
                continue
            at = (p.topic, p.index)
            old = known.get(at)
            if old != end and (old is not None or journaled(p.topic)):
                out[at] = end
        return out

    def _write(self, marks: dict[tuple[str, int], int | None] | None, sync: bool) -> None:
        puts, deletes = self._puts, self._deletes
        timer_puts, timer_deletes, metadata = self._timer_puts, self._timer_deletes, self._metadata_puts
        self._puts, self._deletes, self._new = {}, set(), set()
        self._timer_puts, self._timer_deletes, self._metadata_puts = {}, set(), {}
        if self.store is None:
            return
        known = self.marks
        first = False
        if marks:
            first = any(known.get(at) is None for at, end in marks.items() if end is not None)
            self.first_marks += first
        try:
            with self.store.batch(sync=sync or first) as b:
                b.delete_many(CF_QUEUES, deletes)
                b.put_many(CF_QUEUES, puts.items())
                if timer_puts or timer_deletes:
                    b.delete_many(CF_TIMERS, timer_deletes)
                    b.put_many(CF_TIMERS, timer_puts.items())
                if metadata:
                    b.put_many(CF_METADATA, metadata.items())
                if marks:
                    b.delete_many(CF_QUEUES, [journal_mark_key(*at) for at, end in marks.items() if end is None])
                    b.put_many(CF_QUEUES, [(journal_mark_key(*at), pack_uint64(end))
                                           for at, end in marks.items() if end is not None])
            self.commits += 1
            if marks:
                for at, end in marks.items():
                    if end is None:
                        known.pop(at, None)
                    else:
                        known[at] = end
        except StorageError:
            # Kept for the next commit (nothing changed since the swap: one thread). No
            # key counts as new any more: a failed batch may still be found in RocksDB's
            # write-ahead log when it is reopened, so a later settle must delete it.
            self._puts, self._deletes = puts, deletes
            self._timer_puts, self._timer_deletes, self._metadata_puts = timer_puts, timer_deletes, metadata
            raise


class QueueStoreJournal:
    """``queue.QueueJournal`` for one queue."""

    __slots__ = ("_qs", "_prefix", "_mark_key", "_mark", "_exact")

    def __init__(self, qs: QueueStore, prefix: bytes, mark_key: bytes, mark: int, exact: bool) -> None:
        self._qs = qs
        self._prefix = prefix
        self._mark_key = mark_key
        self._mark = mark
        self._exact = exact  # rewrite the entry per delivery

    def added(self, entry: Entry) -> None:  # _put, inlined: once per message and queue
        qs = self._qs
        key = self._prefix + _SEQ_PACK(entry.seq)
        qs._new.add(key)
        qs._puts[key] = pack_entry(entry)
        if not qs._scheduled:
            qs._schedule()

    def delivered(self, entry: Entry, deadline_ms: int, in_order: bool = True) -> None:
        """``in_order`` False: handed out ahead of ready entries below it (a consumer
        filter's view), so the mark may not pass it: its record says it was delivered."""
        if self._exact or deadline_ms or entry.deliveries > 1 or not in_order:
            self._qs._put(self._prefix + _SEQ_PACK(entry.seq), pack_entry(entry, deadline_ms), False)
        if in_order and entry.seq > self._mark:
            self._mark = entry.seq
            self._qs._put(self._mark_key, _SEQ_PACK(entry.seq), False)

    def unleased(self, entry: Entry) -> None:
        self._qs._put(self._prefix + _SEQ_PACK(entry.seq), pack_entry(entry), False)

    def settled(self, seq: int) -> None:
        self._qs._delete(self._prefix + _SEQ_PACK(seq))


_SEQ_PACK = struct.Struct(">Q").pack
assert queue_entry_key("v", "q", 7) == queue_entries_prefix("v", "q") + _SEQ_PACK(7)
