"""One AMQP channel: the class methods a client sends on it, answered against a vhost.

A channel numbers what it delivers (delivery tags, from 1) and remembers, per tag not
yet settled, which queue entry it is; acks, nacks, rejects, recover and closing settle
or requeue through the vhost (``gateway/amqp/model/vhost.py``). Prefetch is RabbitMQ's: ``basic.qos``
with ``global`` false limits each consumer started after it, with ``global`` true the
whole channel. In confirm mode every publish gets a sequence number and is acked once
its record is durable (nacked when a queue refuses it under x-overflow reject-publish).
In tx mode publishes and settlements wait for ``tx.commit``.

Refusals of the broker's model (``core.errors.Refused``, as 404, 403, 405, 406) close the channel
with that reply code; the connection (connection.py, through session.py) sends the Channel.Close and
discards what arrives on the channel until Close-Ok.

Permissions (``core.access.auth``) are checked as RabbitMQ does, before the operation: configure
on the exchange or queue declared or deleted, write on the destination and read on the
source of a binding, write on the exchange of basic.publish, read on the queue of
basic.get / consume and queue.purge; a denial is 403 ACCESS_REFUSED. The publish check
is cached per exchange (``writable``) while ``access.version`` stays what it was, so a
publish costs one comparison and one set lookup, never a regular expression.
"""

from __future__ import annotations

import base64
import os
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

from pamqp import base
from pamqp import commands as C

from ...core.access.auth import Kind, Perm
from ...core.queues.pop import MAX_INVISIBLE_MS
from ...core.queues.queue import Receipt, StaleReceipt
from ...core.errors import Refused
from .model.vhost import Delivery, VHost
from .errors import (
    ACCESS_REFUSED,
    refused,
    COMMAND_INVALID,
    NO_ROUTE,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    AMQPChannelError,
    AMQPConnectionError,
)
from .confirms import Confirms
from .events import Ack, Nack, Publish, Reject
from .fastpath import (
    deliver_parts,
    encode_ack,
    encode_deliver_parts,
    encode_get_ok,
    encode_nack,
    encode_properties,
    encode_return,
    shortstr,
)
from .mapping import properties_of, to_message

if TYPE_CHECKING:
    from .session import Session


X_INVISIBLE_TIME = "x-invisible-time"  # consumer argument: ms before an unacked delivery goes back


def _name(prefix: str) -> str:
    return prefix + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")


