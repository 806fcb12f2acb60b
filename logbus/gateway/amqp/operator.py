"""``ports.Topology``: exchanges, queues and bindings declared and deleted by an operator
(the HTTP API, the web console), and a message published to an exchange, in AMQP's terms:
the same ``x-`` arguments, checks and wording as exchange.declare, queue.declare,
queue.bind and basic.publish on a channel (model/room.py, mapping.py), with RabbitMQ's
management API's rules besides (no exclusive queue, no ``amq.`` name). The caller checks
access. The server builds one over the vhosts' queue models, whether or not an AMQP
listener runs.

    op = AmqpOperator(broker.queue_model)
    op.declare_queue("/", "billing", arguments={"x-max-length": 1000})   # True: new
    op.publish("/", "amq.direct", "billing", b"hi", {"delivery_mode": 2})  # Deferred[routed]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import Deferred

from ...core.errors import AccessRefused, InvalidRequest, NotFound
from ...core.ports import Queues, VHosts
from ...core.types import DestKind
from .consumers import ChannelConsumer
from .events import Publish
from .fastpath import Properties, encode_properties
from .mapping import to_message
from .model import room
from .model.translate import message_delay

# RabbitMQ's management API names a message's properties so (``type`` is AMQP's "type")
PROPERTY_FIELDS = {"content_type": str, "content_encoding": str, "headers": dict, "delivery_mode": int,
                   "priority": int, "correlation_id": str, "reply_to": str, "expiration": str,
                   "message_id": str, "timestamp": int, "type": str, "user_id": str, "app_id": str}
DEST_KINDS = ("queue", "exchange")


class AmqpOperator:
    """See the module's docstring."""

    def __init__(self, vhosts: VHosts) -> None:
        self.vhosts = vhosts
        # the AMQP listener's open connections (its factory's set), when one runs
        self.connections: set[Any] = set()

    def _vhost(self, name: str) -> Queues:
        queues = self.vhosts.queues(name)
        if queues is None:
            raise NotFound(f"no vhost '{name}'")
        return queues

    # -- exchanges ---------------------------------------------------------------------------

    def declare_exchange(self, vhost: str, name: str, kind: str = "direct", *, durable: bool = True,
                         auto_delete: bool = False, internal: bool = False,
                         arguments: Mapping[str, Any] | None = None) -> bool:
        v = self._vhost(vhost)
        if not name:
            raise InvalidRequest("an exchange needs a name (the default exchange is always there)")
        if name.startswith("amq.") and not v.has_exchange(name):
            raise AccessRefused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
        new = not v.has_exchange(name)
        room.declare_exchange(v, name, kind, durable=durable, auto_delete=auto_delete, internal=internal,
                              arguments=dict(arguments or {}))
        return new

    def delete_exchange(self, vhost: str, name: str, *, if_unused: bool = False) -> None:
        v = self._vhost(vhost)
        if not v.has_exchange(name):
            raise NotFound(f"no exchange '{name}' in vhost '{vhost}'")
        v.delete_exchange(name, if_unused=if_unused)

    # -- queues ------------------------------------------------------------------------------

    def declare_queue(self, vhost: str, name: str, *, durable: bool = True, auto_delete: bool = False,
                      arguments: Mapping[str, Any] | None = None) -> bool:
        v = self._vhost(vhost)
        if not name:
            raise InvalidRequest("a queue needs a name")
        new = name not in v.queues
        if name.startswith("amq.") and new:
            raise AccessRefused(f"queue name '{name}' contains reserved prefix 'amq.*'")
        room.declare_queue(v, name, durable=durable, auto_delete=auto_delete, arguments=dict(arguments or {}))
        return new

    def delete_queue(self, vhost: str, name: str, *, if_unused: bool = False, if_empty: bool = False) -> int:
        v = self._vhost(vhost)
        qs = v.queue(name)  # NotFound
        if qs.exclusive is not None:
            raise AccessRefused(f"queue '{name}' in vhost '{vhost}' is exclusive to the connection that declared it")
        consumers = list(qs.consumers)
        n = v.delete_queue(name, if_unused=if_unused, if_empty=if_empty)
        for c in consumers:  # consumer cancel notify, as queue.delete on a channel
            if isinstance(c, ChannelConsumer):
                c.owner.cancelled_by_broker(c)
        return n

    # -- bindings ----------------------------------------------------------------------------

    def bind(self, vhost: str, source: str, kind: str, destination: str, routing_key: str = "",
             arguments: Mapping[str, Any] | None = None) -> None:
        v = self._check_binding(vhost, source, kind, destination)
        room.bind(v, source, destination, routing_key, dict(arguments or {}), kind=_dest_kind(kind))

    def unbind(self, vhost: str, source: str, kind: str, destination: str, routing_key: str = "",
               arguments: Mapping[str, Any] | None = None) -> None:
        v = self._check_binding(vhost, source, kind, destination)
        room.unbind(v, source, destination, routing_key, dict(arguments or {}), kind=_dest_kind(kind))

    def _check_binding(self, vhost: str, source: str, kind: str, destination: str) -> Queues:
        if kind not in DEST_KINDS:
            raise InvalidRequest(f"a binding's destination is a queue or an exchange, not {kind!r}")
        v = self._vhost(vhost)
        if not v.has_exchange(source):
            raise NotFound(f"no exchange '{source}' in vhost '{vhost}'")
        if kind == "queue":
            v.queue(destination)  # NotFound
        elif not v.has_exchange(destination):
            raise NotFound(f"no exchange '{destination}' in vhost '{vhost}'")
        return v

    # -- publishing --------------------------------------------------------------------------

    def publish(self, vhost: str, exchange: str, routing_key: str, payload: bytes,
                properties: Mapping[str, Any] | None = None) -> Deferred[bool]:
        """basic.publish with publisher confirms: fires with whether the message reached a
        queue, once it is durable (InvalidRequest: a property RabbitMQ would not take)."""
        v = self._vhost(vhost)
        props = parse_properties(properties or {})
        p = Publish(0, exchange, routing_key, False, False, props, encode_properties(props), payload)
        done: Deferred[bool] = Deferred()
        routed: list[bool] = []
        outcome: list[Any] = []

        def answer() -> None:
            if done.called or not routed or not outcome:
                return
            if isinstance(outcome[0], Exception):
                done.errback(outcome[0])
            else:
                done.callback(routed[0])

        def durable(first: int, last: int, result: Any) -> None:
            outcome.append(result)
            answer()

        out = v.publish([to_message(p)], durable, delay_of=message_delay)
        if out.error is not None:  # no such exchange: nothing was appended
            raise out.error
        if out.refused:  # a queue's overflow reject-publish, or the log refused it: basic.nack
            outcome[:] = [AccessRefused("the message was refused: a queue it was routed to is full"
                                        " (overflow reject-publish), or the log refused it")]
        routed.append(out.routed)
        answer()
        return done

    # -- consumers ---------------------------------------------------------------------------

    def consumers(self, vhost: str, queue: str | None = None) -> list[dict[str, Any]]:
        """Every consumer of the queues of ``vhost`` (of ``queue`` alone, if named),
        RabbitMQ's fields for AMQP ones (``prefetch_count``, ``ack_required``, its channel and
        connection)."""
        v = self.vhosts.queues(vhost)
        if v is None:
            return []
        if queue is not None:
            qs = v.queues.get(queue)
            return [] if qs is None else [describe_consumer(vhost, queue, c) for c in qs.consumers]
        return [describe_consumer(vhost, name, c) for name, qs in sorted(v.queues.items()) for c in qs.consumers]


    def channels(self) -> list[dict[str, Any]]:
        """Every open channel of the AMQP connections, RabbitMQ's fields (``number``,
        ``prefetch_count``, ``messages_unacknowledged``, ``confirm``, ...), with its
        connection's registry id and the deliveries it made (``deliver_get``: delivery tags
        given so far, a counter the channel keeps anyway)."""
        out = []
        for protocol in list(self.connections):
            session = protocol.conn
            if session is None:
                continue
            record = session.record
            for number, ch in sorted(session.channels.items()):
                out.append({
                    "number": number, "name": f"{session.peer} ({number})", "user": session.user,
                    "vhost": session.vhost.name if session.vhost is not None else "",
                    "connection": record.id if record is not None else None,
                    "connection_name": record.client_id if record is not None else "",
                    "peer": session.peer, "consumer_count": len(ch.consumers), "prefetch_count": ch.prefetch,
                    "global_prefetch_count": ch.global_prefetch, "messages_unacknowledged": len(ch.unacked),
                    "confirm": ch.confirm, "transactional": ch.tx is not None, "flow": ch.active,
                    "message_stats": {"deliver_get": ch.next_tag - 1,
                                      "publish": ch.publish_seq if ch.confirm else None}})
        return sorted(out, key=lambda c: (c["connection"] or 0, c["number"]))


