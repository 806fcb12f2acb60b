"""A channel's declarations: exchange.declare / delete / bind / unbind and queue.declare /
bind / unbind / purge / delete against the vhost, with RabbitMQ's permission checks, for
``Channel`` (channel.py) as the ``Declarations`` mixin.

Configure on the exchange or queue declared or deleted (and, for a new exchange with an
alternate exchange or a new queue with a dead-letter exchange, read on it and write on
that one); write on the destination and read on the source of a binding.
"""

from __future__ import annotations

from pamqp import commands as C

from ...core.ports import Doors
from ...core.types import Kind, Resource
from ...core.types import TOPIC
from .consumers import ChannelConsumer, Consuming, new_name
from .errors import ACCESS_REFUSED, AMQPChannelError
from .model import room


class Declarations(Consuming):
    """The exchange and queue methods of ``Channel``."""

    # the Channel's own, set in Channel.__init__ (Consuming declares the rest)
    doors: Doors

    def _permit_new_exchange(self, m: C.Exchange.Declare) -> None:
        """exchange.declare: configure on it; when new with an alternate exchange, also
        read on it and write on the alternate (RabbitMQ's order)."""
        if m.passive or m.exchange == "":
            return  # passive: no check; the default exchange: refused by the router
        self._permit("configure", "exchange", m.exchange)
        ae = (m.arguments or {}).get("alternate-exchange")
        if isinstance(ae, str) and not self.vhost.has_exchange(m.exchange):
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
        room.declare_exchange(self.vhost, m.exchange, m.exchange_type, durable=m.durable, auto_delete=m.auto_delete,
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
        room.bind(self.vhost, m.source, m.destination, m.routing_key, m.arguments, kind="exchange")
        if not m.nowait:
            self._reply(C.Exchange.BindOk())

    def _exchange_unbind(self, m: C.Exchange.Unbind) -> None:
        self._permit_binding(m.source, m.destination, "exchange")
        room.unbind(self.vhost, m.source, m.destination, m.routing_key, m.arguments, kind="exchange")
        if not m.nowait:
            self._reply(C.Exchange.UnbindOk())

    # -- queue ----------------------------------------------------------------------------------

    def _queue_declare(self, m: C.Queue.Declare) -> None:
        name = m.queue or new_name("amq.gen-")
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
        qs = room.declare_queue(self.vhost, name, durable=m.durable, exclusive=self.conn if m.exclusive else None,
                                auto_delete=m.auto_delete, arguments=m.arguments, passive=m.passive,
                                declarer=self.conn)
        if qs.exclusive is not None and not existed:
            self.conn.exclusive_queues.add(name)
        if not m.nowait:
            self._reply(C.Queue.DeclareOk(name, qs.queue.message_count, len(qs.consumers)))

    def _permit_topic_binding(self, exchange: str, binding_key: str) -> None:
        """Topic authorisation: a binding to a topic exchange the user has a topic
        permission on needs its read expression to match the binding key."""
        v = self.vhost
        if (self.doors.topic_restricted(self.conn.user, v.name, exchange) and v.has_exchange(exchange)
                and v.exchange(exchange).kind == TOPIC):
            self.doors.authorize(self.conn.user, "read", Resource(v.name, "exchange", exchange, binding_key))

    def _queue_bind(self, m: C.Queue.Bind) -> None:
        self._permit_binding(m.exchange, m.queue, "queue")
        self._permit_topic_binding(m.exchange, m.routing_key)
        self.vhost.queue(m.queue)  # NOT_FOUND first, as RabbitMQ
        room.bind(self.vhost, m.exchange, m.queue, m.routing_key, m.arguments)
        if not m.nowait:
            self._reply(C.Queue.BindOk())

    def _queue_unbind(self, m: C.Queue.Unbind) -> None:
        self._permit_binding(m.exchange, m.queue, "queue")
        self._permit_topic_binding(m.exchange, m.routing_key)
        room.unbind(self.vhost, m.exchange, m.queue, m.routing_key, m.arguments)
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
