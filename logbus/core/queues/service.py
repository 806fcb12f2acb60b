"""The queue service of one vhost: queues that know no protocol, and their consumers.

Theory of operation (docs/architecture.md section 5). Every front-end is a client of
this one service: AMQP channels, pop groups, MQTT sessions. A queue (``queue.Queue``)
holds entries that point into the log; this module adds what surrounds it:

- **settings** (``QueueSettings``): limits and overflow, message TTL, priorities, a
  retry policy (``logbus.retry``), a dead-letter target, auto-expiry, single active
  consumer. Each gateway translates its own declaration (AMQP ``x-`` arguments, a pop
  group's defaults) into these.
- **enqueue**: a record just appended gets an entry in each queue it was routed to;
  the message stays in memory (``msgstore``) until every one of them settled it.
- **push** (``consume``): after anything that can make a delivery possible,
  ``dispatch(queue)`` hands ready entries round-robin to the consumers with credit. A
  consumer with a filter takes only what its filter takes, from the queue's view of
  that filter (``queue.View``); what it leaves waits for the others.
- **pull and pop** (``take``): up to n messages leased to an owner, with an invisible
  time or none.
- **the delivery** (``entry.Delivery``): what a consumer or a take is handed is the
  queue's lease itself, one object from lease to settle, with the message on it; the
  gateway keeps it (its delivery tag, packet id, QoS state in slots of its own) and
  gives it back to settle it.
- **settle** (``settle(delivery, outcome)``, ``ack(delivery)``): ack, requeue,
  retry-later or dead-letter; a delivery that is not its entry's current lease raises
  ``StaleReceipt`` and changes nothing. ``change_invisible`` moves a lease's deadline.
- **time**: ``tick(now)`` drops expired heads and gives back leases past their
  deadline; entries given back with a backoff become timers (``timers.py``) and come
  back through ``retry_due``. Timers are released ahead of their due time, so delayed
  messages and retries arrive staged (``queue.py``); a reactor call armed for the
  earliest visible time (``wake``) makes them ready when it comes, and ``take`` and
  ``tick`` check too.
- **dead letters**: an entry removed with a reason (rejected, expired, overflow, past
  the delivery limit) goes to the queue's dead-letter target through the
  ``dead_letter`` callback the owner of the service supplies (the vhost publishes to an
  exchange or appends to a topic); without a target it is dropped.

Nothing here touches a socket or knows a protocol.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from time import perf_counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Mapping, Protocol

from ...filters.message_filter import FilterSpec
from ...filters.properties import record_properties
from ...retry.policy import IMMEDIATE, RetryPolicy
from ..errors import NotFound, RecordGone, RemoteUnavailable
from ..message import Message
from ..state_pb2 import TimerRecord
from .journal import QueueStore
from .msgstore import MessageStore
from .queue import (
    DROP_NEW,
    MAXLEN,
    REJECT_PUBLISH_DLX,
    Delivery,
    Entry,
    Outcome,
    Queue,
    QueueLimits,
    Removed,
    Returned,
    Scheduled,
    View,
)
from .pins import QUEUE_SHIFT, OffsetPins
from .stats import CLASSIC, KINDS, PUBLISHED_BY, QueueStats
from .timers import Timers

log = logging.getLogger(__name__)

WAKE_SPACING_MS = 2  # staged entries due within this of each other are made ready by one call
GONE_LOG_MS = 10_000  # a queue's dropped entries are logged at most this often
FILL_BATCH = 2000  # backlog entries a new consumer filter's view judges per reactor turn (about 10 ms)


@dataclass(frozen=True, slots=True)
class DeadLetterTarget:
    """Where a queue's dead letters go: published to an exchange (with the message's own
    routing key unless ``routing_key``), or appended to a topic."""

    exchange: str | None = None
    routing_key: str | None = None
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class QueueSettings:
    limits: QueueLimits = QueueLimits()
    retry: RetryPolicy = IMMEDIATE
    dead_letter: DeadLetterTarget | None = None
    expires_ms: int | None = None  # deleted after this long unused
    single_active_consumer: bool = False


class Consumer(Protocol):
    tag: str
    owner: Any  # the lease owner: a channel, a session
    invisible_ms: int  # a lease's invisible time (0: until settled or released)

    @property
    def no_ack(self) -> bool: ...  # read at each hand-out: settled as it is handed out

    def has_credit(self) -> bool: ...
    def deliver(self, delivery: Delivery) -> None: ...


@dataclass
class QueueState:
    name: str
    settings: QueueSettings
    queue: Queue
    durable: bool = False
    exclusive: Any = None  # the owning connection, or None
    auto_delete: bool = False
    declared: Any = None  # the gateway's declaration, for its equivalence checks
    consumers: list[Consumer] = field(default_factory=list)
    views: dict[Consumer, tuple[FilterSpec, View]] = field(default_factory=dict)  # consumers with a filter
    next_consumer: int = 0
    had_consumer: bool = False
    used_ms: int = 0  # last declare, get or consumer change (auto-expiry counts from here)
    # told of each message dropped, its publisher not told, at the length limit (overflow drop-new)
    on_dropped: Callable[[], object] | None = None
    kind: str = CLASSIC  # stats.KINDS: who made it
    stats: QueueStats = field(default_factory=QueueStats)  # what it has done
    total: QueueStats = field(default_factory=QueueStats)  # its kind's running total (the service's)


DeadLetter = Callable[[QueueState, Message, str, Entry | None], None]  # the entry: None when refused


class QueueService:
    def __init__(self, vhost: str, queue_store: QueueStore, timers: Timers, messages: MessageStore, *,
                 clock: Callable[[], int], dead_letter: DeadLetter | None = None,
                 message_for: Callable[[Entry], Message] | None = None,
                 message_properties: Callable[[Message, str], Mapping[str, Any]] = record_properties,
                 pin_shift: int = QUEUE_SHIFT) -> None:
        self.vhost = vhost
        self.queue_store = queue_store
        self.timers = timers
        self.messages = messages
        self.clock = clock  # epoch milliseconds
        self._dead_letter = dead_letter
        self._message_for = message_for  # how an entry's message is delivered (default: as stored)
        self._properties = message_properties  # what a consumer filter's selector sees
        self.queues: dict[str, QueueState] = {}
        self.pins = OffsetPins(pin_shift)  # the log offsets the entries of every queue point at (per block)
        self._staged: set[str] = set()  # queues with staged entries
        self._busy: set[str] = set()  # queues not ``idle``: those ``tick`` looks at
        self.expiring: set[str] = set()  # queues with an expiry (``expires_ms``): those ``VHost.expire`` looks at
        self._wake_call: Any = None
        self._wake_at = 0
        self.records_gone = 0  # entries dropped because their records are gone
        self.totals = {kind: QueueStats() for kind in KINDS}  # every queue's stats, deleted ones too
        # entries made, by the protocol the message was published with (its envelope's:
        # stats.PUBLISHED_BY names them), for the per-protocol "routed" figure
        self.routed_by = [0] * len(PUBLISHED_BY)
        self._gone_logged: dict[str, tuple[int, int]] = {}  # queue -> (last logged, not logged since)

    # -- queues --------------------------------------------------------------------------

    def create(self, name: str, settings: QueueSettings, *, durable: bool = False, exclusive: Any = None,
               auto_delete: bool = False, declared: Any = None, kind: str = CLASSIC) -> QueueState:
        """A new queue; a durable one gets back the entries its journal kept."""
        if name in self.queues:
            raise ValueError(f"queue {name!r} exists")
        # exact delivery counts per delivery where entries are not handed out in seq order
        exact = settings.limits.max_priority > 0
        if durable:
            queue = Queue(name, settings.limits, self.queue_store.journal(self.vhost, name, exact=exact),
                          settings.retry)
            queue.pins = self.pins
            queue.lateness = self.timers.lateness
            queue.restore(*self.queue_store.load(self.vhost, name, exact=exact))
        else:
            queue = Queue(name, settings.limits, retry=settings.retry)
            queue.pins = self.pins
            queue.lateness = self.timers.lateness
        qs = QueueState(name, settings, queue, durable, exclusive, auto_delete, declared, used_ms=self.clock(),
                        kind=kind, total=self.totals[kind])
        self.queues[name] = qs
        if settings.expires_ms is not None:
            self.expiring.add(name)
        queue.on_busy = partial(self._busy.add, name)
        if not queue.idle:
            self._busy.add(name)
        if queue.staged_count:
            self._staged_in(name, queue.next_visible)
        return qs

    def state(self, name: str) -> QueueState:
        qs = self.queues.get(name)
        if qs is None:
            raise NotFound(f"no queue '{name}' in vhost '{self.vhost}'")
        return qs

    def delete(self, name: str) -> int:
        """Forget a queue and its entries; returns how many were ready."""
        qs = self.state(name)
        count = qs.queue.message_count
        for entry in list(qs.queue.entries.values()):
            self.messages.release(entry.topic, entry.partition, entry.offset)
        qs.queue.unpin_all()
        del self.queues[name]
        self.expiring.discard(name)
        self._staged.discard(name)
        self._busy.discard(name)
        if qs.durable:
            self.queue_store.drop(self.vhost, name)
        return count

    def purge(self, name: str) -> int:
        qs = self.state(name)
        ready = [e for e in qs.queue.entries.values() if e.seq not in qs.queue.leases and not e.visible_ms]
        n = qs.queue.purge()
        for e in ready:
            self.messages.release(e.topic, e.partition, e.offset)
        return n

    # -- enqueue -------------------------------------------------------------------------

    def enqueue(self, names: Iterable[str], topic: str, partition: int, offset: int, message: Message,
                now: int | None = None, dispatch: bool = True, expires_ms: int = 0, visible_ms: int = 0) -> bool:
        """Give each queue of ``names`` an entry for the record at ``offset``; True when a
        queue refused it (overflow reject-publish). ``dispatch`` False: the caller
        dispatches the queues. ``expires_ms``: the message's own expiry as its gateway
        reads it (AMQP's expiration), else the envelope's ``expires_at_ms`` (0: none).
        ``visible_ms``: a delayed message's due time (a released timer): the entries are
        staged until then, the message kept in memory as a published one is, for the
        queues with a consumer (timers are released at most ``timers.LEAD_MS`` ahead, so
        it is not kept long)."""
        if now is None:
            now = self.clock()
        env = message.envelope
        priority = env.priority if env.HasField("priority") else 0
        if env.expires_at_ms and (not expires_ms or env.expires_at_ms < expires_ms):
            expires_ms = env.expires_at_ms
        size = len(message.value or b"")
        made = 0  # entries made, counted by the publisher's protocol (an unknown one: as none)
        by = env.protocol if env.protocol < len(PUBLISHED_BY) else 0
        if visible_ms:
            n = 0
            for name in names:
                qs = self.queues[name]
                qs.queue.publish(topic, partition, offset, size, priority=priority,
                                 expires_ms=expires_ms, now_ms=now, visible_ms=visible_ms)
                self._staged_in(name, visible_ms, now)
                qs.stats.routed += 1
                qs.total.routed += 1
                made += 1
                n += bool(qs.consumers)  # kept in memory for the queues with a consumer, as below
            self.messages.remember(topic, partition, offset, message, size, n)
            self.routed_by[by] += made
            return False
        refs = 0
        refused: list[QueueState] = []
        dropped: list[tuple[QueueState, Removed]] = []
        queues = self.queues
        for name in names:
            qs = queues[name]
            entry, removed = qs.queue.publish(topic, partition, offset, size, priority=priority,
                                              expires_ms=expires_ms, now_ms=now, message=message)
            if removed:
                dropped += [(qs, r) for r in removed]
            if entry is None:
                if qs.queue.limits.overflow != DROP_NEW:
                    refused.append(qs)
                elif qs.on_dropped is not None:
                    qs.on_dropped()
                continue
            qs.stats.routed += 1
            qs.total.routed += 1
            made += 1
            if qs.consumers:
                refs += 1
        self.routed_by[by] += made
        # kept in memory for the queues with a consumer only: the others (an offline MQTT
        # session, a backlog nobody reads) take it from the log when its turn comes, so
        # what waits costs its entry, not its message (issue 30)
        self.messages.remember(topic, partition, offset, message, size, refs)
        for qs, r in dropped:
            self._removed(qs, r)
        for qs in refused:  # overflow reject-publish-dlx: refused, and dead-lettered
            dl = qs.settings.dead_letter
            if qs.queue.limits.overflow == REJECT_PUBLISH_DLX and dl is not None and self._dead_letter is not None:
                qs.stats.dead_lettered += 1
                qs.total.dead_lettered += 1
                self._dead_letter(qs, message, MAXLEN, None)
        if dispatch:
            for name in names:
                self.dispatch(name)
        return bool(refused)

    def message(self, entry: Entry) -> Message:
        if self._message_for is not None:
            return self._message_for(entry)
        return self.messages.get(entry.topic, entry.partition, entry.offset)

    # -- push ------------------------------------------------------------------------------

    def consume(self, name: str, consumer: Consumer, spec: FilterSpec | None = None) -> None:
        """Feed ``consumer`` from queue ``name``: every ready entry in turn, or with
        ``spec`` only those its filter takes."""
        qs = self.state(name)
        qs.consumers.append(consumer)  # with single active consumer, only the first is fed
        view = None
        if spec is not None:
            view = qs.queue.watch(spec, self._accept(spec))
            qs.views[consumer] = (spec, view)
        qs.had_consumer = True
        qs.used_ms = self.clock()
        if view is not None and view.filling and view.users == 1:
            self._fill(name, spec, view)
        else:
            self.dispatch(name)

    def _fill(self, name: str, spec: FilterSpec | None, view: View) -> None:
        """Judge the next part of a new view's backlog (``views.py``), and again in the
        next reactor turn until it is done (without a reactor: all of it now)."""
        qs = self.queues.get(name)
        if qs is None or qs.queue.views.get(spec) is not view:
            return  # the queue, or the view's last consumer, went meanwhile
        reactor = self.timers.reactor
        done = qs.queue.fill(view, FILL_BATCH if reactor is not None else len(view.backlog))
        if not done and reactor is not None:
            reactor.callLater(0, self._fill, name, spec, view)
        self.dispatch(name)

    def _accept(self, spec: FilterSpec) -> Callable[[Entry, Message | None], bool]:
        f, properties = spec.filter, self._properties

        def accept(entry: Entry, message: Message | None) -> bool:
            if message is None:
                try:
                    message = self.message(entry)
                except (RecordGone, RemoteUnavailable):  # no such record (or none in reach): nothing to take
                    return False
            return f.takes(message, entry.topic, properties)

        return accept

    def cancel(self, name: str, consumer: Consumer) -> QueueState | None:
        """Remove a consumer; returns the queue's state (None: no such queue or consumer)."""
        qs = self.queues.get(name)
        if qs is None or consumer not in qs.consumers:
            return None
        qs.consumers.remove(consumer)
        watched = qs.views.pop(consumer, None)
        if watched is not None:
            qs.queue.unwatch(watched[0])
        qs.used_ms = self.clock()
        return qs

    def dispatch(self, name: str) -> None:
        qs = self.queues.get(name)
        if qs is None or not qs.consumers:
            return
        q = qs.queue
        consumers = qs.consumers[:1] if qs.settings.single_active_consumer else qs.consumers
        views = qs.views
        done: list[Consumer] = []  # consumers whose filter takes nothing ready now
        while q.ready_count:
            consumer = self._next_consumer(qs, consumers, done)
            if consumer is None:
                return
            now = self.clock()
            inv = consumer.invisible_ms
            watched = views.get(consumer) if views else None
            d, removed = q.take(consumer.owner, now, now + inv if inv else 0,
                                None if watched is None else watched[1])
            for rm in removed:
                self._removed(qs, rm)
            if d is None:
                if watched is None:
                    return
                done.append(consumer)
                continue
            entry = d.entry
            if watched is None and self.messages.remote is not None:
                when_ready = self.messages.pending(entry.topic, entry.partition, entry.offset)
                if when_ready is not None:  # in a remote segment being fetched: again once here
                    q.untake(d)
                    when_ready(partial(self.dispatch, name))
                    return
            try:
                d.message = self.message(entry)
            except RecordGone as e:
                self.gone(qs, [entry], e)
                continue
            except RemoteUnavailable:  # out of reach for now: again when its partition's readers wake
                q.untake(d)
                when_ready = self.messages.pending(entry.topic, entry.partition, entry.offset)
                if when_ready is not None:
                    when_ready(partial(self.dispatch, name))
                return
            d.consumer = consumer
            if consumer.no_ack:
                q.ack(d)
                self.messages.release(entry.topic, entry.partition, entry.offset)
            stats, total = qs.stats, qs.total  # (inline: the per-message path)
            stats.delivered += 1
            total.delivered += 1
            if d.delivery > 1:
                stats.redelivered += 1
                total.redelivered += 1
            consumer.deliver(d)

    def _next_consumer(self, qs: QueueState, consumers: list[Consumer], done: list[Consumer]) -> Consumer | None:
        n = len(consumers)
        for i in range(n):
            c = consumers[(qs.next_consumer + i) % n]
            if c.has_credit() and (not done or c not in done):
                qs.next_consumer = (qs.next_consumer + i + 1) % n
                return c
        return None

    # -- pull and pop -------------------------------------------------------------------------

    def take(self, name: str, owner: Any, n: int = 1, *, invisible_ms: int = 0,
             no_ack: bool = False, budget_s: float = 0.0, at_least: int = 1) -> list[Delivery]:
        """Up to ``n`` ready messages, leased to ``owner`` (for ``invisible_ms`` if not 0:
        then they are given back unless settled or extended), or settled at once with
        ``no_ack``; with ``budget_s``, fewer once that much time is spent and ``at_least``
        are taken (a large take must not hold the reactor). The last delivery's ``remaining``
        counts the ready messages left. With ``no_ack`` they are settled already."""
        stop_at = perf_counter() + budget_s if budget_s else 0.0
        qs = self.state(name)
        now = self.clock()
        qs.used_ms = now
        q = qs.queue
        if q.next_visible and q.next_visible <= now:
            self._unstage(qs, now)
        deadline = now + invisible_ms if invisible_ms else 0
        out: list[Delivery] = []
        while len(out) < n:
            d, removed = q.take(owner, now, deadline)
            for rm in removed:
                self._removed(qs, rm)
            if d is None:
                break
            entry = d.entry
            try:
                d.message = self.message(entry)
            except RecordGone as e:
                self.gone(qs, [entry], e)
                continue
            except RemoteUnavailable:  # out of reach for now: it stays first in line
                q.untake(d)
                break
            if no_ack:
                q.ack(d)
                self.messages.release(entry.topic, entry.partition, entry.offset)
            _delivered(qs, d)
            out.append(d)
            if stop_at and len(out) >= at_least and perf_counter() >= stop_at:
                break
        if out:
            out[-1].remaining = q.message_count
        return out

    # -- settling ----------------------------------------------------------------------------

    def ack(self, d: Delivery) -> None:
        """Done with the delivery ``d``: its entry leaves its queue (StaleReceipt: ``d``
        is no current lease, and nothing changes; its queue deleted meanwhile: nothing to
        settle)."""
        qs = self.queues.get(d.queue)
        if qs is None:
            return
        e = qs.queue.ack(d)
        qs.stats.acked += 1
        qs.total.acked += 1
        self.messages.release(e.topic, e.partition, e.offset)

    def settle(self, d: Delivery, outcome: Outcome) -> None:
        """Settle the delivery ``d`` (StaleReceipt: it is no current lease, and nothing
        changes; its queue deleted meanwhile: nothing to settle)."""
        if outcome is Outcome.ACK:
            self.ack(d)
            return
        name = d.queue
        qs = self.queues.get(name)
        if qs is None:
            return
        result = qs.queue.settle(d, outcome, self.clock())
        if isinstance(result, Scheduled):
            self._schedule(qs, result)
            return
        if result is not None:
            self._removed(qs, result)
        self.dispatch(name)

    def change_invisible(self, d: Delivery, invisible_ms: int) -> None:
        """The lease ``d`` ends ``invisible_ms`` from now (0: never by itself)."""
        qs = self.state(d.queue)
        qs.queue.change_invisible(d, self.clock() + invisible_ms if invisible_ms else 0)

    def release(self, name: str, owner: Any) -> None:
        """Requeue every lease of ``owner`` (its channel closed or recovered)."""
        qs = self.queues.get(name)
        if qs is None:
            return
        self._returned(qs, qs.queue.release(owner, self.clock()))
        self.dispatch(name)

    def _returned(self, qs: QueueState, out: Returned) -> None:
        for r in out.removed:
            self._removed(qs, r)
        for s in out.scheduled:
            self._schedule(qs, s)

    # -- time --------------------------------------------------------------------------------

    def tick(self, now: int | None = None) -> None:
        """Make due staged entries ready, drop (or dead-letter) expired heads and give
        back leases past their deadline."""
        if now is None:
            now = self.clock()
        if self._staged:
            self._wake(now)
        busy, queues = self._busy, self.queues
        for name in list(busy):  # not every queue: most MQTT sessions' have never held anything
            qs = queues.get(name)
            if qs is None:
                busy.discard(name)
                continue
            q = qs.queue
            if q.idle:
                busy.discard(name)
                continue
            for r in q.expire(now):
                self._removed(qs, r)
            deadline = q.next_deadline
            if deadline and deadline <= now:
                out = q.lapse(now)
                self._returned(qs, out)
                if out.requeued or out.removed:
                    self.dispatch(qs.name)

    def _schedule(self, qs: QueueState, s: Scheduled) -> None:
        """An entry given back with a backoff: a RETRY timer until it is due. The message
        leaves memory meanwhile (read back from the log when it is delivered again)."""
        e = s.entry
        self.messages.release(e.topic, e.partition, e.offset)
        self.timers.add(s.due_ms, TimerRecord(
            kind=TimerRecord.RETRY, vhost=self.vhost, queue=qs.name, topic=e.topic, partition=e.partition,
            offset=e.offset, size=e.size, priority=e.priority, expires_ms=e.expires_ms, deliveries=e.deliveries))

    def retry_due(self, rec: TimerRecord, visible_ms: int = 0) -> bool:
        """A RETRY timer released: the entry goes back to its queue, ready, or staged
        until ``visible_ms`` (False: the queue is gone, and the message with it)."""
        qs = self.queues.get(rec.queue)
        if qs is None:
            return False
        qs.queue.readd(Entry(0, rec.topic, rec.partition, rec.offset, rec.size, rec.priority, rec.expires_ms,
                             rec.deliveries), visible_ms)
        if visible_ms:
            self._staged_in(qs.name, visible_ms)
        else:
            self.dispatch(qs.name)
        return True

    # -- staged entries ----------------------------------------------------------------------

    def _staged_in(self, name: str, visible_ms: int, now: int | None = None) -> None:
        """Queue ``name`` holds an entry staged until ``visible_ms``: wake then. One whose
        time has come waits for the next wake too (a reactor call at once), not made
        ready here: timers released together (a retry due before a delayed message, each
        released in turn) then become ready in visible-time order, not release order."""
        self._staged.add(name)
        if now is None:
            now = self.clock()
        visible_ms = max(visible_ms, now)
        if self._wake_call is not None and self._wake_call.active():
            if self._wake_at <= visible_ms:
                return
            self._wake_call.cancel()
        reactor = self.timers.reactor
        if reactor is None:  # no reactor: ``take`` and ``tick`` make them ready
            return
        self._wake_at = visible_ms
        self._wake_call = reactor.callLater((visible_ms - now) / 1000.0, self._wake)

    def _wake(self, now: int | None = None) -> None:
        """Make the staged entries that are due ready, in every queue; wake again for
        the next (not sooner than ``WAKE_SPACING_MS`` from now: one call serves
        entries due within it)."""
        if now is None:
            now = self.clock()
        if self._wake_call is not None and self._wake_call.active() and self._wake_at > now:
            self._wake_call.cancel()
        self._wake_call = None
        nxt = 0
        for name in list(self._staged):
            qs = self.queues.get(name)
            if qs is None:
                self._staged.discard(name)
                continue
            q = qs.queue
            if q.next_visible and q.next_visible <= now:
                self._unstage(qs, now)
            if not q.staged_count:
                self._staged.discard(name)
            elif not nxt or q.next_visible < nxt:
                nxt = q.next_visible
        reactor = self.timers.reactor
        if nxt and reactor is not None:
            self._wake_at = max(nxt, now + WAKE_SPACING_MS)
            self._wake_call = reactor.callLater((self._wake_at - now) / 1000.0, self._wake)

    def stop(self) -> None:
        """Cancel the wake call (the broker stops; the state store closes)."""
        if self._wake_call is not None and self._wake_call.active():
            self._wake_call.cancel()
        self._wake_call = None

    def _unstage(self, qs: QueueState, now: int) -> None:
        n, removed = qs.queue.unstage(now)
        for r in removed:
            self._removed(qs, r)
        if n:
            self.dispatch(qs.name)

    # -- records that are gone -----------------------------------------------------------------
    #
    # An entry points at a record; the record may be gone: its topic deleted (forced),
    # retention or recovery removed it, or its append was refused after its offset was
    # given (a failed write). Such an entry is dropped where it is met (``gone``), counted
    # and logged, and the next one is delivered; no consumer ever sees an error for it.

    def gone(self, qs: QueueState, entries: list[Entry], why: Exception) -> None:
        """Drop ``entries`` of ``qs`` whose records are gone."""
        qs.queue.drop(entries)
        for e in entries:
            self.messages.release(e.topic, e.partition, e.offset)
        self._count_gone(qs, len(entries), why)

    def withdraw(self, topic: str, partition: int, first: int, end: int, why: Exception, *,
                 leased: bool = False) -> int:
        """Drop every ready or staged entry of every queue that points at offsets
        ``first`` up to ``end`` of ``topic``/``partition`` (appends refused after their
        offsets were given: they leave no trace); returns how many. ``leased``: leased
        ones too point at nothing from now on (``Queue.orphan``; a deleted topic, whose
        offsets will be given again)."""
        n = 0
        for qs in self.queues.values():
            gone = qs.queue.withdraw(topic, partition, first, end)
            if gone:
                for e in gone:
                    self.messages.release(e.topic, e.partition, e.offset)
                self._count_gone(qs, len(gone), why)
                n += len(gone)
            if leased:
                n += qs.queue.orphan(topic, partition, first, end)
        return n

    def evict(self, topic: str, partition: int, below: int, reason: str) -> int:
        """Remove every queue's ready and staged entries pointing below offset ``below``
        of ``topic``/``partition``, dead-lettered with ``reason`` where the queue has a
        target (they held the log past ``queue_max_pinned_ms`` / ``_bytes``); returns
        how many."""
        n = 0
        for qs in list(self.queues.values()):
            removed = qs.queue.evict(topic, partition, below, reason)
            for r in removed:
                self._removed(qs, r)
            if removed:
                n += len(removed)
                log.warning("queue %r of vhost %r: %d messages in %s/%d below offset %d evicted (%s): they held "
                            "the log past its bound", qs.name, self.vhost, len(removed), topic, partition, below,
                            reason)
        return n

    def _count_gone(self, qs: QueueState, n: int, why: Exception) -> None:
        self.records_gone += n
        now = self.clock()
        last, count = self._gone_logged.get(qs.name, (0, 0))
        if now - last >= GONE_LOG_MS:
            log.warning("queue %r of vhost %r: %d entries dropped, their records are gone (%s)",
                        qs.name, self.vhost, count + n, why)
            self._gone_logged[qs.name] = (now, 0)
        else:
            self._gone_logged[qs.name] = (last, count + n)

    # -- dead letters --------------------------------------------------------------------------

    def _removed(self, qs: QueueState, r: Removed) -> None:
        e = r.entry
        if r.reason and qs.settings.dead_letter is not None and self._dead_letter is not None:
            qs.stats.dead_lettered += 1
            qs.total.dead_lettered += 1
            try:
                self._dead_letter(qs, self.messages.get(e.topic, e.partition, e.offset), r.reason, e)
            except (RecordGone, RemoteUnavailable) as exc:  # (remote, out of reach: no copy to dead-letter)
                self._count_gone(qs, 1, exc)
        self.messages.release(e.topic, e.partition, e.offset)

    # -- retention -----------------------------------------------------------------------------

    def pinned_from(self, topic: str, partition: int) -> int | None:
        """The lowest offset an entry of any queue may point at in (topic, partition):
        the start of its block of ``1 << pin_shift`` offsets (retention keeps the
        segments from there; None: none). Kept as entries come and go (``pins.py``): no
        scan."""
        return self.pins.floor(topic, partition)


def _delivered(qs: QueueState, d: Delivery) -> None:
    qs.stats.delivered += 1
    qs.total.delivered += 1
    if d.delivery > 1:
        qs.stats.redelivered += 1
        qs.total.redelivered += 1
