"""A channel's consumers and what it delivers: basic.qos, basic.consume / cancel, basic.get,
the deliveries and their settlement (ack, nack, reject, recover), for ``Channel``
(channel.py) as the ``Consuming`` mixin.

A channel numbers what it delivers (delivery tags, from 1) and keeps, per tag not yet
settled, the delivery itself (the queue's lease, ``core/queues/entry.py``, its tag in
``tag``, the consumer it went to in ``consumer``: None for basic.get); acks, nacks,
rejects, recover and closing give it back to settle or requeue it through the vhost
(``core/vhost.py``). Prefetch is RabbitMQ's:
``basic.qos`` with ``global`` false limits each consumer started after it, with
``global`` true the whole channel. In tx mode settlements wait for ``tx.commit``.
"""

from __future__ import annotations

import base64
import os
from collections import OrderedDict
from typing import TYPE_CHECKING, Callable

from pamqp import base
from pamqp import commands as C

from ...core.types import Kind, Perm
from ...core.types import MAX_INVISIBLE_MS
from ...core.errors import StaleReceipt
from ...filters import FilterError
from ...filters.message_filter import SQL_ARG, TAG_ARG, FilterSpec
from .errors import ACCESS_REFUSED, PRECONDITION_FAILED, AMQPChannelError, AMQPConnectionError
from .events import Ack, Nack, Reject
from .fastpath import deliver_parts, encode_deliver_parts, encode_get_ok, encode_properties, shortstr
from .mapping import properties_of
from ...core.types import Delivery
from ...core.ports import Queues

if TYPE_CHECKING:
    from .session import Session


X_INVISIBLE_TIME = "x-invisible-time"  # consumer argument: ms before an unacked delivery goes back


def new_name(prefix: str) -> str:
    """A server-generated name: ``amq.gen-...`` for a queue, ``amq.ctag-...`` for a consumer."""
    return prefix + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


class ChannelConsumer:
    """``core.vhost.Consumer`` for one basic.consume."""

    __slots__ = ("tag", "tag_raw", "owner", "no_ack", "queue", "prefetch", "unacked", "exclusive", "invisible_ms")

    def __init__(self, tag: str, channel: Consuming, queue: str, no_ack: bool, prefetch: int,
                 exclusive: bool = False, invisible_ms: int = 0) -> None:
        self.tag = tag
        self.tag_raw = shortstr(tag)  # as basic.deliver carries it
        self.exclusive = exclusive
        self.owner = channel
        self.queue = queue
        self.no_ack = no_ack
        self.prefetch = prefetch
        self.unacked = 0
        self.invisible_ms = invisible_ms  # x-invisible-time: an unacked delivery lapses after it

    def has_credit(self) -> bool:
        ch: Consuming = self.owner
        if not ch.active or ch.closing:
            return False
        if self.no_ack:
            return ch.conn.writable()
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        return not ch.global_prefetch or len(ch.unacked) < ch.global_prefetch

    def deliver(self, d: Delivery) -> None:
        self.owner.deliver(self, d)



