"""One queue of the queue service: pointers to records, leases with receipts, the ack index.

Theory of operation (docs/architecture.md section 5). Routing at publish time gives each
matching queue an ``Entry``: where the message is in the log (topic, partition,
offset), its size, priority and expiry, and how often it was delivered. The queue
numbers its entries with a per-queue sequence (``seq``), in publish order.

A seq names an entry while it is unsettled: after a restart numbering goes on from the
highest unsettled one, so the seqs of entries settled before may come again.

An entry is in exactly one of these states:

- **ready**: waiting for a consumer. Ready entries are taken highest priority first,
  then lowest ``seq`` first, so a requeued message goes back to its old place (as in
  RabbitMQ). Per priority, the entries never taken are rows of arrays (``ready.py``:
  no object per queued message, decision 0027) and those given back a heap of seqs;
  the lower seq of the two heads goes first. An entry is an ``Entry`` object from the
  moment it is taken (and while staged) until it is settled.
- **leased**: handed to a consumer (``take``), not yet settled. The lease is a
  ``Delivery`` (entry.py), kept in ``leases`` by seq: it names its owner (an AMQP
  channel, an MQTT session, a pop group member, ...) and the delivery count it was made
  for, and may carry a deadline (an invisible time). The consumer holds that same object
  and gives it back to ``settle``, which refuses one that is not the current lease
  (``StaleReceipt``): a delivery whose lease lapsed never settles the message once it is
  leased again. From outside the process a lease is named by a ``Receipt`` (seq and
  delivery count: a pop receipt handle), which ``lease`` looks up. ``lapse(now)`` gives
  back every lease past its deadline, ``release(owner)`` (a channel closing) every lease
  of an owner.
- **scheduled**: given back with a backoff (``RETRY``, or a lapse under a retry policy
  that waits). The entry leaves the queue (``Scheduled`` is returned); the queue service
  keeps it as a timer (``timers.py``), written in the same state batch as the entry's
  deletion. Shortly before it is due the timer comes back (``readd``) as a staged entry,
  its delivery count kept.
- **staged**: in the queue but not visible until ``visible_ms``: a delayed message or a
  retry whose timer was released ahead of its due time, so that what costs CPU (reading
  the message, routing it, journaling the entry) is done before the due time, not after
  it. Staged entries are journaled with their visible time, so a restart does not show
  them early, and count for nothing (not ready, not leased, no limits). ``unstage(now)``
  turns those whose time came into ready entries at the tail (a new seq, as a message
  published then would get), in visible-time order, the queue's limits applied then.
- **settled**: acked, dead-lettered, expired, dropped by overflow; gone from ``entries``.
  The **ack index** is kept as its complement: a seq is settled when it is below
  ``next_seq`` and not in ``entries``, and the floor is the smallest unsettled seq. A
  floor plus a set of settled seqs above it would hold every seq settled after one stuck
  message, so memory would grow with traffic; the complement holds only what is
  unsettled (docs/decisions/0006). The journal mirrors it: an entry's record is deleted
  when it is settled.

How a given-back message comes back is the queue's ``RetryPolicy`` (``logbus.retry``):
immediate (ready at once, in its old place: AMQP's requeue) or after a backoff
(scheduled); past ``max_deliveries`` it is removed for dead-lettering instead.

Counts (ready, leased, ready bytes) are kept as entries move, so queue depth is known
without scanning. Removed entries are returned to the caller with a reason
(``Removed``); the queue service dead-letters them. An ack makes no such object. Nothing here does I/O: ``journal``
(``journal.QueueJournal``) is told of every change to persist it.

Expiry (a queue's message TTL, a message's expires-at) is checked at the head, as
RabbitMQ does: when an entry would be taken, and by ``expire(now)``. An expired entry
behind an unexpired head waits.

**Views** (``views.py``) serve consumers with a filter: ``take(..., view)`` hands out
the first ready entry a view's filter takes, out of seq order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...retry.policy import IMMEDIATE, RetryPolicy
from ..errors import StaleReceipt
from .entry import (DELIVERY_LIMIT, DROP_HEAD, DROP_NEW, EXPIRED, GONE, MAXLEN, NO_ENTRY, OVERFLOW_MODES,
                    REJECT_PUBLISH, REJECT_PUBLISH_DLX, REJECTED, RESTORED, Delivery, Entry, NullJournal, Outcome,
                    QueueJournal, QueueLimits, Receipt, Removed, Returned, Scheduled)
from .lateness import Lateness
from .pins import OffsetPins
from .ready import Entries, Rows
from .views import View, Viewed

__all__ = [  # the queue's terms (entry.py), re-exported for its callers
    "DELIVERY_LIMIT", "DROP_HEAD", "DROP_NEW", "EXPIRED", "GONE", "MAXLEN", "NO_ENTRY", "OVERFLOW_MODES",
    "REJECT_PUBLISH", "REJECT_PUBLISH_DLX", "REJECTED", "RESTORED", "Delivery", "Entry", "NullJournal", "Outcome",
    "QueueJournal", "QueueLimits", "Receipt", "Removed", "Returned", "Scheduled", "StaleReceipt", "View"]

# entries added since a queue's dict tables were last freed, before emptying frees them
# again (``_emptied``): a dict of 64 entries holds a table of about 4.7 KiB
FREE_TABLES_AFTER = 64


@dataclass
class Queue(Viewed):
    name: str
    limits: QueueLimits = field(default_factory=QueueLimits)
    journal: QueueJournal = field(default_factory=NullJournal)
    retry: RetryPolicy = IMMEDIATE

    def __post_init__(self) -> None:
        self._objects: dict[int, Entry] = {}  # the entries taken at least once (leased, given back) and staged
        self._rows: dict[int, Rows] = {}  # priority -> the ready entries never taken (ready.py)
        self.entries: Entries = Entries(self._objects, self._rows)  # every unsettled entry, by seq
        self.leases: dict[int, Delivery] = {}  # seq -> its current lease
        self._ready: dict[int, list[int]] = {}  # priority -> heap of the seqs of ready objects (given back)
        self._priorities: list[int] = []  # priorities with rows or a heap, highest first
        self._deadlines: list[tuple[int, int, int]] = []  # heap of (deadline, seq, delivery); lazy
        self.on_busy: Callable[[], object] | None = None  # told when it stops being ``idle`` (the service)
        self._staged: list[tuple[int, int]] = []  # heap of (visible_ms, seq) of staged entries
        self.lateness: Lateness | None = None  # how late staged entries became ready (the broker's)
        self.next_seq = 0
        self.ready_count = 0
        self.ready_bytes = 0
        self.views: dict[Any, View] = {}  # a consumer filter's key -> its view
        self._stale = 0  # copies in the ready heaps of seqs taken through a view or dropped
        # the seqs of those taken through a view: given back, that copy is their place again
        self._stale_seqs: set[int] = set()
        # the service's count of log offsets its entries point at (retention keeps them)
        self.pins: OffsetPins | None = None
        self._tables_freed_at = 0  # next_seq when the tables of ``_objects`` and ``leases`` were last freed

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
        firsts = [rows.seqs[rows.first()] for rows in self._rows.values() if rows.live]
        return min([min(self._objects, default=self.next_seq), *firsts])

    @property
    def staged_count(self) -> int:
        return len(self._staged)

    @property
    def next_visible(self) -> int:
        """The earliest visible time of a staged entry (0: none staged)."""
        return self._staged[0][0] if self._staged else 0

    def peek(self, n: int) -> list[Entry]:
        """The first ``n`` ready entries in the order they would be delivered (priority,
        highest first, then seq), taking none: it reads ``n`` rows (and the given-back
        entries of the priorities it visits), not the whole queue."""
        out: list[Entry] = []
        for pri in self._priorities:
            given_back = sorted((s, self._objects[s]) for s in self._ready.get(pri, ()) if self._object_ready(s))
            rows = self._rows.get(pri)
            never_taken = ((rows.seqs[r], rows.entry(r)) for r in rows.rows()) if rows is not None else iter(())
            for _, entry in heapq.merge(given_back, never_taken, key=lambda item: item[0]):
                out.append(entry)
                if len(out) >= n:
                    return out
        return out

    def staged(self) -> list[Entry]:
        """The staged entries, earliest visible first."""
        return [self._objects[seq] for _, seq in sorted(self._staged)]

    @property
    def idle(self) -> bool:
        """Nothing ready and no lease with a deadline: ``expire`` and ``lapse`` have
        nothing to look at."""
        return not self._priorities and not self._deadlines

    @property
    def next_deadline(self) -> int:
        """The earliest lease deadline (0: none). May be a lease since settled."""
        return self._deadlines[0][0] if self._deadlines else 0

    # -- publish -------------------------------------------------------------------------

    def publish(self, topic: str, partition: int, offset: int, size: int, *, priority: int = 0,
                expires_ms: int = 0, now_ms: int = 0, visible_ms: int = 0,
                message: Any = None) -> tuple[Entry | None, list[Removed]]:
        """Add a message. Returns (the entry, or None when the queue refused it under
        overflow reject-publish; entries pushed out from the head by drop-head). With
        ``visible_ms`` the entry is staged until then (``unstage``; even if that time has
        passed, so that due entries become ready in visible-time order): limits and the
        queue's message TTL apply from that time. ``message`` goes to the views' judges."""
        lim = self.limits
        if lim.message_ttl_ms is not None:
            ttl_end = max(now_ms, visible_ms) + lim.message_ttl_ms
            expires_ms = ttl_end if not expires_ms else min(expires_ms, ttl_end)
        if visible_ms:
            return self._stage(Entry(0, topic, partition, offset, size, min(max(priority, 0), lim.max_priority),
                                     expires_ms, 0, visible_ms)), []
        removed: list[Removed] = []
        if not self._make_room(size, removed):
            return None, removed
        seq = self.next_seq
        self.next_seq = seq + 1
        pri = min(max(priority, 0), lim.max_priority)
        entry = Entry(seq, topic, partition, offset, size, pri, expires_ms)
        pins = self.pins
        if pins is not None:
            pins.add(topic, partition, offset)
        self._append(entry, message)
        self.journal.added(entry)
        return entry, removed

    def readd(self, entry: Entry, visible_ms: int = 0) -> Entry:
        """A scheduled entry back from its timer: ready again under a new seq (staged
        until ``visible_ms`` if not 0), its delivery count kept. Limits are not applied
        again: the queue accepted it before. Returns the new entry (once ready, a copy:
        ``publish`` too returns a copy of what it keeps)."""
        back = Entry(0, entry.topic, entry.partition, entry.offset, entry.size,
                     min(entry.priority, self.limits.max_priority), entry.expires_ms, entry.deliveries, visible_ms)
        if visible_ms:
            return self._stage(back)
        back.seq = self.next_seq
        self.next_seq += 1
        if self.pins is not None:
            self.pins.add(back.topic, back.partition, back.offset)
        self._append(back)
        self.journal.added(back)
        return back

    def _stage(self, entry: Entry) -> Entry:
        entry.seq = seq = self.next_seq
        self.next_seq = seq + 1
        self._objects[seq] = entry
        if self.pins is not None:
            self.pins.add(entry.topic, entry.partition, entry.offset)
        heapq.heappush(self._staged, (entry.visible_ms, seq))
        self.journal.added(entry)
        return entry

    def unstage(self, now_ms: int) -> tuple[int, list[Removed]]:
        """Staged entries visible at ``now_ms``: ready at the tail under a new seq, in
        visible-time order (ties in staging order). The queue's length limits apply as to
        a publish: an entry the queue refuses is removed (reason MAXLEN under
        reject-publish-dlx, else none), drop-head removes heads. Returns (how many became
        ready, the removed)."""
        staged = self._staged
        n = 0
        removed: list[Removed] = []
        lim = self.limits
        limited = lim.max_length is not None or lim.max_length_bytes is not None
        late = self.lateness
        while staged and staged[0][0] <= now_ms:
            visible_ms, seq = heapq.heappop(staged)
            entry = self._objects.pop(seq, None)
            if entry is None:
                continue  # withdrawn
            if late is not None:
                late.add(now_ms - visible_ms)
            self.journal.settled(seq)
            entry.visible_ms = 0
            if limited and not self._make_room(entry.size, removed):
                self._unpin(entry)
                removed.append(Removed(entry, MAXLEN if lim.overflow == REJECT_PUBLISH_DLX else ""))
                continue
            entry.seq = seq = self.next_seq
            self.next_seq = seq + 1
            self._append(entry)
            self.journal.added(entry)
            n += 1
        return n, removed

    def _make_room(self, size: int, removed: list[Removed]) -> bool:
        """Whether one more ready entry of ``size`` fits the length limits; under
        drop-head, heads are removed (appended to ``removed``) to make it fit. False: it
        does not fit (reject-publish, or larger than the byte limit on its own)."""
        if not self._full(1, size):
            return True
        if self.limits.overflow == DROP_HEAD:
            while self.ready_count and self._full(1, size):
                head = self._pop_ready()
                assert head is not None
                removed.append(self._settle(head, MAXLEN))
        return not self._full(1, size)

    def _full(self, count: int, size: int) -> bool:
        lim = self.limits
        return ((lim.max_length is not None and self.ready_count + count > lim.max_length)
                or (lim.max_length_bytes is not None and self.ready_bytes + size > lim.max_length_bytes))

    # -- delivery ------------------------------------------------------------------------

    def take(self, owner: Any, now_ms: int = 0, deadline_ms: int = 0,
             view: View | None = None) -> tuple[Delivery | None, list[Removed]]:
        """The next ready entry (of ``view`` if given), leased to ``owner`` (until
        ``deadline_ms`` if not 0): its ``Delivery``, the lease itself. Expired entries met
        on the way are removed and returned for dead-lettering."""
        removed: list[Removed] = []
        while True:
            entry = self._pop_ready() if view is None else self._pop_view(view)
            if entry is None:
                return None, removed
            if entry.expires_ms and entry.expires_ms <= now_ms:
                removed.append(self._settle(entry, EXPIRED))
                continue
            n = entry.deliveries = entry.deliveries + 1
            seq = entry.seq
            d = self.leases[seq] = Delivery(self.name, entry, n, owner, deadline_ms)
            if deadline_ms:
                self._push_deadline(deadline_ms, seq, n)
            self.journal.delivered(entry, deadline_ms, view is None)
            return d, removed

    def untake(self, d: Delivery) -> None:
        """Undo ``take`` of a delivery handed to no one (its message cannot be read
        yet: a remote segment being fetched): ready again in its old place, with its
        delivery count as before."""
        seq = self._current(d)
        del self.leases[seq]
        entry = d.entry
        entry.deliveries -= 1
        self._ready_again(entry)
        self.journal.unleased(entry)

    def lease(self, r: Receipt) -> Delivery:
        """The current lease ``r`` names (a receipt handle from outside the process);
        StaleReceipt when it names none."""
        d = self.leases.get(r.seq)
        if d is None or d.delivery != r.delivery:
            raise StaleReceipt(f"receipt {r.seq}.{r.delivery} of queue '{self.name}' names no current lease")
        return d

    def _current(self, d: Delivery) -> int:
        """The seq of ``d``, which must be the current lease of its entry; StaleReceipt if not."""
        seq = d.entry.seq
        if self.leases.get(seq) is not d:
            raise StaleReceipt(f"delivery {seq}.{d.delivery} of queue '{self.name}' is no current lease")
        return seq

    def ack(self, d: Delivery) -> Entry:
        """Settle the lease ``d`` (done with): its entry leaves the queue and is returned.
        StaleReceipt: ``d`` is no current lease, and nothing changes."""
        seq = self._current(d)
        del self.leases[seq]
        entry = d.entry
        self._remove(entry)
        return entry

    def settle(self, d: Delivery, outcome: Outcome, now_ms: int = 0) -> Removed | Scheduled | None:
        """Settle the lease ``d`` (StaleReceipt: it is no current lease, and nothing
        changes). Returns what became of the entry: Removed (acked, reason ""; or to
        dead-letter), Scheduled (retry later) or None (ready again). ``ack`` is the ack
        that makes no ``Removed``."""
        seq = self._current(d)
        del self.leases[seq]
        entry = d.entry
        if outcome is Outcome.ACK:
            return self._settle(entry, "")
        if outcome is Outcome.DEAD_LETTER:
            return self._settle(entry, REJECTED)
        return self._give_back(entry, outcome is Outcome.RETRY, now_ms)

    def change_invisible(self, d: Delivery, deadline_ms: int) -> None:
        """Move the deadline of the lease ``d`` (later or sooner; 0: none); StaleReceipt
        when it is no current lease."""
        seq = self._current(d)
        d.deadline_ms = deadline_ms
        if deadline_ms:
            self._push_deadline(deadline_ms, seq, d.delivery)
            self.journal.delivered(d.entry, deadline_ms)
        else:
            self.journal.unleased(d.entry)

    def _give_back(self, entry: Entry, backoff: bool, now_ms: int) -> Removed | Scheduled | None:
        """A lease ended without an ack: dead-letter past the delivery limit, else
        scheduled after the retry policy's backoff (``backoff``), else ready again."""
        policy = self.retry
        if policy.exhausted(entry.deliveries):
            return self._settle(entry, DELIVERY_LIMIT)
        delay = policy.delay_ms(entry.deliveries) if backoff else 0
        if delay > 0:  # the caller keeps it as a timer, written with this settle
            del self._objects[entry.seq]
            self._unpin(entry)
            self.journal.settled(entry.seq)
            if not self._objects and not self.ready_count:
                self._emptied()
            return Scheduled(entry, now_ms + delay)
        self._ready_again(entry)
        self.journal.unleased(entry)
        return None

    def lapse(self, now_ms: int) -> Returned:
        """Give back every lease whose deadline passed (a retry: backoff applies)."""
        out = Returned()
        dl = self._deadlines
        while dl and dl[0][0] <= now_ms:
            deadline, seq, delivery = heapq.heappop(dl)
            lease = self.leases.get(seq)
            if lease is None or lease.delivery != delivery or lease.deadline_ms != deadline:
                continue  # settled, leased again or its deadline moved since
            del self.leases[seq]
            out.add(self._give_back(self._objects[seq], True, now_ms))
        return out

    def release(self, owner: Any, now_ms: int = 0) -> Returned:
        """Requeue every lease of ``owner`` (its channel closed), in seq order."""
        mine = sorted(seq for seq, lease in self.leases.items() if lease.owner is owner)
        out = Returned()
        for seq in mine:
            del self.leases[seq]
            out.add(self._give_back(self._objects[seq], False, now_ms))
        return out

    # -- housekeeping ----------------------------------------------------------------------

    def expire(self, now_ms: int) -> list[Removed]:
        """Remove expired entries at the head of each priority."""
        removed = []
        for pri in list(self._priorities):
            while True:
                expires_ms = self._head_expires(pri)
                if not expires_ms or expires_ms > now_ms:
                    break
                entry = self._pop(pri)
                assert entry is not None
                removed.append(self._settle(entry, EXPIRED))
        return removed

    def withdraw(self, topic: str, partition: int, first: int, end: int) -> list[Entry]:
        """Remove the ready and staged entries that point at offsets ``first`` up to
        ``end`` of ``topic``/``partition`` (appends refused after their offsets were
        given); returns them. Leased ones stay: their consumer has the message, and
        settles them as usual."""
        gone = self._pointing(topic, partition, first, end)
        self.drop(gone)
        return gone

    def orphan(self, topic: str, partition: int, first: int, end: int) -> int:
        """Leased entries that point at offsets ``first`` up to ``end`` of
        ``topic``/``partition`` (a topic deleted with force, whose offsets will be given
        again) point at nothing from now on (``GONE``): their consumer still settles
        them; given back, they are dropped where they are met. Returns how many."""
        n = 0
        for seq, lease in self.leases.items():
            e = self._objects[seq]
            if first <= e.offset < end and e.partition == partition and e.topic == topic:
                self._unpin(e)  # it points at nothing: it holds no segment
                e.offset = GONE
                self.journal.delivered(e, lease.deadline_ms, False)
                n += 1
        return n

    def evict(self, topic: str, partition: int, below: int, reason: str) -> list[Removed]:
        """Remove the ready and staged entries that point below offset ``below`` of
        ``topic``/``partition`` (they held the log past a bound: ``QueueService.evict``),
        with ``reason`` for dead-lettering. Leased ones stay."""
        gone = self._pointing(topic, partition, 0, below)
        self.drop(gone)
        return [Removed(e, reason) for e in gone]

    def _pointing(self, topic: str, partition: int, first: int, end: int) -> list[Entry]:
        """The ready and staged entries that point at offsets ``first`` up to ``end`` of
        ``topic``/``partition``, in seq order."""
        out = [e for e in self._objects.values()
               if first <= e.offset < end and e.partition == partition and e.topic == topic
               and e.seq not in self.leases]
        for rows in self._rows.values():
            if topic in rows.names:
                ix, offsets, partitions, topics = rows.names.index(topic), rows.offsets, rows.partitions, rows.topics
                out += [rows.entry(row) for row in rows.rows()
                        if first <= offsets[row] < end and partitions[row] == partition and topics[row] == ix]
        out.sort(key=lambda e: e.seq)
        return out

    def drop(self, entries: list[Entry]) -> None:
        """Remove ``entries`` whatever their state (their records are gone); the lease
        of a leased one ends, so its receipt settles nothing from now on. An entry is
        named by its seq and its record (one of ``entries`` may be a copy)."""
        staged = False
        for e in entries:
            seq = e.seq
            cur = self._objects.get(seq)
            if cur is None:  # ready, never taken: in rows, or gone
                found = self.entries.locate(seq)
                if found is None or found[0].offsets[found[1]] != e.offset:
                    continue
                found[0].take(found[1])
                self._ready_out(e)
            elif cur is not e and (cur.offset != e.offset or cur.partition != e.partition or cur.topic != e.topic):
                continue
            else:
                if seq in self.leases:
                    del self.leases[seq]  # (its deadline stays in the heap: skipped there)
                elif cur.visible_ms:
                    staged = True
                else:  # ready again: its seq stays in a ready heap, skipped there
                    self._ready_out(cur)
                    self._stale += 1
                del self._objects[seq]
            self._unpin(e)
            self.journal.settled(seq)
        if staged:
            self._staged = [item for item in self._staged if item[1] in self._objects]
            heapq.heapify(self._staged)
        if not self._objects and not self.ready_count:
            self._emptied()

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

    def restore(self, entries: list[tuple[Entry, int]], next_seq: int = 0) -> None:
        """Load the unsettled entries a journal kept, each with its lease deadline (any
        order). Staged ones stay staged; those leased with a deadline come back leased
        to ``RESTORED`` until it, so their receipts still settle them; the others become
        ready, redelivered if delivered before. Numbering goes on above them, and from ``next_seq`` if that is
        higher."""
        assert not self.entries, "restore into an empty queue"
        pins = self.pins
        for e, deadline in sorted(entries, key=lambda item: item[0].seq):
            if pins is not None:
                pins.add(e.topic, e.partition, e.offset)
            if e.visible_ms:
                self._objects[e.seq] = e
                heapq.heappush(self._staged, (e.visible_ms, e.seq))
            elif deadline and e.deliveries:
                self._objects[e.seq] = e
                self.leases[e.seq] = Delivery(self.name, e, e.deliveries, RESTORED, deadline)
                self._push_deadline(deadline, e.seq, e.deliveries)
            else:
                self._append(e)
            self.next_seq = e.seq + 1
        self.next_seq = max(self.next_seq, next_seq)

    # -- internals ---------------------------------------------------------------------------

    def _append(self, entry: Entry, message: Any = None) -> None:
        """A new ready entry (a new seq, above every other): a row of its priority's rows."""
        pri = entry.priority
        rows = self._rows.get(pri)
        if rows is None:
            rows = self._rows[pri] = Rows(pri)
            self._add_priority(pri)
        rows.append(entry.seq, entry.topic, entry.partition, entry.offset, entry.size, entry.expires_ms,
                    entry.deliveries)
        self.ready_count += 1
        self.ready_bytes += entry.size
        if self.views:
            self._judge(entry, message)

    def _ready_again(self, entry: Entry) -> None:
        """A taken entry given back: ready in its old place, an object in its priority's heap."""
        heap = self._ready.get(entry.priority)
        if heap is None:
            heap = self._ready[entry.priority] = []
            self._add_priority(entry.priority)
        seq = entry.seq
        if seq in self._stale_seqs:  # taken through a view: its copy is still in the heap
            self._stale_seqs.discard(seq)
            self._stale -= 1
        else:
            heapq.heappush(heap, seq)
        self.ready_count += 1
        self.ready_bytes += entry.size
        if self.views:
            self._judge(entry, None)

    def _add_priority(self, pri: int) -> None:
        if pri not in self._priorities:
            if not self._priorities and not self._deadlines and self.on_busy is not None:
                self.on_busy()
            self._priorities.append(pri)
            self._priorities.sort(reverse=True)

    def _push_deadline(self, deadline_ms: int, seq: int, delivery: int) -> None:
        if not self._deadlines and not self._priorities and self.on_busy is not None:
            self.on_busy()
        heapq.heappush(self._deadlines, (deadline_ms, seq, delivery))

    def _head(self, pri: int) -> Rows | list[int] | None:
        """Where the first ready entry of ``pri`` is: the heap of given-back objects (its
        top), the rows (their first), or None: no ready entry. Stale seqs are dropped off
        the heap's top on the way."""
        heap = self._ready.get(pri)
        if heap and self._stale:
            while heap and not self._object_ready(heap[0]):
                self._stale_seqs.discard(heapq.heappop(heap))
                self._stale -= 1  # taken through a view, or dropped
        rows = self._rows.get(pri)
        row = -1 if rows is None else rows.first()
        if heap and (row < 0 or heap[0] < rows.seqs[row]):  # type: ignore[union-attr]
            return heap
        return rows if row >= 0 else None

    def _head_expires(self, pri: int) -> int:
        """The expiry of the first ready entry of ``pri`` (0: none, or it never expires)."""
        where = self._head(pri)
        if where is None:
            return 0
        if isinstance(where, Rows):
            return where.expires[where.head]
        return self._objects[where[0]].expires_ms

    def _pop(self, pri: int) -> Entry | None:
        """Take the first ready entry of ``pri``: an object from then on."""
        where = self._head(pri)
        if where is None:
            return None
        if isinstance(where, Rows):
            entry = where.pop_head()
            self._objects[entry.seq] = entry
        else:
            entry = self._objects[heapq.heappop(where)]
        self._ready_out(entry)
        return entry

    def _pop_ready(self) -> Entry | None:
        for pri in self._priorities:
            entry = self._pop(pri)
            if entry is not None:
                return entry
        return None

    def _object_ready(self, seq: int) -> bool:
        e = self._objects.get(seq)
        return e is not None and not e.visible_ms and seq not in self.leases

    def _take_ready(self, seq: int) -> Entry:
        """Take the ready entry ``seq`` out of order (through a view): an object from then on."""
        entry = self._objects.get(seq)
        if entry is not None:
            self._stale += 1  # its copy in a ready heap
            self._stale_seqs.add(seq)
        else:
            found = self.entries.locate(seq)
            assert found is not None
            entry = self._objects[seq] = found[0].take(found[1])
        self._ready_out(entry)
        return entry

    def _ready_out(self, entry: Entry) -> None:
        self.ready_count -= 1
        self.ready_bytes -= entry.size

    def _settle(self, entry: Entry, reason: str | None) -> Removed:
        self._remove(entry)
        return Removed(entry, reason or "")

    def _remove(self, entry: Entry) -> None:
        """``entry`` (taken: an object) is settled: it leaves the queue."""
        objects = self._objects
        del objects[entry.seq]
        pins = self.pins
        if pins is not None:
            pins.remove(entry.topic, entry.partition, entry.offset)
        self.journal.settled(entry.seq)
        if not objects and not self.ready_count:
            self._emptied()

    def _emptied(self) -> None:
        """Every entry is settled. A dict keeps its table as keys go (36 KiB for 1,000
        entries) until something is added again, so a queue drained and then left idle
        (an offline MQTT session's) would hold its largest size for good: ``clear()``
        frees the tables of ``_objects`` and ``leases`` (and the lease deadlines, all
        stale now), keeping the objects, so nothing new is allocated in the middle of a
        drain to outlive it. The rows and ready heaps go too (what is left in the heaps
        is stale): made during a burst, kept after it, they would hold the allocator's
        arenas the burst filled. Only once ``FREE_TABLES_AFTER`` entries came since the
        last time: a queue that empties after every message does not get new tables per
        message."""
        if self.next_seq - self._tables_freed_at < FREE_TABLES_AFTER:
            return
        self._tables_freed_at = self.next_seq
        self._objects.clear()
        self.leases.clear()
        self._deadlines.clear()
        self._rows.clear()
        self._ready.clear()
        self._priorities.clear()
        self._stale = 0
        self._stale_seqs.clear()

    def _unpin(self, entry: Entry) -> None:
        if self.pins is not None:
            self.pins.remove(entry.topic, entry.partition, entry.offset)

    def unpin_all(self) -> None:
        """The queue is deleted: its entries pin nothing any more."""
        if self.pins is not None:
            for e in self.entries.values():
                self.pins.remove(e.topic, e.partition, e.offset)