def _dest_kind(kind: str) -> DestKind:  # a binding's destination kind, checked by _check_binding
    return "queue" if kind == "queue" else "exchange"


def describe_consumer(vhost: str, queue: str, c: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"queue": {"name": queue, "vhost": vhost}, "consumer_tag": c.tag,
                           "ack_required": not c.no_ack, "exclusive": bool(getattr(c, "exclusive", False)),
                           "active": True, "protocol": "amqp" if isinstance(c, ChannelConsumer) else "",
                           "prefetch_count": 0, "unacked": 0, "channel_details": None}
    if isinstance(c, ChannelConsumer):
        ch = c.owner
        record = ch.conn.record
        row["prefetch_count"] = c.prefetch
        row["unacked"] = c.unacked
        row["channel_details"] = {"number": ch.number, "connection": record.id if record is not None else None,
                                  "peer_host": record.host if record is not None else "",
                                  "user": ch.conn.user, "connection_name": record.client_id if record else ""}
    return row


def parse_properties(raw: Mapping[str, Any]) -> Properties:
    """RabbitMQ's management API's ``properties`` object as basic content properties
    (InvalidRequest for an unknown one or a value of the wrong type)."""
    if not isinstance(raw, Mapping):
        raise InvalidRequest("\"properties\" must be an object")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        want = PROPERTY_FIELDS.get(key)
        if want is None:
            raise InvalidRequest(f"unknown message property {key!r} (known: {', '.join(PROPERTY_FIELDS)})")
        if isinstance(value, bool) or not isinstance(value, want):
            raise InvalidRequest(f"message property {key!r} must be {'an object' if want is dict else want.__name__}")
        limit = 2**63 - 1 if key == "timestamp" else 255
        if isinstance(value, int) and not 0 <= value <= limit:
            raise InvalidRequest(f"message property {key!r} must be 0 to {limit}")
        values["message_type" if key == "type" else key] = value
    return Properties(**values)