class Consuming:
    """The consumer side of ``Channel``: its consumers, prefetch and unsettled deliveries.
    The first of Channel's bases (Consuming <- Declarations <- Publishing <- Channel)."""

    # the Channel's own, set in Channel.__init__
    conn: Session
    number: int
    vhost: Queues  # the vhost's queue model
    active: bool  # channel.flow
    closing: bool  # we sent Channel.Close; waiting for Close-Ok
    prefetch: int  # per consumer (basic.qos global=false)
    global_prefetch: int
    consumers: dict[str, ChannelConsumer]
    unacked: OrderedDict[int, Delivery]  # delivery tag -> what it delivered
    next_tag: int
    tx: list[Callable[[], None]] | None  # pending operations in tx mode

    def _reply(self, m: base.Frame) -> None:
        raise NotImplementedError  # the Channel's
    def _permit(self, perm: Perm, kind: Kind, name: str) -> None:
        raise NotImplementedError  # the Channel's
    def _owned(self, queue: str, class_id: int, method_id: int) -> None:
        raise NotImplementedError  # the Channel's

    # -- basic ------------------------------------------------------------------------------------

    def _basic_qos(self, m: C.Basic.Qos) -> None:
        if m.global_:
            self.global_prefetch = m.prefetch_count
        else:
            self.prefetch = m.prefetch_count
        self._reply(C.Basic.QosOk())
        for q in {c.queue for c in self.consumers.values()}:
            self.vhost.dispatch(q)

    def _basic_consume(self, m: C.Basic.Consume) -> None:
        self._permit("read", "queue", m.queue)
        self._owned(m.queue, 60, 20)
        qs = self.vhost.queue(m.queue)
        tag = m.consumer_tag or new_name("amq.ctag-")
        if tag in self.consumers:
            raise AMQPConnectionError(530, f"attempt to reuse consumer tag '{tag}'", channel=self.number,
                                      class_id=60, method_id=20)
        if m.exclusive and qs.consumers or any(getattr(c, "exclusive", False) for c in qs.consumers):
            raise AMQPChannelError(ACCESS_REFUSED, f"queue '{m.queue}' in vhost '{self.vhost.name}' in exclusive use",
                                   channel=self.number, class_id=60, method_id=20)
        args = m.arguments or {}
        invisible = args.get(X_INVISIBLE_TIME, 0)
        if isinstance(invisible, bool) or not isinstance(invisible, int) or not 0 <= invisible <= MAX_INVISIBLE_MS:
            raise AMQPChannelError(406, f"invalid arg '{X_INVISIBLE_TIME}' for consumer on queue '{m.queue}' in "
                                   f"vhost '{self.vhost.name}': must be an integer from 0 to {MAX_INVISIBLE_MS} ms",
                                   channel=self.number, class_id=60, method_id=20)
        spec = None
        if TAG_ARG in args or SQL_ARG in args:
            try:
                spec = FilterSpec.parse(args.get(TAG_ARG), args.get(SQL_ARG))
            except FilterError as e:
                raise AMQPChannelError(406, f"invalid arg for consumer on queue '{m.queue}' in vhost "
                                       f"'{self.vhost.name}': {e}", channel=self.number, class_id=60,
                                       method_id=20) from None
        c = ChannelConsumer(tag, self, m.queue, m.no_ack, self.prefetch, m.exclusive, 0 if m.no_ack else invisible)
        self.consumers[tag] = c
        if not m.nowait:
            self._reply(C.Basic.ConsumeOk(tag))
        self.vhost.consume(m.queue, c, spec)

    def _basic_cancel(self, m: C.Basic.Cancel) -> None:
        c = self.consumers.pop(m.consumer_tag or "", None)
        if c is not None:
            self.vhost.cancel(c.queue, c)
        if not m.nowait:
            self._reply(C.Basic.CancelOk(m.consumer_tag))

    def cancelled_by_broker(self, c: ChannelConsumer) -> None:
        """The queue went away: tell the client (consumer cancel notify)."""
        if self.consumers.pop(c.tag, None) is not None and self.conn.cancel_notify:
            self._reply(C.Basic.Cancel(c.tag, nowait=True))

    def deliver(self, c: ChannelConsumer, d: Delivery) -> None:
        tag = self.next_tag
        self.next_tag = tag + 1
        if not c.no_ack:
            d.tag = tag
            self.unacked[tag] = d
            c.unacked += 1
        m = d.message
        assert m is not None
        encoded = m.encoded
        parts = encoded.get(AMQP) if encoded is not None else None
        if parts is None:  # the first delivery of this message (fanout: the others reuse it)
            env = m.envelope
            parts = deliver_parts(env.exchange, env.routing_key, _props(d), m.value or b"")
            if encoded is None:
                m.encoded = {AMQP: parts}
            else:
                encoded[AMQP] = parts
        conn = self.conn
        conn.send(encode_deliver_parts(self.number, c.tag_raw, tag, d.delivery > 1, parts,
                                       m.value or b"", conn.frame_max))
        d.message = None  # sent: an unacked delivery does not hold its message (requeued, it is read again)
        if conn.record is not None:
            conn.record.sent += 1
        prompt = conn.prompt
        if prompt.active:  # a publish being handled reached a consumer with credit
            prompt.deliveries += 1
            if not conn.prompt_due:
                conn.prompt_due = True
                prompt.sessions.append(conn)

    def _basic_get(self, m: C.Basic.Get) -> None:
        self._permit("read", "queue", m.queue)
        self._owned(m.queue, 60, 70)
        d = self.vhost.get(m.queue, self, m.no_ack)
        if d is None:
            self._reply(C.Basic.GetEmpty())
            return
        tag = self.next_tag
        self.next_tag = tag + 1
        if not m.no_ack:
            d.tag = tag
            self.unacked[tag] = d
        message = d.message
        assert message is not None
        env = message.envelope
        self.conn.send(encode_get_ok(self.number, tag, d.delivery > 1, env.exchange, env.routing_key,
                                     d.remaining, _props(d), message.value or b"", self.conn.frame_max))
        d.message = None  # sent: an unacked delivery does not hold its message
        if self.conn.record is not None:
            self.conn.record.sent += 1

    # -- settling ----------------------------------------------------------------------------------

    def _tags(self, tag: int, multiple: bool, what: str) -> list[int]:
        if multiple:
            tags = [t for t in self.unacked if t <= tag] if tag else list(self.unacked)
            if tag and not tags and tag not in self.unacked:
                raise AMQPChannelError(PRECONDITION_FAILED, f"unknown delivery tag {tag}", channel=self.number,
                                       class_id=60, method_id=_METHOD_IDS[what])
            return tags
        if tag not in self.unacked:
            raise AMQPChannelError(PRECONDITION_FAILED, f"unknown delivery tag {tag}", channel=self.number,
                                   class_id=60, method_id=_METHOD_IDS[what])
        return [tag]

    def settle(self, ev: Ack | Nack | Reject) -> None:
        if isinstance(ev, Ack):
            tags, requeue, ack = self._tags(ev.delivery_tag, ev.multiple, "ack"), False, True
        elif isinstance(ev, Nack):
            tags, requeue, ack = self._tags(ev.delivery_tag, ev.multiple, "nack"), ev.requeue, False
        else:
            tags, requeue, ack = self._tags(ev.delivery_tag, False, "reject"), ev.requeue, False
        if self.tx is not None:  # settled at commit; a rollback leaves them unacked
            self.tx.append(lambda: self._settle(self._take(tags), ack, requeue))
            return
        self._settle(self._take(tags), ack, requeue)

    def ack_many(self, acks: list[Ack]) -> None:
        """Consecutive basic.ack of one read on this channel: as ``settle`` each, in order,
        with the queues dispatched once at the end. An unknown tag closes the channel
        after the acks before it were settled."""
        if self.tx is not None:
            for a in acks:
                self.settle(a)
            return
        taken: list[Delivery] = []
        unacked = self.unacked
        try:
            for a in acks:
                tag = a.delivery_tag
                if not a.multiple and tag in unacked:
                    taken.append(unacked.pop(tag))
                elif a.multiple and not tag and taken:  # "all outstanding": with what the acks before deliver
                    settle, taken = taken, []
                    self._settle(settle, True, False)
                    taken = self._take(self._tags(tag, True, "ack"))
                else:
                    taken += self._take(self._tags(tag, a.multiple, "ack"))
        finally:
            self._settle(taken, True, False)

    def _take(self, tags: list[int]) -> list[Delivery]:
        unacked = self.unacked
        return [unacked.pop(t) for t in tags if t in unacked]

    def _settle(self, taken: list[Delivery], ack: bool, requeue: bool) -> None:
        touched = set()
        vhost = self.vhost
        for d in taken:
            c = d.consumer
            if c is not None:
                c.unacked -= 1
            try:
                if ack:
                    vhost.ack(d)
                else:
                    vhost.reject(d, requeue)
            except StaleReceipt:
                pass  # the queue was purged or deleted meanwhile
            touched.add(d.queue)
        for q in touched:
            vhost.dispatch(q)

    def _basic_recover(self, m: C.Basic.Recover | C.Basic.RecoverAsync) -> None:
        self.requeue_all()
        if isinstance(m, C.Basic.Recover):
            self._reply(C.Basic.RecoverOk())

    def requeue_all(self) -> None:
        queues = {d.queue for d in self.unacked.values()}
        for d in self.unacked.values():
            if d.consumer is not None:
                d.consumer.unacked -= 1
        self.unacked.clear()
        for q in queues:
            self.vhost.release(q, self)


def _props(d: Delivery) -> bytes:
    m = d.message
    assert m is not None
    raw = m.origin_properties
    return raw if raw is not None else encode_properties(properties_of(m))


_METHOD_IDS = {"ack": 80, "nack": 120, "reject": 90}
AMQP = "amqp"  # this gateway's key in ``Message.encoded``
