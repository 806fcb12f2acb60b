"""Pop consumption: consumer groups that receive messages from a topic with an invisible
time (RocketMQ 5's SimpleConsumer model), on the queue service.

Theory of operation. A pop group ``G`` reading topic ``T`` is one queue of the queue
service (vhost ``""``, which no user vhost can be; queue ``G + "\\x1f" + T``: neither a
group nor a topic name holds a control character). Every record appended to ``T`` after
the group was created, by any protocol, gets an entry in it (``appended``); a record
with a deliver-at time gets it when due. The members of the group share the queue:
``receive`` leases up to N messages for an invisible time and returns a receipt handle
per message; ``ack`` settles it, ``change_invisible`` moves its deadline (later or
sooner), and a lease left to lapse gives the message back with RocketMQ's backoff
(``retry.policy.POP_DEFAULT``: 1s 5s 10s 30s 1m ... 2h). Two groups on one topic are two
queues: each gets every message.

After ``max_deliveries`` (16) a message is dead-lettered: a copy is appended to the
topic ``%DLQ%<group>``, an ordinary topic that Kafka consumers, Spark, AMQP (through an
exchange of that name) and pop itself read, with the original topic, partition, offset,
reason and delivery count in its envelope (``Envelope.dead_letter``).

A receipt handle is ``"<seq>.<delivery>.<partition>.<offset>"``: the lease named from
outside (``queue.Receipt``: the entry's seq and the delivery count it was leased for)
and where the message is. The queue looks the lease (its ``Delivery``) up by seq and
compares the delivery count, and the entry's place is checked, so a handle that names
no current lease is refused (``StaleReceipt``) and settles nothing.

Groups are recorded in the state store (metadata CF, ``state.pop_group_key``) and come
back, with their entries, after a restart.

A group may have a filter (a tag expression, a selector or both; docs/filters.md), named
by a receive: a record it refuses gets no entry in the group's queue. A receive naming
another filter than the group's replaces it, for the records appended from then on.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from twisted.internet.defer import Deferred, succeed

from ...filters import FilterError
from ...filters.message_filter import FilterSpec
from ...filters.properties import message_tag, record_properties
from ...retry.policy import MAX_DELAY_MS, POP_DEFAULT, RetryPolicy
from ..errors import InvalidRequest, UnknownGroup
from ..log.topic_config import validate_topic_name
from ..message import Message
from ..state import CF_METADATA, POP_GROUP_PREFIX, StateStore, pop_group_key
from ..state_pb2 import PopGroupRecord
from .journal import QueueStore
from .msgstore import MessageStore
from .queue import Delivery, Entry, Outcome, Receipt, StaleReceipt
from .service import DeadLetterTarget, QueueService, QueueSettings, QueueState
from .stats import POP
from .timers import Timers

log = logging.getLogger(__name__)

POP_VHOST = ""  # the queue service namespace of pop groups: no user vhost is named ""
DLQ_PREFIX = "%DLQ%"
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # RocketMQ's longest invisible time
MAX_RECEIVE = 1024  # messages per receive
# a receive returns fewer than asked once it has taken this long (building the answer
# costs about as much again): 1,024 messages cost 15-20 ms of the reactor, and every
# other client waited for them
RECEIVE_BUDGET_S = 0.003
# ...but never fewer than this many of those ready (half a millisecond): a receive of a few
# gets all it asked for however busy the machine is
RECEIVE_AT_LEAST = 32
MAX_WAIT_MS = 30_000  # the longest a receive waits for a first message
_SEP = "\x1f"
_GROUP_RE = re.compile(r"^[^\x00-\x1f/\\%]+$")


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def check_group(group: str) -> str:
    if not isinstance(group, str) or not group or not _GROUP_RE.match(group):
        raise InvalidRequest(f"pop group name {group!r} must be non-empty, without '/', '\\\\', '%' "
                             "or control characters")
    validate_topic_name(dlq_topic(group))  # its dead-letter topic must be nameable
    return group


def check_invisible(ms: Any) -> int:
    if not isinstance(ms, int) or isinstance(ms, bool) or not 1 <= ms <= MAX_INVISIBLE_MS:
        raise InvalidRequest(f"invisible time must be an integer from 1 to {MAX_INVISIBLE_MS} ms, not {ms!r}")
    return ms


def format_handle(d: Delivery) -> str:
    e = d.entry
    return f"{e.seq}.{d.delivery}.{e.partition}.{e.offset}"


def parse_handle(handle: Any) -> tuple[Receipt, int, int]:
    """(receipt, partition, offset) of a receipt handle; InvalidRequest if malformed."""
    parts = handle.split(".") if isinstance(handle, str) else []
    if len(parts) != 4 or not all(p.isdigit() and len(p) <= 20 for p in parts):
        raise InvalidRequest(f"malformed receipt handle {handle!r}")
    seq, delivery, partition, offset = (int(p) for p in parts)
    return Receipt(seq, delivery), partition, offset


@dataclass(frozen=True, slots=True)
class Popped:
    """One received message."""

    handle: str
    topic: str
    partition: int
    offset: int
    deliveries: int
    message: Message


class PopGroups:
    def __init__(self, store: StateStore | None, queue_store: QueueStore, timers: Timers, messages: MessageStore, *,
                 clock: Callable[[], int], dead_letter: Callable[[str, Message], None],
                 retry: RetryPolicy = POP_DEFAULT) -> None:
        """``dead_letter(topic, message)``: append a dead-lettered copy to ``topic``
        (created if missing)."""
        self._store = store
        self._append_dead = dead_letter
        self.retry = retry
        self.clock = clock
        self.service = QueueService(POP_VHOST, queue_store, timers, messages, clock=clock,
                                    dead_letter=self._dead_letter)
        self.by_topic: dict[str, list[str]] = {}  # topic -> its groups' queue names
        self.filters: dict[str, FilterSpec] = {}  # queue name -> the group's filter
        # what a selector sees of a message (the server hands in one that decodes AMQP headers)
        self.properties: Callable[[Message, str], Mapping[str, Any]] = record_properties

    @staticmethod
    def queue_name(group: str, topic: str) -> str:
        return group + _SEP + topic

    def load(self) -> None:
        """Open every recorded group (its entries come back from the journal)."""
        if self._store is None:
            return
        for _, raw in self._store.scan_prefix(CF_METADATA, POP_GROUP_PREFIX):
            rec = PopGroupRecord.FromString(raw)
            self._open(rec.group, rec.topic)
            if rec.filter_tag or rec.filter_sql:
                try:
                    spec = FilterSpec.parse(rec.filter_tag or None, rec.filter_sql or None, "filter_tag", "filter_sql")
                except FilterError as e:  # was valid when set
                    log.error("pop group %r on %r: its filter no longer parses, none is applied: %s",
                              rec.group, rec.topic, e)
                    continue
                if spec is not None:
                    self.filters[self.queue_name(rec.group, rec.topic)] = spec

    def _open(self, group: str, topic: str) -> QueueState:
        settings = QueueSettings(retry=self.retry, dead_letter=DeadLetterTarget(topic=dlq_topic(group)))
        name = self.queue_name(group, topic)
        qs = self.service.create(name, settings, durable=True, kind=POP)
        self.by_topic.setdefault(topic, []).append(name)
        return qs

    def ensure(self, group: str, topic: str, spec: FilterSpec | None = None) -> QueueState:
        """The group's queue on ``topic``, created (and recorded) on first use: it gets
        the records appended from then on. ``spec``: the group's filter from now on."""
        name = self.queue_name(group, topic)
        qs = self.service.queues.get(name)
        if qs is not None and (spec is None or self.filters.get(name) == spec):
            return qs
        check_group(group)
        if self._store is not None:
            created = self.clock()
            if qs is not None:
                old = self._store.get(CF_METADATA, pop_group_key(group, topic))
                if old is not None:
                    created = PopGroupRecord.FromString(old).created_ms
            self._store.put(CF_METADATA, pop_group_key(group, topic),
                            PopGroupRecord(group=group, topic=topic, created_ms=created,
                                           filter_tag=spec.tag or "" if spec else "",
                                           filter_sql=spec.sql or "" if spec else ""), sync=True)
        if spec is not None:
            self.filters[name] = spec
        return qs if qs is not None else self._open(group, topic)

    def groups(self) -> list[tuple[str, str, QueueState]]:
        """(group, topic, state) of every pop group."""
        out = []
        for name, qs in sorted(self.service.queues.items()):
            group, _, topic = name.partition(_SEP)
            out.append((group, topic, qs))
        return out

    def delete(self, group: str, topic: str) -> None:
        name = self.queue_name(group, topic)
        if name not in self.service.queues:
            raise UnknownGroup(f"no pop group {group!r} on topic {topic!r}")
        self.service.delete(name)
        self.filters.pop(name, None)
        names = self.by_topic.get(topic, [])
        if name in names:
            names.remove(name)
        if self._store is not None:
            self._store.delete(CF_METADATA, pop_group_key(group, topic), sync=True)

    # -- feeding -------------------------------------------------------------------------

    def watches(self, topic: str) -> bool:
        return bool(self.by_topic.get(topic))

    def appended(self, topic: str, partition: int, offset: int, message: Message, expires_ms: int = 0,
                 visible_ms: int = 0) -> None:
        """A record appended to ``topic`` (visible now, or staged until ``visible_ms``):
        every group on it gets an entry."""
        names = self.by_topic.get(topic)
        if names and self.filters:
            names = self._passing(names, topic, message)
        if names:
            self.service.enqueue(names, topic, partition, offset, message, expires_ms=expires_ms,
                                 visible_ms=visible_ms)

    def _passing(self, names: list[str], topic: str, message: Message) -> list[str]:
        filters, properties = self.filters, self.properties
        tag = message_tag(message.envelope, message.headers)
        return [n for n in names if (f := filters.get(n)) is None
                or f.filter.matches(tag, lambda: properties(message, topic))]

    # -- consuming -----------------------------------------------------------------------

    def _state(self, group: str, topic: str) -> QueueState:
        qs = self.service.queues.get(self.queue_name(group, topic))
        if qs is None:
            raise UnknownGroup(f"no pop group {group!r} on topic {topic!r}")
        return qs

    def receive(self, group: str, topic: str, member: str, n: int, invisible_ms: int,
                filter_tag: Any = None, filter_sql: Any = None) -> list[Popped]:
        """Up to ``n`` messages, each invisible to the group for ``invisible_ms`` unless
        acked or changed (the group is created on first use). ``filter_tag`` and
        ``filter_sql``: the group's filter from now on (InvalidRequest if it does not parse)."""
        check_invisible(invisible_ms)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_RECEIVE:
            raise InvalidRequest(f"a receive takes 1 to {MAX_RECEIVE} messages, not {n!r}")
        try:
            spec = FilterSpec.parse(filter_tag, filter_sql, "filter_tag", "filter_sql")
        except FilterError as e:
            raise InvalidRequest(str(e)) from None
        qs = self.ensure(group, topic, spec)
        got = self.service.take(qs.name, member, n, invisible_ms=invisible_ms, budget_s=RECEIVE_BUDGET_S,
                                 at_least=RECEIVE_AT_LEAST)
        return [Popped(format_handle(d), d.entry.topic, d.entry.partition, d.entry.offset, d.delivery,
                       _message(d)) for d in got]

    def receive_wait(self, group: str, topic: str, member: str, n: int, invisible_ms: int, wait_ms: int,
                     call_later: Callable[..., Any], filter_tag: Any = None,
                     filter_sql: Any = None) -> Deferred[list[Popped]]:
        """``receive``, waiting up to ``wait_ms`` for a first message when none is ready
        (long polling): fires with what is ready when the first arrives, or empty."""
        if not isinstance(wait_ms, int) or isinstance(wait_ms, bool) or not 0 <= wait_ms <= MAX_WAIT_MS:
            raise InvalidRequest(f"a receive waits 0 to {MAX_WAIT_MS} ms, not {wait_ms!r}")
        got = self.receive(group, topic, member, n, invisible_ms, filter_tag, filter_sql)
        if got or not wait_ms:
            return succeed(got)
        waiter = _Waiter(self, self.queue_name(group, topic), member, n, invisible_ms, call_later)
        self.service.consume(waiter.queue, waiter)
        waiter.timeout = call_later(wait_ms / 1000.0, waiter.finish)
        return waiter.done

    def _lease(self, qs: QueueState, handle: Any) -> Delivery:
        """The current lease a receipt handle names; StaleReceipt when none."""
        r, partition, offset = parse_handle(handle)
        try:
            d = qs.queue.lease(r)
        except StaleReceipt:
            d = None
        if d is None or d.entry.partition != partition or d.entry.offset != offset:
            raise StaleReceipt(f"receipt handle {handle!r} names no current lease")
        return d

    def ack(self, group: str, topic: str, handle: Any) -> None:
        qs = self._state(group, topic)
        self.service.ack(self._lease(qs, handle))

    def nack(self, group: str, topic: str, handle: Any) -> None:
        """Give the message back now: it comes again after the group's backoff."""
        qs = self._state(group, topic)
        self.service.settle(self._lease(qs, handle), Outcome.RETRY)

    def change_invisible(self, group: str, topic: str, handle: Any, invisible_ms: int) -> None:
        check_invisible(invisible_ms)
        qs = self._state(group, topic)
        self.service.change_invisible(self._lease(qs, handle), invisible_ms)

    # -- dead letters ----------------------------------------------------------------------

    def _dead_letter(self, qs: QueueState, original: Message, reason: str, entry: Entry | None) -> None:
        group, _, _ = qs.name.partition(_SEP)
        env = type(original.envelope)()
        env.CopyFrom(original.envelope)
        dl = env.dead_letter
        dl.reason, dl.queue, dl.time_ms = reason, group, self.clock()
        if entry is not None:
            dl.topic, dl.partition, dl.offset, dl.delivery_count = (entry.topic, entry.partition, entry.offset,
                                                                    entry.deliveries)
        env.delivery_count = entry.deliveries if entry is not None else 0
        copy = Message(original.key, original.value, None, list(original.headers), env)
        self._append_dead(dlq_topic(group), copy)


