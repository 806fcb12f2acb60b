"""Queue entries in RocksDB (CF ``queues``): what a queue must find again after a restart.

One record per unsettled entry, key ``state.queue_entry_key(vhost, queue, seq)``,
value a fixed-width struct (``pack_entry``). Publishing puts the record, settling
deletes it. After a restart the records left are exactly the unsettled entries
(``Queue.restore``).

Deliveries are kept in one of two ways (``journal(..., exact=...)``):

- **exact** (a queue with x-delivery-limit or x-max-priority): a delivery rewrites the
  entry's record with its delivery count, so the limit counts across restarts.
- otherwise a **delivered mark**, one record per queue (``state.queue_delivered_key``):
  the highest seq ever delivered, written at most once per tick. At a restart every
  entry at or below the mark comes back redelivered (delivery count 1), and numbering
  goes on above it (``QueueStore.load``). Such a queue hands entries out in seq order
  (requeued ones go back to their old place), so an entry below the mark was delivered;
  the count past 1 is not kept, as nothing reads it. This saves a put per delivery:
  a put, a delete and a RocksDB write for every message consumed became a delete.

Writes are collected in one ``StateBatch`` and committed once per reactor tick, before
the log's flusher can fire a publisher confirm for the same tick (a sync flush takes at
least one fdatasync), and without a WAL sync: a process crash (kill -9) keeps what
was written; a power loss may lose the last ticks of queue changes, as RabbitMQ's queue
index may. A put followed by a delete of the same key within one tick cancels out
before it reaches RocksDB.
"""

from __future__ import annotations

import struct
from typing import Any

from .queue import Entry
from ..state import (
    StateStore,
    queue_delivered_key,
    queue_entries_prefix,
    queue_entry_key,
    queue_entry_seq,
    unpack_uint64,
)
from ..tick import tick_of

CF_QUEUES = "queues"
_ENTRY = struct.Struct(">IqIBqI")  # partition, offset, size, priority, expires_ms, deliveries; then topic


_TOPIC_BYTES: dict[str, bytes] = {}


def pack_entry(e: Entry) -> bytes:
    topic = _TOPIC_BYTES.get(e.topic)
    if topic is None:
        if len(_TOPIC_BYTES) > 4096:
            _TOPIC_BYTES.clear()
        topic = _TOPIC_BYTES[e.topic] = e.topic.encode()
    return _ENTRY.pack(e.partition, e.offset, e.size, e.priority, e.expires_ms, e.deliveries) + topic


def unpack_entry(seq: int, raw: bytes) -> Entry:
    partition, offset, size, priority, expires_ms, deliveries = _ENTRY.unpack_from(raw)
    return Entry(seq, raw[_ENTRY.size :].decode(), partition, offset, size, priority, expires_ms, deliveries)


class QueueStore:
    """Every queue's journal on one state store; ``reactor`` None commits at once."""

    def __init__(self, store: StateStore | None, reactor: Any = None) -> None:
        self.store = store
        self.reactor = reactor
        self._tick = None if reactor is None else tick_of(reactor)
        self._puts: dict[bytes, bytes] = {}
        self._deletes: set[bytes] = set()
        self._new: set[bytes] = set()  # keys first put since the last commit
        self._scheduled = False

    def journal(self, vhost: str, queue: str, *, exact: bool = True) -> QueueStoreJournal:
        """``exact``: rewrite an entry per delivery; else keep the queue's delivered mark."""
        mark = None if exact else queue_delivered_key(vhost, queue)
        return QueueStoreJournal(self, queue_entries_prefix(vhost, queue), mark, self.delivered_mark(vhost, queue))

    def delivered_mark(self, vhost: str, queue: str) -> int:
        """The highest seq delivered from a queue kept with a delivered mark; -1: none."""
        if self.store is None:
            return -1
        key = queue_delivered_key(vhost, queue)
        raw = self._puts.get(key) or self.store.get(CF_QUEUES, key)
        return -1 if raw is None else unpack_uint64(raw)

    def load(self, vhost: str, queue: str) -> tuple[list[Entry], int]:
        """The unsettled entries of a queue (those at or below its delivered mark as
        delivered once) and the seq numbering must go on from."""
        if self.store is None:
            return [], 0
        self.commit()
        entries = [unpack_entry(queue_entry_seq(k), v)
                   for k, v in self.store.scan_prefix(CF_QUEUES, queue_entries_prefix(vhost, queue))]
        mark = self.delivered_mark(vhost, queue)
        for e in entries:
            if e.seq <= mark and not e.deliveries:
                e.deliveries = 1
        return entries, max(mark + 1, max((e.seq + 1 for e in entries), default=0))

    def drop(self, vhost: str, queue: str) -> None:
        """Delete every record of a deleted queue."""
        if self.store is None:
            return
        prefix = queue_entries_prefix(vhost, queue)
        self.commit()
        with self.store.batch() as b:
            for key, _ in self.store.scan_prefix(CF_QUEUES, prefix):
                b.delete(CF_QUEUES, key)
            b.delete(CF_QUEUES, queue_delivered_key(vhost, queue))

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
            self._tick.later(self.commit)

    def commit(self) -> None:
        self._scheduled = False
        puts, deletes = self._puts, self._deletes
        self._puts, self._deletes, self._new = {}, set(), set()
        if self.store is None or not (puts or deletes):
            return
        with self.store.batch() as b:
            b.delete_many(CF_QUEUES, deletes)
            b.put_many(CF_QUEUES, puts.items())


class QueueStoreJournal:
    """``queue.QueueJournal`` for one queue."""

    __slots__ = ("_qs", "_prefix", "_mark_key", "_mark")

    def __init__(self, qs: QueueStore, prefix: bytes, mark_key: bytes | None, mark: int) -> None:
        self._qs = qs
        self._prefix = prefix
        self._mark_key = mark_key  # None: exact (rewrite the entry per delivery)
        self._mark = mark

    def added(self, entry: Entry) -> None:  # _put, inlined: once per message and queue
        qs = self._qs
        key = self._prefix + _SEQ_PACK(entry.seq)
        qs._new.add(key)
        qs._puts[key] = pack_entry(entry)
        if not qs._scheduled:
            qs._schedule()

    def delivered(self, entry: Entry) -> None:
        if self._mark_key is None:
            self._qs._put(self._prefix + _SEQ_PACK(entry.seq), pack_entry(entry), False)
        elif entry.seq > self._mark:
            self._mark = entry.seq
            self._qs._put(self._mark_key, _SEQ_PACK(entry.seq), False)

    def settled(self, seq: int) -> None:
        self._qs._delete(self._prefix + _SEQ_PACK(seq))


_SEQ_PACK = struct.Struct(">Q").pack
assert queue_entry_key("v", "q", 7) == queue_entries_prefix("v", "q") + _SEQ_PACK(7)
