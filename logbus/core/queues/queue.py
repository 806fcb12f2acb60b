"""The queue model over the log: a queue holds pointers to records, not records.

Theory of operation (docs/architecture.md section 5.2). Routing at publish time gives each
matching queue an ``Entry``: where the message is in the log (topic, partition,
offset), its size, priority and expiry, and how often it was delivered. The queue
numbers its entries with a per-queue sequence (``seq``), in publish order.

A seq names an entry while it is unsettled: after a restart numbering goes on from the
highest unsettled one, so the seqs of entries settled before may come again.

An entry is in exactly one of three states:

- **ready**: waiting for a consumer. Ready entries are taken highest priority first,
  then lowest ``seq`` first, so a requeued message goes back to its old place (as in
  RabbitMQ). Per priority there is a heap of seqs.
- **leased**: handed to a consumer (``take``), not yet settled. A lease names its
  owner (an AMQP channel, a pop receipt, ...) and may carry a deadline (for pop's
  invisible time). ``release(owner)`` (a channel closing) requeues all of an owner's
  leases in seq order, as redelivered.
- **settled**: acked, rejected, expired, dropped by overflow or past the delivery
  limit; gone from ``entries``. The **ack index** is kept as its complement: a seq is
  settled when it is below ``next_seq`` and not in ``entries``, and the floor is the
  smallest unsettled seq. A floor plus a set of settled seqs above it would hold every
  seq settled after one stuck message, so memory would grow with traffic;
  the complement holds only what is unsettled (docs/decisions/0006). The journal
  mirrors it: an entry's record is deleted when it is settled.

Counts (ready, leased, ready bytes) are kept as entries move, so queue depth is known
without scanning. Removed entries that should be dead-lettered are returned to the
caller with a reason (``Removed``); the broker publishes them to the dead-letter
exchange. Nothing here does I/O: ``journal`` (``queue_store.QueueJournal``) is told of
every change to persist it.

Expiry (x-message-ttl, per-message expiration) is checked at the head, as RabbitMQ
does: when an entry would be taken, and by ``expire(now)`` (the broker calls it when
the head's deadline passes). An expired entry behind an unexpired head waits.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Protocol

# reasons, as RabbitMQ names them in x-death
EXPIRED = "expired"
MAXLEN = "maxlen"
REJECTED = "rejected"
DELIVERY_LIMIT = "delivery_limit"

DROP_HEAD = "drop-head"
REJECT_PUBLISH = "reject-publish"
REJECT_PUBLISH_DLX = "reject-publish-dlx"
OVERFLOW_MODES = (DROP_HEAD, REJECT_PUBLISH, REJECT_PUBLISH_DLX)


@dataclass(slots=True)
class Entry:
    seq: int
    topic: str
    partition: int
    offset: int
    size: int
    priority: int = 0
    expires_ms: int = 0  # epoch ms after which it is dead; 0: never
    deliveries: int = 0  # times handed to a consumer; > 0 means "redelivered" next time

    @property
    def redelivered(self) -> bool:
        return self.deliveries > 0


@dataclass(frozen=True, slots=True)
class Removed:
    """An entry that left the queue without an ack, and why (for dead-lettering)."""

    entry: Entry
    reason: str


@dataclass(frozen=True, slots=True)
class QueueLimits:
    max_length: int | None = None  # x-max-length: ready messages
    max_length_bytes: int | None = None  # x-max-length-bytes: ready bytes
    overflow: str = DROP_HEAD  # x-overflow
    delivery_limit: int | None = None  # x-delivery-limit: deliveries before dead-lettering
    max_priority: int = 0  # x-max-priority (0: priorities ignored)
    message_ttl_ms: int | None = None  # x-message-ttl


class QueueJournal(Protocol):
    """Told of every change that must survive a restart."""

    def added(self, entry: Entry) -> None: ...
    def delivered(self, entry: Entry) -> None: ...
    def settled(self, seq: int) -> None: ...


class NullJournal:
    def added(self, entry: Entry) -> None:
        pass

    def delivered(self, entry: Entry) -> None:
        pass

    def settled(self, seq: int) -> None:
        pass


@dataclass(slots=True)
class Lease:
    owner: Any
    deadline_ms: int = 0  # 0: until settled or released


class UnknownEntry(KeyError):
    """A seq that is not leased (never delivered, or already settled)."""


@dataclass
class Queue:
    name: str
    limits: QueueLimits = field(default_factory=QueueLimits)
    journal: QueueJournal = field(default_factory=NullJournal)

    def __post_init__(self) -> None:
        self.entries: dict[int, Entry] = {}  # every unsettled entry, ready or leased
        self.leases: dict[int, Lease] = {}
        self._ready: dict[int, list[int]] = {}  # priority -> heap of ready seqs
        self._priorities: list[int] = []  # priorities with a heap, highest first
        self.next_seq = 0
        self.ready_count = 0
        self.ready_bytes = 0

    # -- counts ------------------------------------------------------------------------

    @property
    def message_count(self) -> int:
        """Ready messages (AMQP's queue.declare-ok message_count)."""
        return self.ready_count

    @property
    def unacked_count(self) -> int:
        return len(self.leases)

    def settled(self, seq: int) -> bool:
        return 0 <= seq < self.next_seq and seq not in self.entries

    @property
    def floor(self) -> int:
        """The smallest unsettled seq (``next_seq`` when everything is settled)."""
        return min(self.entries, default=self.next_seq)

    # -- publish -------------------------------------------------------------------------

    def publish(self, topic: str, partition: int, offset: int, size: int, *, priority: int = 0,
                expires_ms: int = 0, now_ms: int = 0) -> tuple[Entry | None, list[Removed]]:
        """Add a message. Returns (the entry, or None when the queue refused it under
        x-overflow reject-publish; entries pushed out from the head by drop-head)."""
        lim = self.limits
        if lim.message_ttl_ms is not None:
            ttl_end = now_ms + lim.message_ttl_ms
            expires_ms = ttl_end if not expires_ms else min(expires_ms, ttl_end)
        removed: list[Removed] = []
        if self._full(1, size):
            if lim.overflow != DROP_HEAD:
                return None, removed
            while self.ready_count and self._full(1, size):
                head = self._pop_ready()
                assert head is not None
                removed.append(self._settle(head, MAXLEN))
            if self._full(1, size):  # a single message larger than the byte limit
                return None, removed
        seq = self.next_seq
        self.next_seq = seq + 1
        pri = min(max(priority, 0), lim.max_priority)
        entry = Entry(seq, topic, partition, offset, size, pri, expires_ms)
        self.entries[seq] = entry
        self._push_ready(entry)
        self.journal.added(entry)
        return entry, removed

    def _full(self, count: int, size: int) -> bool:
        lim = self.limits
        return ((lim.max_length is not None and self.ready_count + count > lim.max_length)
                or (lim.max_length_bytes is not None and self.ready_bytes + size > lim.max_length_bytes))

    # -- delivery ------------------------------------------------------------------------

    def take(self, owner: Any, now_ms: int = 0, deadline_ms: int = 0) -> tuple[Entry | None, list[Removed]]:
        """The next ready entry, leased to ``owner``; expired heads met on the way are
        removed and returned for dead-lettering."""
        removed: list[Removed] = []
        while True:
            entry = self._pop_ready()
            if entry is None:
                return None, removed
            if entry.expires_ms and entry.expires_ms <= now_ms:
                removed.append(self._settle(entry, EXPIRED))
                continue
            entry.deliveries += 1
            self.leases[entry.seq] = Lease(owner, deadline_ms)
            self.journal.delivered(entry)
            return entry, removed

    def ack(self, seq: int) -> Entry:
        if seq not in self.leases:
            raise UnknownEntry(seq)
        del self.leases[seq]
        return self._settle(self.entries[seq], None).entry

    def reject(self, seq: int, requeue: bool) -> Removed | None:
        """nack/reject: back to its place (redelivered), or removed for dead-lettering.
        Past x-delivery-limit a requeue also removes it."""
        if seq not in self.leases:
            raise UnknownEntry(seq)
        del self.leases[seq]
        entry = self.entries[seq]
        if not requeue:
            return self._settle(entry, REJECTED)
        return self._requeue(entry)

    def _requeue(self, entry: Entry) -> Removed | None:
        limit = self.limits.delivery_limit
        if limit is not None and entry.deliveries > limit:
            return self._settle(entry, DELIVERY_LIMIT)
        self._push_ready(entry)
        return None

    def release(self, owner: Any) -> list[Removed]:
        """Requeue every lease of ``owner`` (its channel closed), in seq order."""
        mine = sorted(seq for seq, lease in self.leases.items() if lease.owner is owner)
        removed = []
        for seq in mine:
            del self.leases[seq]
            r = self._requeue(self.entries[seq])
            if r is not None:
                removed.append(r)
        return removed

    # -- housekeeping ----------------------------------------------------------------------

    def expire(self, now_ms: int) -> list[Removed]:
        """Remove expired entries at the head of each priority."""
        removed = []
        for pri in list(self._priorities):
            heap = self._ready.get(pri)
            while heap:
                entry = self.entries[heap[0]]
                if not entry.expires_ms or entry.expires_ms > now_ms:
                    break
                heapq.heappop(heap)
                self._ready_out(entry)
                removed.append(self._settle(entry, EXPIRED))
        return removed

    def purge(self) -> int:
        """Drop every ready entry (leased ones stay); returns how many."""
        n = 0
        while True:
            entry = self._pop_ready()
            if entry is None:
                return n
            self._settle(entry, None)
            n += 1

    # -- restart ---------------------------------------------------------------------------

    def restore(self, entries: list[Entry], next_seq: int = 0) -> None:
        """Load the unsettled entries a journal kept (any order): all become ready;
        those delivered before come back as redelivered. Numbering goes on above them,
        and from ``next_seq`` if that is higher."""
        assert not self.entries, "restore into an empty queue"
        for e in sorted(entries, key=lambda e: e.seq):
            self.entries[e.seq] = e
            self._push_ready(e)
            self.next_seq = e.seq + 1
        self.next_seq = max(self.next_seq, next_seq)

    # -- internals ---------------------------------------------------------------------------

    def _push_ready(self, entry: Entry) -> None:
        heap = self._ready.get(entry.priority)
        if heap is None:
            heap = self._ready[entry.priority] = []
            self._priorities.append(entry.priority)
            self._priorities.sort(reverse=True)
        heapq.heappush(heap, entry.seq)
        self.ready_count += 1
        self.ready_bytes += entry.size

    def _pop_ready(self) -> Entry | None:
        for pri in self._priorities:
            heap = self._ready[pri]
            if heap:
                entry = self.entries[heapq.heappop(heap)]
                self._ready_out(entry)
                return entry
        return None

    def _ready_out(self, entry: Entry) -> None:
        self.ready_count -= 1
        self.ready_bytes -= entry.size

    def _settle(self, entry: Entry, reason: str | None) -> Removed:
        del self.entries[entry.seq]
        self.journal.settled(entry.seq)
        return Removed(entry, reason or "")