class _Waiter:
    """A long-polling receive: a push consumer of the group's queue with credit for one
    batch; it answers with what it got on the reactor turn of its first delivery, or
    empty when its wait ends."""

    no_ack = False

    def __init__(self, groups: PopGroups, queue: str, member: str, n: int, invisible_ms: int,
                 call_later: Callable[..., Any]) -> None:
        self.groups, self.queue, self.owner, self.n = groups, queue, member, n
        self.tag = f"wait:{member}"
        self.invisible_ms = invisible_ms
        self.call_later = call_later
        self.got: list[Popped] = []
        self.done: Deferred[list[Popped]] = Deferred()
        self.timeout: Any = None
        self.finished = False

    def has_credit(self) -> bool:
        return not self.finished and len(self.got) < self.n

    def deliver(self, d: Delivery) -> None:
        if not self.got:
            self.call_later(0, self.finish)  # the rest of this turn's ready messages first
        e = d.entry
        self.got.append(Popped(format_handle(d), e.topic, e.partition, e.offset, d.delivery, _message(d)))

    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        self.groups.service.cancel(self.queue, self)
        if self.timeout is not None and self.timeout.active():
            self.timeout.cancel()
        self.done.callback(self.got)


def _message(d: Delivery) -> Message:
    """The message of a delivery the queue service handed out (it sets it)."""
    assert d.message is not None
    return d.message


def check_delay(ms: Any) -> int:
    if not isinstance(ms, int) or isinstance(ms, bool) or not 0 <= ms <= MAX_DELAY_MS:
        raise InvalidRequest(f"a delay must be an integer from 0 to {MAX_DELAY_MS} ms (40 days), not {ms!r}")
    return ms
