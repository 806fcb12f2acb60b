"""AMQP content <-> ``core.message.Message`` (ARCHITECTURE.md section 4).

A published message becomes a record whose key is the routing key and whose value is
the body; its basic properties go into the envelope (the headers table raw, as sent,
so it comes back byte for byte). Headers with text or bytes values are also copied to
the record's user headers, so a Kafka consumer or Spark sees them as ordinary headers;
except one named ``logbus.envelope``, the envelope's own record header, which only AMQP
consumers see.
"""

from __future__ import annotations

from typing import Any

from ...core.message import ENVELOPE_HEADER, Envelope, Message
from .events import Publish
from .fastpath import Properties, decode_table, encode_table

_AMQP = Envelope.AMQP


# (exchange, routing key, raw properties) -> (envelope, user headers, record headers) of
# recent publishes: a stream of messages with equal properties builds and serializes
# one envelope, not one each. The envelope is then shared by those messages: nothing
# may change a message's envelope in place (dead-lettering copies it).
_ENVELOPES: dict[tuple[str, str, bytes], tuple[Envelope, list[tuple[str, bytes | None]],
                                              list[tuple[str, bytes | None]]]] = {}
_ENVELOPES_MAX = 1024


def to_message(p: Publish) -> Message:
    key = (p.exchange, p.routing_key, p.raw_properties)
    hit = _ENVELOPES.get(key)
    if hit is None:
        env, user = _envelope(p)
        data = env.SerializeToString()
        if len(_ENVELOPES) >= _ENVELOPES_MAX:
            _ENVELOPES.clear()
        hit = _ENVELOPES[key] = env, user, [*user, (ENVELOPE_HEADER, data)]
    env, user, record_headers = hit
    return Message(p.routing_key.encode(), p.body, None, user, env, p.raw_properties,
                   record_headers=record_headers)


def _envelope(p: Publish) -> tuple[Envelope, list[tuple[str, bytes | None]]]:
    props = p.properties
    env = Envelope(protocol=_AMQP, exchange=p.exchange, routing_key=p.routing_key)
    if props.content_type is not None:
        env.content_type = props.content_type
    if props.content_encoding is not None:
        env.content_encoding = props.content_encoding
    user: list[tuple[str, bytes | None]] = []
    if props.headers:
        env.amqp_headers = encode_table(props.headers)
        user = _user_headers(props.headers)
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
        delivery_mode=env.delivery_mode if env.HasField("delivery_mode") else None,
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
