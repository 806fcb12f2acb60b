"""MQTT PUBLISH <-> ``core.message.Message`` (docs/interop.md). Pure.

A client's PUBLISH becomes a message on the topic behind ``amq.topic``: its record key
is the MQTT topic name as published (per-topic order; what a Kafka consumer and Spark
see as the key), its AMQP routing key the topic with ``/`` and ``.`` swapped
(``topic_map.to_amqp``), its value the payload. The envelope keeps the QoS, the retain
flag, the publishing client (for No Local) and the MQTT 5 properties: payload format
indicator, content type, response topic, correlation data, and the message expiry
interval as the neutral ``expires_at_ms`` (the queue service drops the message then, in
every protocol). User properties are the record's headers, so AMQP consumers see them
as headers and Kafka consumers and Spark as record headers.

A message going out to a client is the reverse: the MQTT topic as published, or for a
message from another protocol its AMQP routing key mapped back (``to_mqtt_name``: a key
that names no MQTT topic is not delivered); the QoS published with (an AMQP message:
1 if persistent, else 0; Kafka and HTTP: 1), capped by the subscription; in 5.0 the
properties, with the message expiry interval lowered by the time the message waited
(MQTT 5 section 3.3.2.3.3) and the record headers as user properties.
"""

from __future__ import annotations

from typing import TypeVar

from ...core.types import ENVELOPE_HEADER, Envelope, Message
from .packets import Publish
from .properties import NO_PROPERTIES, Properties
from .topic_map import Unmappable, to_amqp, to_mqtt_name
from .wire import MQTT_5

M = TypeVar("M", bound=Message)

EXCHANGE = "amq.topic"
_MQTT = Envelope.MQTT
_AMQP = Envelope.AMQP

TAG_PROPERTY = "tag"  # an MQTT 5 user property naming the message's tag (docs/filters.md)


ENVELOPE_CACHE = 256  # envelopes a connection remembers, per (topic, QoS, retain)
EnvelopeCache = dict[tuple[str, int, bool], tuple[Envelope, list[tuple[str, bytes | None]]]]


def message_from_publish(topic: str, p: Publish, client_id: str, now_ms: int,
                         cache: EnvelopeCache | None = None, make: type[M] = Message) -> M:  # type: ignore[assignment]
    """The message a client's PUBLISH (its topic alias resolved to ``topic``) is, of class
    ``make`` (a Message, or the session's ``Inflight``). A PUBLISH without properties
    shares its envelope (and the envelope's encoded record header) with the connection's
    earlier ones to the same topic, QoS and retain flag, when given their ``cache``:
    nothing changes a message's envelope in place."""
    if cache is not None and p.properties is NO_PROPERTIES:
        key = (topic, p.qos, p.retain)
        hit = cache.get(key)
        if hit is None:
            env = _envelope(topic, p, client_id)
            if len(cache) >= ENVELOPE_CACHE:
                cache.clear()
            hit = cache[key] = (env, [(ENVELOPE_HEADER, env.SerializeToString())])
        return make(topic.encode(), p.payload, now_ms, [], hit[0], record_headers=hit[1])
    env = _envelope(topic, p, client_id)
    props = p.properties
    headers: list[tuple[str, bytes | None]] = []
    if props is not NO_PROPERTIES:
        if props.payload_format_indicator is not None:
            env.payload_format_indicator = props.payload_format_indicator
        if props.message_expiry_interval is not None:
            env.message_expiry_interval = props.message_expiry_interval
            env.expires_at_ms = now_ms + props.message_expiry_interval * 1000
        if props.content_type is not None:
            env.content_type = props.content_type
        if props.response_topic is not None:
            env.response_topic = props.response_topic
        if props.correlation_data is not None:
            env.correlation_data = props.correlation_data
        headers = [(k, v.encode()) for k, v in props.user_properties]
        for k, v in props.user_properties:
            env.user_properties.add(key=k, value=v)
            if k == TAG_PROPERTY:  # the message's tag (docs/filters.md); of several, the last
                env.tag = v
    return make(topic.encode(), p.payload, now_ms, headers, env)


def _envelope(topic: str, p: Publish, client_id: str) -> Envelope:
    return Envelope(protocol=_MQTT, exchange=EXCHANGE, routing_key=to_amqp(topic), mqtt_topic=topic,
                    mqtt_qos=p.qos, mqtt_retain=p.retain, mqtt_client_id=client_id)


def outgoing_topic(message: Message) -> str | None:
    """The MQTT topic a message goes out with; None if it names none (an AMQP routing key
    with ``+`` or ``#``, or empty)."""
    env = message.envelope
    if env.mqtt_topic:
        return env.mqtt_topic
    try:
        return to_mqtt_name(env.routing_key) if env.routing_key else None
    except Unmappable:
        return None


def published_qos(message: Message) -> int:
    """The QoS a message was published with, in MQTT's terms."""
    env = message.envelope
    if env.HasField("mqtt_qos"):
        return env.mqtt_qos
    if env.protocol == _AMQP:
        return 1 if env.delivery_mode == 2 else 0
    return 1


def outgoing_properties(message: Message, version: int, now_ms: int,
                        subscription_ids: tuple[int, ...] = ()) -> Properties | None:
    """The 5.0 PUBLISH properties of a message going out (NO_PROPERTIES for 3.1.1); None
    when its message expiry interval has run out: it is not sent."""
    env = message.envelope
    remaining: int | None = None
    if env.expires_at_ms:
        left = env.expires_at_ms - now_ms
        if left <= 0:
            return None
        remaining = -(-left // 1000)
    if version < MQTT_5:
        return NO_PROPERTIES
    if not (remaining is not None or subscription_ids or message.headers or env.content_type
            or env.response_topic or env.correlation_data or env.HasField("payload_format_indicator")):
        return NO_PROPERTIES
    return Properties(
        payload_format_indicator=env.payload_format_indicator if env.HasField("payload_format_indicator") else None,
        message_expiry_interval=remaining,
        content_type=env.content_type or None,
        response_topic=env.response_topic or None,
        correlation_data=env.correlation_data or None,
        subscription_identifiers=subscription_ids,
        user_properties=tuple((k, v.decode("utf-8", "replace") if v is not None else "")
                              for k, v in message.headers),
    )
