"""Queue entries in RocksDB (CF ``queues``): what a queue must find again after a restart.

One record per unsettled entry, key ``state.queue_entry_key(vhost, queue, seq)``,
value a fixed-width struct (``pack_entry``). Publishing puts the record, a delivery
rewrites it (the delivery count, so a message handed out before a restart comes back
redelivered and x-delivery-limit counts across restarts), settling deletes it. After
a restart the records left are exactly the unsettled entries (``Queue.restore``).

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
from .state import StateStore, queue_entries_prefix, queue_entry_key, queue_entry_seq
from .tick import tick_of

CF_QUEUES = "queues"
_ENTRY = struct.Struct(">IqIBqI")  # partition, offset, size, priority, expires_ms, deliveries; then topic


def pack_entry(e: Entry) -> bytes:
    return _ENTRY.pack(e.partition, e.offset, e.size, e.priority, e.expires_ms, e.deliveries) + e.topic.encode()


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

    def journal(self, vhost: str, queue: str) -> QueueStoreJournal:
        return QueueStoreJournal(self, queue_entries_prefix(vhost, queue))

    def load(self, vhost: str, queue: str) -> list[Entry]:
        if self.store is None:
            return []
        self.commit()
        return [unpack_entry(queue_entry_seq(k), v)
                for k, v in self.store.scan_prefix(CF_QUEUES, queue_entries_prefix(vhost, queue))]

    def drop(self, vhost: str, queue: str) -> None:
        """Delete every record of a deleted queue."""
        if self.store is None:
            return
        prefix = queue_entries_prefix(vhost, queue)
        self.commit()
        with self.store.batch() as b:
            for key, _ in self.store.scan_prefix(CF_QUEUES, prefix):
                b.delete(CF_QUEUES, key)

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
            for key in deletes:
                b.delete(CF_QUEUES, key)
            for key, value in puts.items():
                b.put(CF_QUEUES, key, value)


class QueueStoreJournal:
    """``queue.QueueJournal`` for one queue."""

    __slots__ = ("_qs", "_prefix")

    def __init__(self, qs: QueueStore, prefix: bytes) -> None:
        self._qs = qs
        self._prefix = prefix

    def added(self, entry: Entry) -> None:
        self._qs._put(self._prefix + _SEQ_PACK(entry.seq), pack_entry(entry), True)

    def delivered(self, entry: Entry) -> None:
        self._qs._put(self._prefix + _SEQ_PACK(entry.seq), pack_entry(entry), False)

    def settled(self, seq: int) -> None:
        self._qs._delete(self._prefix + _SEQ_PACK(seq))


_SEQ_PACK = struct.Struct(">Q").pack
assert queue_entry_key("v", "q", 7) == queue_entries_prefix("v", "q") + _SEQ_PACK(7)
