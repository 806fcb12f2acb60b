"""Records appended to a topic reach the queue views that read it: the queues of every
vhost (through its model's bindings) and the pop groups; at once, or when a deliver-at
time comes.

Theory of operation. Whoever appends tells the feed: a Kafka produce
(``route_appended``, records decoded only when some queue reads the topic), an HTTP
publish (``record`` or ``delay``), and a vhost model's own publishes (it enqueues its
routed queues itself and hands the pop groups their copy through its hooks). A record
with a deliver-at time in the future becomes a DELAY timer (``timers.py``); when it is
due, ``timer_due`` routes it as its publish would have: through the exchange it was
published to (an AMQP publish), else as any record of its topic. Due RETRY timers go
back to their queue service. The feed never appends and never raises into the caller:
an append stands whatever routing does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Callable

from ...retry.policy import MAX_DELAY_MS
from ..errors import LogbusError, StorageError
from ..log import batch as B
from ..log.batch import BatchInfo
from ..log.format import ATTR_TRANSACTIONAL
from ..message import Message
from ..state_pb2 import TimerRecord
from .msgstore import MessageStore
from .pop import PopGroups
from .timers import Timers

if TYPE_CHECKING:
    from ..vhost import VHost

log = logging.getLogger(__name__)


class Feed:
    def __init__(self, vhosts: Mapping[str, VHost], pop: PopGroups, timers: Timers, messages: MessageStore,
                 clock: Callable[[], int]) -> None:
        self.vhosts = vhosts  # the broker's live dict
        self.pop = pop
        self.timers = timers
        self.messages = messages  # delayed records read back from the log
        self.clock = clock

    def route_appended(self, topic: str, partition: int, base: int, data: bytes, infos: list[BatchInfo]) -> int:
        """Kafka-produced batches just appended at ``base``: each record goes to the AMQP
        queues bound to the exchange behind ``topic``, in every vhost that has one
        (docs/architecture.md section 4), and to the pop groups reading ``topic``; a
        record with a deliver-at header (``logbus.deliver_at``, epoch ms, or
        ``logbus.delay_ms``) gets there when due. Returns how many records reached a
        queue now. Transactional batches are not routed (docs/interop.md). The append
        stands whatever happens here: a failure is logged, not raised."""
        vhosts = [v for v in self.vhosts.values() if v.routes_topic(topic)]
        pop = self.pop.watches(topic)
        if not vhosts and not pop:
            return 0
        routed = 0
        now = self.clock()
        for offset, message in decode_appended(base, data, infos):
            due = deliver_at(message, now)
            if due:
                self.delay(topic, partition, offset, due)
                continue
            routed += self.record(topic, partition, offset, message, vhosts)
        return routed

    def record(self, topic: str, partition: int, offset: int, message: Message,
               vhosts: list[VHost] | None = None, visible_ms: int = 0, *, strict: bool = False) -> int:
        """A record of ``topic``, visible now (or staged until ``visible_ms``), to the
        queues that read the topic: those bound to the exchange behind it in every vhost,
        and the pop groups. 1 if it reached a vhost's queue. A vhost whose routing fails
        is logged (a StorageError as a warning line, anything else with its traceback)
        and the others go on; ``strict`` (a released timer): then the first failure is
        raised, so that the record is handed over again."""
        if vhosts is None:
            vhosts = [v for v in self.vhosts.values() if v.routes_topic(topic)]
        routed = 0
        failure: Exception | None = None
        for vhost in vhosts:
            try:
                routed |= vhost.route_record(topic, partition, offset, message, visible_ms)
            except Exception as exc:
                if not strict:
                    text = "routing the record at %s/%d offset %d in vhost %r failed"
                    if isinstance(exc, StorageError):  # the disk, not a bug: no traceback
                        log.warning(text + ": %s", topic, partition, offset, vhost.name, exc)
                    else:
                        log.exception(text, topic, partition, offset, vhost.name)
                failure = failure or exc
        self.pop.appended(topic, partition, offset, message, visible_ms=visible_ms)
        if strict and failure is not None:
            raise failure
        return routed

    def delay(self, topic: str, partition: int, offset: int, due_ms: int, *, vhost: str = "", exchange: str = "",
              routing_key: str = "") -> None:
        """Route the record at ``offset`` when ``due_ms`` comes, not now: through
        ``exchange`` of ``vhost`` (an AMQP publish), else as any record appended to
        ``topic`` (to the queues bound to the exchange behind it, in every vhost, and to
        the pop groups reading it)."""
        self.timers.add(due_ms, TimerRecord(kind=TimerRecord.DELAY, vhost=vhost, exchange=exchange,
                                            routing_key=routing_key, topic=topic, partition=partition,
                                            offset=offset))

    def timer_due(self, due_ms: int, rec: TimerRecord) -> None:
        """A timer released (at most ``timers.LEAD_MS`` before due): a retry goes back to
        its queue, a delayed message is routed as its publish would have routed it; both
        staged in their queues until due. (Routing is done on release: a binding made or
        removed in the last ``LEAD_MS`` before the due time is not seen.) A delayed
        message no longer in the log is logged and dropped; any other failure raises, and
        the timer is handed over again later (``Timers``)."""
        if rec.kind == TimerRecord.RETRY:
            service = self.pop.service if rec.vhost == "" else getattr(self.vhosts.get(rec.vhost), "service", None)
            if service is not None:
                service.retry_due(rec, due_ms)
            return
        try:
            message = self.messages.get(rec.topic, rec.partition, rec.offset)
        except (KeyError, LogbusError) as exc:
            log.warning("a delayed message at %s/%d offset %d is gone: %s", rec.topic, rec.partition, rec.offset,
                        exc)
            return
        vhost = self.vhosts.get(rec.vhost) if rec.vhost else None
        if vhost is not None:
            vhost.route_delayed(rec.exchange, rec.routing_key, rec.topic, rec.partition, rec.offset, message,
                                due_ms)
            self.pop.appended(rec.topic, rec.partition, rec.offset, message, visible_ms=due_ms)
        else:
            self.record(rec.topic, rec.partition, rec.offset, message, visible_ms=due_ms, strict=True)


def decode_appended(base: int, data: bytes, infos: list[BatchInfo]) -> list[tuple[int, Message]]:
    """The records of batches appended at ``base`` as (offset, Message); transactional
    batches left out."""
    out = []
    pos, offset = 0, base
    for info in infos:
        if not info.attributes & ATTR_TRANSACTIONAL:
            for r in B.decode(memoryview(data)[pos : pos + info.size]):
                message = Message.from_record(B.Record(r.key, r.value, r.timestamp, r.headers))
                out.append((offset + r.offset - info.base_offset, message))
        offset += info.last_offset_delta + 1
        pos += info.size
    return out


DELIVER_AT_HEADER = "logbus.deliver_at"  # epoch ms, decimal text
DELAY_HEADER = "logbus.delay_ms"  # ms from the append, decimal text


def deliver_at(message: Message, now: int) -> int:
    """When a record appended now should reach queues (0: at once): its envelope's
    deliver-at time, or a Kafka producer's ``logbus.deliver_at`` / ``logbus.delay_ms``
    header. A malformed or out-of-range header is ignored (the record is delivered)."""
    due = message.envelope.deliver_at_ms
    if not due and message.headers:
        for name, value in message.headers:
            if name in (DELIVER_AT_HEADER, DELAY_HEADER) and value is not None and value.isdigit():
                due = int(value) if name == DELIVER_AT_HEADER else now + int(value)
                if not 0 <= due - now <= MAX_DELAY_MS:
                    return 0
    return due if due > now else 0
