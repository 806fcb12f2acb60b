"""Messages to the client: the server-to-client half of a session's QoS flows, owned by
the session machine (machine.py). Pure. What the session's queues hand out
(``room.SessionConsumer``, through the shell) goes out as the session's one copy
(``subscriptions``), with a packet id, alias and properties (``outbound.Outbound``,
``mapping``), or is settled at once when it is not for this session, has expired or is
larger than the client takes. Retained messages for a new subscription go out the same
way, without a queue (``Delivery.outside``), or wait for room in flight. What is in
flight is the delivery itself (``outbound.Outbound``). The client's PUBACK, PUBREC and
PUBCOMP end what they acknowledge; the machine settles it and uses the room to send more
once per read."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ...core.types import Delivery, Envelope, Message, RetainedRecord
from .encoder import encode, encode_publish
from .mapping import outgoing_properties, outgoing_topic, published_qos
from .outbound import RELEASED
from .packets import Publish, PubRel
from .properties import NO_PROPERTIES, Properties
from ...filters.properties import message_tag, record_properties
from .requests import SaveSession
from .session import Session
from .subscriptions import Filtered, shared_subscription
from .wire import MQTT_5


MQTT = "mqtt"  # this gateway's key in ``Message.encoded``
INFLIGHT_FULL = "inflight_full"  # a client's window of QoS 1/2 messages unacknowledged filled up
LimitHit = Callable[[str], object]  # told the name of a server limit a connection met

class Outgoing:
    """The messages to one connection's client and their acknowledgements, written to
    ``out``; the session's ``outbound.Outbound`` keeps what is in flight."""

    __slots__ = ("session", "version", "out", "clock", "properties", "paused", "waiting", "save", "limit_hit")

    def __init__(self, session: Session, version: int, out: list[bytes], clock: Callable[[], int],
                 properties: Callable[[Message, str], Mapping[str, Any]] = record_properties,
                 limit_hit: LimitHit = lambda what: None) -> None:
        self.limit_hit = limit_hit  # told INFLIGHT_FULL when a send fills the client's window
        self.properties = properties  # what a selector sees of a message (the broker's forms)
        self.session = session
        self.version = version
        self.out = out
        self.clock = clock
        self.paused = False  # the socket's buffer is full
        self.waiting: deque[Publish] = deque()  # retained messages waiting for room in flight
        # the request to store the session's record, when it is kept (else None)
        self.save = SaveSession(session) if session.kept else None

    def has_credit(self) -> bool:
        return not self.paused and len(self.session.outbound.in_flight) < self.session.outbound.receive_maximum

    # -- messages to the client ----------------------------------------------------------------

    def deliver(self, d: Delivery, settled: bool = False) -> Delivery | SaveSession | None:
        """A message from one of the session's queues (``settled``: by the queue service
        already, for a consumer that takes QoS 0 only). What the shell must do besides
        writing ``out``: settle the message (``d`` returned: not for this session,
        expired, QoS 0, too large), or store the session (a QoS 2 message went out)."""
        s = self.session
        version = self.version
        message = d.message
        assert message is not None
        env = message.envelope
        topic = outgoing_topic(message)
        copy = None
        if topic is not None:
            shared = None if d.queue == s.queue else shared_subscription(d.queue)  # whose copy this is
            if s.subscriptions.filters:  # (the properties are built once per message, kept on it)
                copy = s.subscriptions.copy(topic, published_qos(message), env.mqtt_retain,
                                            own=env.mqtt_client_id == s.client_id,
                                            tag=message_tag(env, message.headers),
                                            properties=lambda: self.properties(message, d.entry.topic),
                                            shared=shared)
            else:
                copy = s.subscriptions.copy(topic, published_qos(message), env.mqtt_retain,
                                            own=env.mqtt_client_id == s.client_id, shared=shared)
        props = outgoing_properties(message, version, self.clock() if env.expires_at_ms else 0,
                                    copy.subscription_ids if copy is not None else ())
        if topic is None or copy is None or props is None:
            # not for this session (or expired): done with
            return None if settled else d
        qos = copy.qos
        outbound = s.outbound
        if qos == 0:
            if props is NO_PROPERTIES and (version < MQTT_5 or not outbound.topic_alias_maximum):
                # the same bytes for every session that takes it so: encoded once
                key = (topic, copy.retain, version)
                encoded = message.encoded
                wire = encoded.get(MQTT) if encoded is not None else None
                if wire is None or wire[0] != key:
                    wire = (key, encode_publish(topic, message.value or b"", 0, copy.retain, False, 0, props, version))
                    if encoded is None:
                        message.encoded = {MQTT: wire}
                    else:
                        encoded[MQTT] = wire
                if outbound.fits(len(wire[1])):
                    self.out.append(wire[1])
                return None if settled else d
            settle = None if settled else d
        else:
            settle = None
        pid_before = s.restored.pop((d.queue, d.entry.seq), (0, 0))[0] if s.restored else 0
        pid = outbound.send(qos, d, pid_before)
        name, alias = outbound.alias(topic) if version == MQTT_5 else (topic, None)
        if alias is not None:
            props = _with_alias(props, alias)
        data = encode_publish(name, message.value or b"", qos, copy.retain,
                              qos > 0 and (d.delivery > 1 or bool(pid_before)), pid, props, version)
        if not outbound.fits(len(data)):  # larger than the client takes: dropped as if sent
            if pid:
                del outbound.in_flight[pid]
                return d
            return settle
        self.out.append(data)
        if pid:  # kept in flight, its PUBLISH written (sent again, it comes from its queue again)
            d.message = None
        if len(outbound.in_flight) >= outbound.receive_maximum:
            self.limit_hit(INFLIGHT_FULL)
        if qos == 2:
            return self.save
        return settle

    def send_retained(self, p: Publish) -> None:
        """A retained message for a new subscription (not from a queue): now, or once
        there is room in flight and the socket takes more."""
        outbound = self.session.outbound
        if p.qos and not outbound.can_send(p.qos) or self.paused:
            self.waiting.append(p)
            return
        pid = outbound.send(p.qos, Delivery.outside()) if p.qos else 0
        name, alias = outbound.alias(p.topic) if self.version == MQTT_5 else (p.topic, None)
        props = _with_alias(p.properties, alias) if alias is not None else p.properties
        data = encode(Publish(name, p.payload, p.qos, True, False, pid, props), self.version)
        if not outbound.fits(len(data)):
            outbound.in_flight.pop(pid, None)
            return
        self.out.append(data)

    def send_waiting(self) -> None:
        """The retained messages that waited, as far as there is room now."""
        waiting = self.waiting
        outbound = self.session.outbound
        while waiting and not self.paused:
            if waiting[0].qos and not outbound.can_send(waiting[0].qos):
                return
            self.send_retained(waiting.popleft())

    # -- the client's acknowledgements -----------------------------------------------------------

    def puback(self, packet_id: int) -> Delivery | None:
        """The QoS 1 message to settle (None: no such message, ignored; or one from no
        queue)."""
        d = self.session.outbound.puback(packet_id)
        return d if d is not None and d.queue else None

    def pubrec(self, packet_id: int, reason_code: int) -> tuple[Delivery | None, Delivery | None]:
        """(the message to settle durably before the PUBREL goes out, a message whose
        flow the client ended by refusing it); writes the PUBREL unless refused. Neither
        for a message from no queue, or PUBRECed before (its PUBREL is sent again)."""
        outbound = self.session.outbound
        d = outbound.in_flight.get(packet_id)
        settle = d if d is not None and d.qos == 2 and d.state != RELEASED and d.queue else None
        code, ended = outbound.pubrec(packet_id, reason_code)
        if ended is not None:  # refused by the client: done with
            return None, settle
        if code != 0:
            settle = None
        self.out.append(encode(PubRel(packet_id, code if self.version == MQTT_5 else 0), self.version))
        return settle, None

    def pubcomp(self, packet_id: int) -> None:
        self.session.outbound.pubcomp(packet_id)

    def resend_releases(self) -> None:
        """On a new connection of the session: PUBREL for QoS 2 messages PUBRECed before."""
        for f in self.session.outbound.resend():
            if f.state == RELEASED:
                self.out.append(encode(PubRel(f.tag), self.version))


def _with_alias(props: Properties, alias: int) -> Properties:
    return replace(props, topic_alias=alias)


def retained_passes(rec: RetainedRecord, filtered: Filtered,
                    properties: Callable[[Message, str], Mapping[str, Any]] = record_properties) -> bool:
    """Whether a retained message passes a new subscription's filter."""
    env = Envelope.FromString(rec.envelope) if rec.envelope else Envelope()
    headers = [(h.key, h.value if h.HasField("value") else None) for h in rec.headers]
    message = Message(rec.topic.encode(), rec.payload, rec.time_ms or None, headers, env)
    return filtered.filter.matches(message_tag(env, message.headers), lambda: properties(message, ""))


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