class ChannelConsumer:
    """``core.vhost.Consumer`` for one basic.consume."""

    __slots__ = ("tag", "tag_raw", "owner", "no_ack", "queue", "prefetch", "unacked", "exclusive", "invisible_ms")

    def __init__(self, tag: str, channel: Channel, queue: str, no_ack: bool, prefetch: int,
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
        ch: Channel = self.owner
        if not ch.active or ch.closing:
            return False
        if self.no_ack:
            return ch.conn.writable()
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        return not ch.global_prefetch or len(ch.unacked) < ch.global_prefetch

    def deliver(self, d: Delivery) -> None:
        self.owner.deliver(self, d)


class Channel:
    def __init__(self, conn: Session, number: int) -> None:
        self.conn = conn
        self.number = number
        vhost = conn.vhost
        assert vhost is not None, "channels are opened after connection.open"
        self.vhost: VHost = vhost
        self.active = True  # channel.flow
        self.closing = False  # we sent Channel.Close; waiting for Close-Ok
        self.prefetch = 0  # per consumer (basic.qos global=false)
        self.global_prefetch = 0
        self.consumers: dict[str, ChannelConsumer] = {}
        self.unacked: OrderedDict[int, tuple[str, Receipt, ChannelConsumer | None]] = OrderedDict()  # tag -> (queue, receipt, c)
        self.next_tag = 1
        self.confirm = False
        self.publish_seq = 0
        self.confirms = Confirms()
        self.confirms_due = False  # a flush of the confirms is scheduled for this tick
        self.tx: list[Callable[[], None]] | None = None  # pending operations in tx mode
        self.queues_touched: set[str] = set()
        self.access = conn.access
        self.writable: set[str] = set()  # exchanges basic.publish was allowed to write to...
        self.writable_version = -1  # ...as of this access.version (another: check again)

    # -- dispatch of methods ------------------------------------------------------------

    def method(self, m: base.Frame) -> None:
        handler = _HANDLERS.get(type(m))
        if handler is None:
            if m.name.startswith(("Connection.", "Channel.")):
                raise AMQPConnectionError(COMMAND_INVALID, f"unexpected {m.name} on channel {self.number}",
                                          channel=self.number)
            raise AMQPConnectionError(NOT_IMPLEMENTED, f"{m.name} is not implemented", channel=self.number)
        try:
            handler(self, m)
        except Refused as e:
            raise refused(e, channel=self.number,
                                   class_id=m.index >> 16, method_id=m.index & 0xFFFF) from None

    def _reply(self, m: base.Frame) -> None:
        self.conn.send_method(self.number, m)

    def _permit(self, perm: Perm, kind: Kind, name: str) -> None:
        """AccessRefused (403, closes the channel) unless the user may do ``perm`` on the
        resource; the default exchange is ``amq.default`` here, as in RabbitMQ."""
        self.access.check(self.conn.user, self.vhost.name, perm, kind, name)

    def _check_write(self, exchange: str) -> None:
        """basic.publish's permission check, remembered in ``writable`` until the
        permissions change."""
        if self.writable_version != self.access.version:
            self.writable.clear()
            self.writable_version = self.access.version
        try:
            self._permit("write", "exchange", exchange)
        except Refused as e:
            raise refused(e, channel=self.number,
                                   class_id=60, method_id=40) from None
        self.writable.add(exchange)

    def _permit_new_exchange(self, m: C.Exchange.Declare) -> None:
        """exchange.declare: configure on it; when new with an alternate exchange, also
        read on it and write on the alternate (RabbitMQ's order)."""
        if m.passive or m.exchange == "":
            return  # passive: no check; the default exchange: refused by the router
        self._permit("configure", "exchange", m.exchange)
        ae = (m.arguments or {}).get("alternate-exchange")
        if isinstance(ae, str) and not self.vhost.router.has_exchange(m.exchange):
            self._permit("read", "exchange", m.exchange)
            self._permit("write", "exchange", ae)

    def _permit_binding(self, source: str, destination: str, kind: Kind) -> None:
        """queue.bind / exchange.bind and their unbinds: write on the destination, read on
        the source (a default exchange end is refused by the router after the write check)."""
        self._permit("write", kind, destination)
        if source != "" and not (kind == "exchange" and destination == ""):
            self._permit("read", "exchange", source)

    # -- exchange ---------------------------------------------------------------------------

    def _exchange_declare(self, m: C.Exchange.Declare) -> None:
        self._permit_new_exchange(m)
        self.vhost.declare_exchange(m.exchange, m.exchange_type, durable=m.durable, auto_delete=m.auto_delete,
                                    internal=m.internal, arguments=m.arguments, passive=m.passive)
        if not m.nowait:
            self._reply(C.Exchange.DeclareOk())

    def _exchange_delete(self, m: C.Exchange.Delete) -> None:
        if m.exchange and not m.exchange.startswith("amq."):  # those: refused by the router first
            self._permit("configure", "exchange", m.exchange)
        self.vhost.delete_exchange(m.exchange, if_unused=m.if_unused)
        if not m.nowait:
            self._reply(C.Exchange.DeleteOk())

    def _exchange_bind(self, m: C.Exchange.Bind) -> None:
        self._permit_binding(m.source, m.destination, "exchange")
        self.vhost.bind(m.source, m.destination, m.routing_key, m.arguments, kind="exchange")
        if not m.nowait:
            self._reply(C.Exchange.BindOk())

    def _exchange_unbind(self, m: C.Exchange.Unbind) -> None:
        self._permit_binding(m.source, m.destination, "exchange")
        self.vhost.unbind(m.source, m.destination, m.routing_key, m.arguments, kind="exchange")
        if not m.nowait:
            self._reply(C.Exchange.UnbindOk())

    # -- queue ----------------------------------------------------------------------------------

    def _queue_declare(self, m: C.Queue.Declare) -> None:
        name = m.queue or _name("amq.gen-")
        if m.queue.startswith("amq.") and not m.passive and self.vhost.queues.get(m.queue) is None:
            raise AMQPChannelError(ACCESS_REFUSED, f"queue name '{m.queue}' contains reserved prefix 'amq.*'",
                                   channel=self.number, class_id=50, method_id=10)
        existed = name in self.vhost.queues
        if not m.passive:
            self._permit("configure", "queue", name)
            dlx = (m.arguments or {}).get("x-dead-letter-exchange")
            if isinstance(dlx, str) and not existed:
                self._permit("read", "queue", name)
                self._permit("write", "exchange", dlx)
        qs = self.vhost.declare_queue(name, durable=m.durable, exclusive=self.conn if m.exclusive else None,
                                      auto_delete=m.auto_delete, arguments=m.arguments, passive=m.passive,
                                      declarer=self.conn)
        if qs.exclusive is not None and not existed:
            self.conn.exclusive_queues.add(name)
        if not m.nowait:
            self._reply(C.Queue.DeclareOk(name, qs.queue.message_count, len(qs.consumers)))

    def _queue_bind(self, m: C.Queue.Bind) -> None:
        self._permit_binding(m.exchange, m.queue, "queue")
        self.vhost.queue(m.queue)  # NOT_FOUND first, as RabbitMQ
        self.vhost.bind(m.exchange, m.queue, m.routing_key, m.arguments)
        if not m.nowait:
            self._reply(C.Queue.BindOk())

    def _queue_unbind(self, m: C.Queue.Unbind) -> None:
        self._permit_binding(m.exchange, m.queue, "queue")
        self.vhost.unbind(m.exchange, m.queue, m.routing_key, m.arguments)
        self._reply(C.Queue.UnbindOk())

    def _queue_purge(self, m: C.Queue.Purge) -> None:
        self._permit("read", "queue", m.queue)
        self._owned(m.queue, 50, 30)
        n = self.vhost.purge_queue(m.queue)
        if not m.nowait:
            self._reply(C.Queue.PurgeOk(n))

    def _queue_delete(self, m: C.Queue.Delete) -> None:
        self._permit("configure", "queue", m.queue)
        if m.queue not in self.vhost.queues:
            if not m.nowait:
                self._reply(C.Queue.DeleteOk(0))  # RabbitMQ: deleting a missing queue succeeds
            return
        self._owned(m.queue, 50, 40)
        qs = self.vhost.queue(m.queue)
        consumers = list(qs.consumers)
        n = self.vhost.delete_queue(m.queue, if_unused=m.if_unused, if_empty=m.if_empty)
        self.conn.exclusive_queues.discard(m.queue)
        for c in consumers:  # consumer cancel notify
            if isinstance(c, ChannelConsumer):
                c.owner.cancelled_by_broker(c)
        if not m.nowait:
            self._reply(C.Queue.DeleteOk(n))

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
        tag = m.consumer_tag or _name("amq.ctag-")
        if tag in self.consumers:
            raise AMQPConnectionError(530, f"attempt to reuse consumer tag '{tag}'", channel=self.number,
                                      class_id=60, method_id=20)
        if m.exclusive and qs.consumers or any(getattr(c, "exclusive", False) for c in qs.consumers):
            raise AMQPChannelError(ACCESS_REFUSED, f"queue '{m.queue}' in vhost '{self.vhost.name}' in exclusive use",
                                   channel=self.number, class_id=60, method_id=20)
        invisible = (m.arguments or {}).get(X_INVISIBLE_TIME, 0)
        if isinstance(invisible, bool) or not isinstance(invisible, int) or not 0 <= invisible <= MAX_INVISIBLE_MS:
            raise AMQPChannelError(406, f"invalid arg '{X_INVISIBLE_TIME}' for consumer on queue '{m.queue}' in "
                                   f"vhost '{self.vhost.name}': must be an integer from 0 to {MAX_INVISIBLE_MS} ms",
                                   channel=self.number, class_id=60, method_id=20)
        c = ChannelConsumer(tag, self, m.queue, m.no_ack, self.prefetch, m.exclusive, 0 if m.no_ack else invisible)
        self.consumers[tag] = c
        if not m.nowait:
            self._reply(C.Basic.ConsumeOk(tag))
        self.vhost.consume(m.queue, c)

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
            self.unacked[tag] = (d.queue, d.receipt, c)
            c.unacked += 1
        m = d.message
        parts = m.amqp_wire
        if parts is None:  # the first delivery of this message (fanout: the others reuse it)
            env = m.envelope
            parts = m.amqp_wire = deliver_parts(env.exchange, env.routing_key, _props(d), m.value or b"")
        conn = self.conn
        conn.send(encode_deliver_parts(self.number, c.tag_raw, tag, d.entry.deliveries > 1, parts,
                                       m.value or b"", conn.frame_max))
        prompt = conn.prompt
        if prompt.active:  # a publish being handled reached a consumer with credit
            prompt.deliveries += 1
            if not conn.prompt_due:
                conn.prompt_due = True
                prompt.sessions.append(conn)

    def _owned(self, queue: str, class_id: int, method_id: int) -> None:
        """RESOURCE_LOCKED for another connection's exclusive queue."""
        qs = self.vhost.queue(queue)
        if qs.exclusive is not None and qs.exclusive is not self.conn:
            raise AMQPChannelError(405, f"cannot obtain exclusive access to locked queue '{queue}' in vhost "
                                   f"'{self.vhost.name}'. It could be originally declared on another connection "
                                   "or the exclusive property value does not match that of the original "
                                   "declaration.", channel=self.number, class_id=class_id, method_id=method_id)

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
            self.unacked[tag] = (d.queue, d.receipt, None)
        env = d.message.envelope
        self.conn.send(encode_get_ok(self.number, tag, d.entry.deliveries > 1, env.exchange, env.routing_key,
                                     d.remaining, _props(d), d.message.value or b"", self.conn.frame_max))

    def publish(self, p: Publish) -> None:
        if self.writable_version != self.access.version or p.exchange not in self.writable:
            self._check_write(p.exchange)  # 403 unless the user may write to the exchange
        if self.tx is not None:
            self.tx.append(lambda: self._publish(p, None))
            return
        seq = 0
        if self.confirm:
            self.publish_seq += 1
            seq = self.publish_seq
        self._publish(p, seq)

    def publish_many(self, run: list[Publish]) -> None:
        """Consecutive basic.publish of one read on this channel: as ``publish`` each, in
        order, with the Python work shared (``VHost.publish_many``). A publish that fails
        closes the channel after the ones before it were published."""
        if self.tx is not None:
            for p in run:
                self.publish(p)
            return
        error: AMQPChannelError | None = None
        writable = self.writable
        if self.writable_version != self.access.version or any(p.exchange not in writable for p in run):
            for i, p in enumerate(run):
                try:
                    self._check_write(p.exchange)
                except AMQPChannelError as e:
                    run, error = run[:i], e
                    break
        if run:
            self._publish_many(run)
        if error is not None:
            raise error

    def _publish_many(self, run: list[Publish]) -> None:
        on_durable = None
        if self.confirm:
            seq0 = self.publish_seq + 1
            self.publish_seq += len(run)
            confirms = self.confirms

            def on_durable(first: int, last: int, result: Any) -> None:
                if isinstance(result, Exception):
                    for seq in range(seq0 + first, seq0 + last + 1):
                        self.confirm_failed(seq)
                elif confirms.ok_range(seq0 + first, seq0 + last) and not self.confirms_due:
                    self._confirms_due()

        out = self.vhost.publish_many([(p.exchange, p.routing_key, to_message(p), p.properties.headers)
                                       for p in run], on_durable)
        for i in out.unrouted:
            p = run[i]
            if p.mandatory:
                self.conn.send(encode_return(self.number, NO_ROUTE, "NO_ROUTE", p.exchange, p.routing_key,
                                             p.raw_properties, p.body, self.conn.frame_max))
        if out.refused and self.confirm:
            for i in out.refused:
                self.confirm_failed(seq0 + i)
        if out.error is not None:
            e = out.error
            if self.confirm:
                self.publish_seq = seq0 + out.done - 1  # the failed one and those after it were never numbered
            raise refused(e, channel=self.number,
                                   class_id=60, method_id=40)

    def _publish(self, p: Publish, seq: int | None) -> None:
        message = to_message(p)
        confirms = self.confirms

        def durable(result: Any) -> None:
            if isinstance(result, Exception):
                self.confirm_failed(seq or 0)
            elif confirms.ok(seq or 0) and not self.confirms_due:
                self._confirms_due()

        try:
            out = self.vhost.publish(p.exchange, p.routing_key, message, headers=p.properties.headers,
                                     on_durable=durable if seq else None)
        except Refused as e:
            raise refused(e, channel=self.number,
                                   class_id=60, method_id=40) from None
        if not out.routed and p.mandatory:
            self.conn.send(encode_return(self.number, NO_ROUTE, "NO_ROUTE", p.exchange, p.routing_key,
                                         p.raw_properties, p.body, self.conn.frame_max))
        if out.refused and seq:
            self.confirm_failed(seq)

    def confirm_failed(self, seq: int) -> None:
        """Publish ``seq`` was refused: nack it now (once)."""
        if self.confirms.failed(seq):
            if not self.closing and self.conn.open:
                self.conn.send(encode_nack(self.number, seq))
            if not self.confirms_due:
                self._confirms_due()

    def _confirms_due(self) -> None:
        self.confirms_due = True
        self.conn.tick.later(self._flush_confirms)

    def _flush_confirms(self) -> None:
        """The end of the tick: the one ack that covers what settled during it."""
        self.confirms_due = False
        ack = self.confirms.flush()
        if ack is not None and not self.closing and self.conn.open:
            self.conn.send(encode_ack(self.number, ack[0], ack[1]))

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
        taken: list[tuple[int, tuple[str, Receipt, ChannelConsumer | None]]] = []
        unacked = self.unacked
        try:
            for a in acks:
                tag = a.delivery_tag
                if not a.multiple and tag in unacked:
                    taken.append((tag, unacked.pop(tag)))
                elif a.multiple and not tag and taken:  # "all outstanding": with what the acks before deliver
                    settle, taken = taken, []
                    self._settle(settle, True, False)
                    taken = self._take(self._tags(tag, True, "ack"))
                else:
                    taken += self._take(self._tags(tag, a.multiple, "ack"))
        finally:
            self._settle(taken, True, False)

    def _take(self, tags: list[int]) -> list[tuple[int, tuple[str, Receipt, ChannelConsumer | None]]]:
        unacked = self.unacked
        return [(t, unacked.pop(t)) for t in tags if t in unacked]

    def _settle(self, taken: list[tuple[int, tuple[str, Receipt, ChannelConsumer | None]]], ack: bool,
                requeue: bool) -> None:
        touched = set()
        for _, (queue, receipt, c) in taken:
            if c is not None:
                c.unacked -= 1
            try:
                if ack:
                    self.vhost.ack(queue, receipt)
                else:
                    self.vhost.reject(queue, receipt, requeue)
            except StaleReceipt:
                pass  # the queue was purged or deleted meanwhile
            touched.add(queue)
        for q in touched:
            self.vhost.dispatch(q)

    def _basic_recover(self, m: C.Basic.Recover | C.Basic.RecoverAsync) -> None:
        self.requeue_all()
        if isinstance(m, C.Basic.Recover):
            self._reply(C.Basic.RecoverOk())

    def requeue_all(self) -> None:
        queues = {q for q, _, _ in self.unacked.values()}
        for _, _, c in self.unacked.values():
            if c is not None:
                c.unacked -= 1
        self.unacked.clear()
        for q in queues:
            self.vhost.release(q, self)

    # -- confirm, tx, flow -------------------------------------------------------------------------

    def _confirm_select(self, m: C.Confirm.Select) -> None:
        if self.tx is not None:
            raise AMQPChannelError(PRECONDITION_FAILED, "cannot switch from tx to confirm mode",
                                   channel=self.number, class_id=85, method_id=10)
        self.confirm = True
        if not m.nowait:
            self._reply(C.Confirm.SelectOk())

    def _tx_select(self, m: C.Tx.Select) -> None:
        if self.confirm:
            raise AMQPChannelError(PRECONDITION_FAILED, "cannot switch from confirm to tx mode",
                                   channel=self.number, class_id=90, method_id=10)
        if self.tx is None:
            self.tx = []
        self._reply(C.Tx.SelectOk())

    def _tx_commit(self, m: C.Tx.Commit) -> None:
        if self.tx is None:
            raise AMQPChannelError(PRECONDITION_FAILED, "channel is not transactional", channel=self.number,
                                   class_id=90, method_id=20)
        ops, self.tx = self.tx, []
        for op in ops:
            op()
        self._reply(C.Tx.CommitOk())

    def _tx_rollback(self, m: C.Tx.Rollback) -> None:
        if self.tx is None:
            raise AMQPChannelError(PRECONDITION_FAILED, "channel is not transactional", channel=self.number,
                                   class_id=90, method_id=30)
        self.tx = []
        self._reply(C.Tx.RollbackOk())

    def _flow(self, m: C.Channel.Flow) -> None:
        self.active = bool(m.active)
        self._reply(C.Channel.FlowOk(self.active))
        if self.active:
            for q in {c.queue for c in self.consumers.values()}:
                self.vhost.dispatch(q)

    # -- closing ----------------------------------------------------------------------------------------

    def close(self) -> None:
        """The channel ends (Close, Close-Ok, or the connection went): cancel its
        consumers and requeue what it holds, in order."""
        for c in list(self.consumers.values()):
            self.vhost.cancel(c.queue, c)
        self.consumers.clear()
        self.tx = None
        self.requeue_all()


def _props(d: Delivery) -> bytes:
    m = d.message
    raw = m.amqp_properties
    return raw if raw is not None else encode_properties(properties_of(m))


_METHOD_IDS = {"ack": 80, "nack": 120, "reject": 90}
_HANDLERS: dict[type, Callable[[Channel, Any], None]] = {
    C.Exchange.Declare: Channel._exchange_declare,
    C.Exchange.Delete: Channel._exchange_delete,
    C.Exchange.Bind: Channel._exchange_bind,
    C.Exchange.Unbind: Channel._exchange_unbind,
    C.Queue.Declare: Channel._queue_declare,
    C.Queue.Bind: Channel._queue_bind,
    C.Queue.Unbind: Channel._queue_unbind,
    C.Queue.Purge: Channel._queue_purge,
    C.Queue.Delete: Channel._queue_delete,
    C.Basic.Qos: Channel._basic_qos,
    C.Basic.Consume: Channel._basic_consume,
    C.Basic.Cancel: Channel._basic_cancel,
    C.Basic.Get: Channel._basic_get,
    C.Basic.Recover: Channel._basic_recover,
    C.Basic.RecoverAsync: Channel._basic_recover,
    C.Confirm.Select: Channel._confirm_select,
    C.Tx.Select: Channel._tx_select,
    C.Tx.Commit: Channel._tx_commit,
    C.Tx.Rollback: Channel._tx_rollback,
    C.Channel.Flow: Channel._flow,
}
