"""Messages to the client, mixed into the connection (``protocol.MqttProtocol``): what the
session's queues hand out (``room.SessionConsumer``) goes out as the session's one copy
(``subscriptions``), with a packet id, alias and properties (``outbound.Outbound``,
``mapping``), or is settled at once when it is not for this session, has expired or is
larger than the client takes. Retained messages for a new subscription go out the same
way, without a queue. The client's PUBACK, PUBREC and PUBCOMP settle what they
acknowledge; the room to send more is used once per read."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...core.message import Envelope, Message
from ...core.queues.service import Delivery
from ...core.state_pb2 import RetainedRecord
from .encoder import encode, encode_publish
from .mapping import outgoing_properties, outgoing_topic, published_qos
from .packets import PubAck, PubComp, Publish, PubRec, PubRel
from .properties import NO_PROPERTIES, Properties
from ..amqp.model.filtering import filter_properties, message_tag
from .session import Token
from .subscriptions import Filtered, shared_subscription
from .states import State
from .wire import MQTT_5

if TYPE_CHECKING:
    from collections import deque

    from .room import MqttRoom
    from .session import Session


class Delivering:
    # the connection's own (protocol.MqttProtocol)
    room: MqttRoom
    session: Session | None
    version: int
    state: State
    paused: bool
    _pending: deque[Publish]
    _dispatch_due: bool

    if TYPE_CHECKING:
        def _write(self, packet: Any, version: int | None = None) -> None: ...
        def _emit(self, data: bytes) -> None: ...
        def _save_session(self) -> None: ...

    # -- messages to the client ----------------------------------------------------------------

    def has_credit(self) -> bool:
        s = self.session
        return (self.state is State.CONNECTED and not self.paused and s is not None
                and len(s.outbound.in_flight) < s.outbound.receive_maximum)

    def deliver(self, d: Delivery, settled: bool = False) -> None:
        """A message from one of the session's queues (``settled``: by the queue service
        already, for a consumer that takes QoS 0 only)."""
        s = self.session
        assert s is not None
        message = d.message
        env = message.envelope
        topic = outgoing_topic(message)
        copy = None
        if topic is not None:
            shared = None if d.queue == s.queue else shared_subscription(d.queue)  # whose copy this is
            if s.subscriptions.filters:  # (the properties are built once per message, kept on it)
                copy = s.subscriptions.copy(topic, published_qos(message), env.mqtt_retain,
                                            own=env.mqtt_client_id == s.client_id, tag=message_tag(message),
                                            properties=lambda: filter_properties(message, d.entry.topic),
                                            shared=shared)
            else:
                copy = s.subscriptions.copy(topic, published_qos(message), env.mqtt_retain,
                                            own=env.mqtt_client_id == s.client_id, shared=shared)
        props = outgoing_properties(message, self.version, self.room.clock() if env.expires_at_ms else 0,
                                    copy.subscription_ids if copy is not None else ())
        if topic is None or copy is None or props is None:
            if not settled:
                self.room.settle(Token(d.queue, d.receipt))  # not for this session (or expired): done with
            return
        qos = copy.qos
        if qos == 0:
            if not settled:
                self.room.settle(Token(d.queue, d.receipt))
            if props is NO_PROPERTIES and (self.version < MQTT_5 or not s.outbound.topic_alias_maximum):
                # the same bytes for every session that takes it so: encoded once
                key = (topic, copy.retain, self.version)
                wire = message.mqtt_wire
                if wire is None or wire[0] != key:
                    wire = message.mqtt_wire = (key, encode_publish(topic, message.value or b"", 0, copy.retain,
                                                                    False, 0, props, self.version))
                if s.outbound.fits(len(wire[1])):
                    self._emit(wire[1])
                return
        pid_before = s.restored.pop((d.queue, d.receipt.seq), (0, 0))[0] if s.restored else 0
        token = Token(d.queue, d.receipt)
        pid = s.outbound.send(qos, token, pid_before)
        name, alias = s.outbound.alias(topic) if self.version == MQTT_5 else (topic, None)
        if alias is not None:
            props = _with_alias(props, alias)
        data = encode_publish(name, message.value or b"", qos, copy.retain,
                              qos > 0 and (d.entry.deliveries > 1 or bool(pid_before)), pid, props, self.version)
        if not s.outbound.fits(len(data)):  # larger than the client takes: dropped as if sent
            if pid:
                del s.outbound.in_flight[pid]
                self.room.settle(token)
            return
        self._emit(data)
        if qos == 2:
            self._save_session()

    def _send_retained(self, p: Publish) -> None:
        """A retained message for a new subscription (not from a queue)."""
        s = self.session
        assert s is not None
        if p.qos and not s.outbound.can_send(p.qos) or self.paused:
            self._pending.append(p)
            return
        pid = s.outbound.send(p.qos, None)
        name, alias = s.outbound.alias(p.topic) if self.version == MQTT_5 else (p.topic, None)
        props = _with_alias(p.properties, alias) if alias is not None else p.properties
        data = encode(Publish(name, p.payload, p.qos, True, False, pid, props), self.version)
        if not s.outbound.fits(len(data)):
            s.outbound.in_flight.pop(pid, None)
            return
        self._emit(data)

    def _flush_pending(self) -> None:
        while self._pending and self.state is State.CONNECTED and not self.paused:
            s = self.session
            assert s is not None
            if self._pending[0].qos and not s.outbound.can_send(self._pending[0].qos):
                return
            self._send_retained(self._pending.popleft())

    def _puback(self, p: PubAck) -> None:
        s = self.session
        assert s is not None
        token = s.outbound.puback(p.packet_id)
        self._acked(token)

    def _pubrec(self, p: PubRec) -> None:
        s = self.session
        assert s is not None
        f = s.outbound.in_flight.get(p.packet_id)
        token = f.token if f is not None and f.qos == 2 else None
        code, ended = s.outbound.pubrec(p.packet_id, p.reason_code)
        if ended is not None:  # refused by the client: done with
            self._acked(ended)
            return
        if code == 0 and f is not None:
            f.token = None  # the client has it: the entry is settled, the PUBREL remains
            if token is not None:
                self.room.settle_durably(token)  # before the record says RELEASED
        self._write(PubRel(p.packet_id, code if self.version == MQTT_5 else 0))
        self._save_session()

    def _pubcomp(self, p: PubComp) -> None:
        s = self.session
        assert s is not None
        s.outbound.pubcomp(p.packet_id)
        self._save_session()
        self._acked(None)

    def _acked(self, token: Any) -> None:
        """The client acknowledged a message: settled, and room for more (handed out when
        the read ends, once for all its acknowledgements)."""
        if token is not None:
            self.room.settle(token)
        self._dispatch_due = True


def _with_alias(props: Properties, alias: int) -> Properties:
    return replace(props, topic_alias=alias)


def retained_passes(rec: RetainedRecord, filtered: Filtered) -> bool:
    """Whether a retained message passes a new subscription's filter."""
    env = Envelope.FromString(rec.envelope) if rec.envelope else Envelope()
    headers = [(h.key, h.value if h.HasField("value") else None) for h in rec.headers]
    message = Message(rec.topic.encode(), rec.payload, rec.time_ms or None, headers, env)
    return filtered.filter.matches(message_tag(message), lambda: filter_properties(message, ""))


def retained_publish(rec: RetainedRecord, qos: int, version: int, now_ms: int,
                      subscription_id: int | None) -> Publish | None:
    """The PUBLISH of a retained message for a new subscription (None: it has expired)."""
    env = Envelope.FromString(rec.envelope) if rec.envelope else Envelope()
    headers = [(h.key, h.value if h.HasField("value") else None) for h in rec.headers]
    props = outgoing_properties(Message(None, rec.payload, None, headers, env), version, now_ms,
                                (subscription_id,) if subscription_id else ())
    if props is None:
        return None
    return Publish(rec.topic, rec.payload, min(qos, rec.qos), True, properties=props)


