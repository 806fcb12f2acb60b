"""AMQP content <-> ``core.message.Message`` (docs/architecture.md section 4).

A published message becomes a record whose key is the routing key and whose value is
the body; its basic properties go into the envelope (the headers table raw, as sent,
so it comes back byte for byte). Headers with text or bytes values are also copied to
the record's user headers, so a Kafka consumer or Spark sees them as ordinary headers;
except one named ``logbus.envelope``, the envelope's own record header, which only AMQP
consumers see.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from ...core.types import ENVELOPE_HEADER, Envelope, Message
from .events import Publish
from .fastpath import Properties, decode_table, encode_table

_AMQP = Envelope.AMQP
_MQTT = Envelope.MQTT

TAG_HEADER = "x-tag"  # an AMQP header naming the message's tag (docs/filters.md)


# (exchange, routing key, property shape) -> what the envelopes of recent publishes
# share: a stream of messages whose properties differ at most in message-id and
# timestamp (shapes.properties_of) builds one Envelope, not one each. Each message then
# gets its envelope bytes by splicing its own message-id and timestamp fields into the
# shared ones (protobuf's encoding is its fields in number order), and parses them
# (about a microsecond) for its Envelope. A message without either shares the Envelope
# itself: nothing may change a message's envelope in place (dead-lettering copies it).
class _Shared(NamedTuple):
    envelope: Envelope  # without message-id and timestamp
    user: list[tuple[str, bytes | None]]  # the record's user headers
    record_headers: list[tuple[str, bytes | None]]  # user headers + the envelope's
    below: bytes  # the envelope's fields numbered below message_id's, encoded
    between: bytes  # those between message_id and amqp_timestamp
    above: bytes  # those above amqp_timestamp


_ENVELOPES: dict[tuple[str, str, bytes], _Shared] = {}
_ENVELOPES_MAX = 1024
_MESSAGE_ID = Envelope.DESCRIPTOR.fields_by_name["message_id"].number
_TIMESTAMP = Envelope.DESCRIPTOR.fields_by_name["amqp_timestamp"].number
_parse_envelope = Envelope.FromString


def _encoded(env: Envelope, keep: Callable[[int], bool]) -> bytes:
    """``env`` encoded with only the fields whose number ``keep`` accepts."""
    part = Envelope()
    part.CopyFrom(env)
    for f in Envelope.DESCRIPTOR.fields:
        if not keep(f.number):
            part.ClearField(f.name)
    return part.SerializeToString()


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_MESSAGE_ID_TAG = _varint(_MESSAGE_ID << 3 | 2)  # a length-delimited field
_TIMESTAMP_TAG = _varint(_TIMESTAMP << 3)  # a varint field


def to_message(p: Publish) -> Message:
    shape = p.shape
    props = p.properties
    if shape is None or len(shape) == len(p.raw_properties):
        identity, shape = False, p.raw_properties
    else:
        identity = True
    key = (p.exchange, p.routing_key, shape)
    hit = _ENVELOPES.get(key)
    if hit is None:
        if len(_ENVELOPES) >= _ENVELOPES_MAX:
            _ENVELOPES.clear()
        hit = _ENVELOPES[key] = _share(p, props._replace(message_id=None, timestamp=None) if identity else props)
    if not identity:
        return Message(p.routing_key.encode(), p.body, None, hit.user, hit.envelope, p.raw_properties,
                       record_headers=hit.record_headers, routing_headers=props.headers)
    data = hit.below
    if props.message_id:
        raw = props.message_id.encode()
        data += _MESSAGE_ID_TAG + _varint(len(raw)) + raw
    data += hit.between
    if props.timestamp is not None:
        data += _TIMESTAMP_TAG + _varint(props.timestamp)
    data += hit.above
    user = hit.user
    return Message(p.routing_key.encode(), p.body, None, user, _parse_envelope(data), p.raw_properties,
                   record_headers=[*user, (ENVELOPE_HEADER, data)], routing_headers=props.headers)


def _share(p: Publish, props: Properties) -> _Shared:
    env, user = _envelope(p.exchange, p.routing_key, props)
    data = env.SerializeToString()
    below = _encoded(env, lambda number: number < _MESSAGE_ID)
    above = _encoded(env, lambda number: number > _TIMESTAMP)
    # encoded in field-number order, so the whole is below + between + above
    assert data.startswith(below) and data.endswith(above), "protobuf encodes fields in number order"
    between = data[len(below) : len(data) - len(above)]
    return _Shared(env, user, [*user, (ENVELOPE_HEADER, data)], below, between, above)


def _envelope(exchange: str, routing_key: str, props: Properties) -> tuple[Envelope, list[tuple[str, bytes | None]]]:
    env = Envelope(protocol=_AMQP, exchange=exchange, routing_key=routing_key)
    if props.content_type is not None:
        env.content_type = props.content_type
    if props.content_encoding is not None:
        env.content_encoding = props.content_encoding
    user: list[tuple[str, bytes | None]] = []
    if props.headers:
        env.amqp_headers = encode_table(props.headers)
        user = _user_headers(props.headers)
        tag = props.headers.get(TAG_HEADER)
        if isinstance(tag, (str, bytes, bytearray)):  # the message's tag (docs/filters.md)
            env.tag = tag if isinstance(tag, str) else bytes(tag).decode("utf-8", "replace")
    if props.delivery_mode is not None:
        env.delivery_mode = props.delivery_mode
    if props.priority is not None:
        env.priority = props.priority
    if props.correlation_id is not None:
        env.correlation_id = props.correlation_id
    if props.reply_to is not None:
        env.reply_to = props.reply_to
    if props.expiration is not None:
        env.expiration = props.expiration
    if props.message_id is not None:
        env.message_id = props.message_id
    if props.timestamp is not None:
        env.amqp_timestamp = props.timestamp
    if props.message_type is not None:
        env.type = props.message_type
    if props.user_id is not None:
        env.user_id = props.user_id
    if props.app_id is not None:
        env.app_id = props.app_id
    return env, user


def _user_headers(table: dict[str, Any]) -> list[tuple[str, bytes | None]]:
    out: list[tuple[str, bytes | None]] = []
    for k, v in table.items():
        if k == ENVELOPE_HEADER:
            continue  # the reserved record header: kept in the AMQP headers only
        if isinstance(v, str):
            out.append((k, v.encode()))
        elif isinstance(v, (bytes, bytearray)):
            out.append((k, bytes(v)))
    return out


def _header_value(v: bytes | None) -> str | bytearray | None:
    """A record header's value as an AMQP field: text as a long string, other bytes as
    a byte array ('x'), none as void."""
    if v is None:
        return None
    try:
        return v.decode()
    except UnicodeDecodeError:
        return bytearray(v)


def properties_of(m: Message) -> Properties:
    """The basic properties to deliver ``m`` with (a message from any protocol)."""
    env = m.envelope
    headers: Any = None
    if env.amqp_headers:
        headers, _ = decode_table(env.amqp_headers, 0, len(env.amqp_headers))
    elif m.headers and env.protocol != _AMQP:  # record headers (Kafka, MQTT 5 user properties)
        headers = {k: _header_value(v) for k, v in m.headers}
    return Properties(
        content_type=env.content_type or None,
        content_encoding=env.content_encoding or None,
        headers=headers or None,
        delivery_mode=_delivery_mode(env),
        priority=env.priority if env.HasField("priority") else None,
        correlation_id=env.correlation_id or None,
        reply_to=env.reply_to or None,
        expiration=env.expiration or None,
        message_id=env.message_id or None,
        timestamp=env.amqp_timestamp if env.HasField("amqp_timestamp") else None,
        message_type=env.type or None,
        user_id=env.user_id or None,
        app_id=env.app_id or None,
    )


def _delivery_mode(env: Envelope) -> int | None:
    """An AMQP message's own; an MQTT publish's from its QoS, as RabbitMQ's MQTT plugin
    gives it: QoS 1 and 2 persistent (2), QoS 0 not (1). The reverse of
    ``mqtt.mapping.published_qos``."""
    if env.HasField("delivery_mode"):
        return env.delivery_mode
    if env.protocol == _MQTT:
        return 2 if env.mqtt_qos else 1
    return None
