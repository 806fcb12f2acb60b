"""The properties a selector sees of one message, by name (docs/filters.md):

- every system property the envelope has set, by its field name, as in Spark's
  ``properties`` column (``exchange``, ``routing_key``, ``mqtt_topic``,
  ``content_type``, ``priority``, ``delivery_count``, ``message_id``, ...), numbers as
  numbers and flags as booleans; ``protocol`` as its name (``AMQP``, ``MQTT``,
  ``KAFKA``, ``HTTP``) and ``tag``;
- the record's ``key`` (as text), ``topic`` (the log topic) and ``timestamp`` (epoch ms);
- user properties by their own names: AMQP headers with their AMQP types (numbers,
  booleans, text), MQTT 5 user properties, Kafka record headers and HTTP properties as
  text (a header that is not UTF-8 is left out). A system name wins over a user
  property of the same name.

Built once per message, and only for a message some filter looks at."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

_SKIP = frozenset({"amqp_headers", "user_properties", "dead_letter", "correlation_data", "keys"})
_PROTOCOLS = {1: "AMQP", 2: "MQTT", 3: "KAFKA", 4: "HTTP"}


def message_properties(envelope: Any, headers: Iterable[tuple[str, bytes | None]], *,
                       key: bytes | None = None, topic: str = "", timestamp: int | None = None,
                       typed_headers: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``envelope``: a logbus Envelope (protobuf); ``headers``: the record's user headers;
    ``typed_headers``: AMQP headers decoded by the caller (the AMQP gateway), which
    replace the text of the same names."""
    props: dict[str, Any] = {}
    for k, v in headers:
        if v is not None:
            try:
                props[k] = v.decode()
            except UnicodeDecodeError:
                pass
    for p in envelope.user_properties:
        props[p.key] = p.value
    if typed_headers:
        for k, v in typed_headers.items():
            if isinstance(v, (str, int, float, bool)):
                props[k] = v
            elif isinstance(v, (bytes, bytearray)):
                try:
                    props[k] = bytes(v).decode()
                except UnicodeDecodeError:
                    props.pop(k, None)
    if key is not None:
        try:
            props["key"] = key.decode()
        except UnicodeDecodeError:
            pass
    if topic:
        props["topic"] = topic
    if timestamp is not None:
        props["timestamp"] = timestamp
    for field, value in envelope.ListFields():
        name = field.name
        if name in _SKIP:
            continue
        if name == "protocol":
            value = _PROTOCOLS.get(value, str(value))
        props[name] = value
    return props


def record_properties(message: Any, topic: str,
                      typed: Callable[[Any], Mapping[str, Any] | None] | None = None) -> Mapping[str, Any]:
    """``message_properties`` of a logbus Message (envelope, headers, key, timestamp), AMQP
    headers as ``typed(message)`` decodes them (else as text). Built once per message:
    kept on it (``Message.selector_properties``) for every other filter that asks."""
    cached = message.selector_properties
    if cached is not None and cached[0] == topic:
        props: Mapping[str, Any] = cached[1]
        return props
    props = message_properties(message.envelope, message.headers, key=message.key, topic=topic,
                               timestamp=message.timestamp, typed_headers=None if typed is None else typed(message))
    message.selector_properties = (topic, props)
    return props


def message_tag(envelope: Any, headers: Iterable[tuple[str, bytes | None]]) -> str | None:
    """A message's tag: its envelope's, else (Kafka, HTTP records) its ``tag`` header."""
    if envelope.tag:
        return str(envelope.tag)
    for name, value in headers:
        if name == "tag" and value is not None:
            return value.decode("utf-8", "replace")
    return None
