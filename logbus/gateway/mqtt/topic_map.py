"""MQTT topic names and filters <-> AMQP routing and binding keys on ``amq.topic``.

Theory of operation. MQTT publishes land on the log topic behind ``amq.topic``, and an
MQTT subscription is a queue bound to ``amq.topic`` (docs/interop.md). The two
protocols split topics differently: MQTT separates levels with ``/`` and a ``.`` is an
ordinary character; AMQP separates words with ``.`` and a ``/`` is an ordinary
character. RabbitMQ's MQTT plugin turns ``/`` into ``.`` one way and back, so an MQTT
topic ``v1.2/status`` comes back as ``v1/2/status``: information is lost.

Here the mapping **swaps** the two characters: every ``/`` becomes ``.`` and every
``.`` becomes ``/``, in both directions. A separator stays a separator and an ordinary
character stays ordinary, so the mapping is its own inverse (``to_amqp(to_mqtt(k)) ==
k`` and ``to_mqtt(to_amqp(t)) == t`` for every string) and the common case reads as in
RabbitMQ: MQTT ``sensors/kitchen/temp`` is AMQP ``sensors.kitchen.temp``. Spaces,
empty levels and non-ASCII text are unchanged.

Filters map the same way, with MQTT's single-level wildcard ``+`` as AMQP's ``*`` (a
whole level only) and ``#`` as ``#``. What cannot be said on the other side:

- an MQTT filter level that is a literal ``*`` would be AMQP's wildcard: ``filter_to_amqp``
  refuses it (``Unmappable``), so no subscription silently matches more than asked;
- an AMQP routing key with ``+`` or ``#`` inside a word has no MQTT topic name (MQTT
  forbids wildcard characters in topic names): ``to_mqtt_name`` refuses it, and such a
  message is not delivered to MQTT subscribers.

The Kafka record key of an MQTT publish is the MQTT topic name itself, unmapped.
"""

from __future__ import annotations

__all__ = ["Unmappable", "filter_to_amqp", "key_forms", "to_amqp", "to_mqtt", "to_mqtt_name"]

_SWAP = str.maketrans({"/": ".", ".": "/"})
_SWAP_BYTES = bytes.maketrans(b"/.", b"./")  # in UTF-8 no byte of a multi-byte character is one of these


class Unmappable(ValueError):
    """A topic or filter with no equivalent on the other side."""


def to_amqp(topic: str) -> str:
    """The AMQP routing key of an MQTT topic name (swap ``/`` and ``.``)."""
    return topic.translate(_SWAP)


def to_mqtt(key: str) -> str:
    """The MQTT text of an AMQP routing key (swap ``.`` and ``/``), wildcards untouched."""
    return key.translate(_SWAP)


def to_mqtt_name(key: str) -> str:
    """The MQTT topic name an AMQP routing key is delivered under; ``Unmappable`` if the
    key holds ``+`` or ``#`` (not allowed in an MQTT topic name)."""
    if "+" in key or "#" in key:
        raise Unmappable(f"routing key {key!r} holds '+' or '#', which no MQTT topic name may")
    return key.translate(_SWAP)


def key_forms(key: bytes) -> tuple[bytes, ...]:
    """The record keys a search on ``amq.topic``'s log topic looks for, given either an
    MQTT topic or its AMQP routing key: the key itself first, then its other form (an MQTT
    publish's record key is its topic, an AMQP publish's its routing key)."""
    other = key.translate(_SWAP_BYTES)
    return (key,) if other == key else (key, other)


def filter_to_amqp(mqtt_filter: str) -> str:
    """The AMQP binding key of a (valid) MQTT topic filter: levels swapped as names are,
    ``+`` -> ``*``, ``#`` -> ``#``. ``Unmappable`` for a level that is a literal ``*``
    (it would be AMQP's wildcard)."""
    words = []
    for level in mqtt_filter.split("/"):
        if level == "+":
            words.append("*")
        elif level == "*":
            raise Unmappable(f"topic filter {mqtt_filter!r} has a level '*', which AMQP reads as a wildcard")
        else:
            words.append(level.replace(".", "/"))
    return ".".join(words)
