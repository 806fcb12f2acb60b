"""The Kafka name of a logbus topic, and back: two pure functions, used only at the Kafka
edge (topic_fields.py applies them to every request and response).

Theory of operation
-------------------
Kafka clients accept a topic name of 1 to 249 characters from ``[a-zA-Z0-9._-]``, other
than ``.`` and ``..``, and check it before they send anything (kafka-python's
``ensure_valid_topic_name``, the Java client's ``Topic.validate``). A logbus topic name may
hold any character but ``/``, ``\\`` and control characters: pop groups dead-letter to
``%DLQ%<group>`` (RocketMQ's name) and AMQP exchanges may have spaces. So each logbus
topic is shown to Kafka clients under one Kafka name:

=====================================  ======================================  ==========================
logbus name                            Kafka name                              example
=====================================  ======================================  ==========================
``%DLQ%<g>``, ``g`` from the alphabet  ``logbus-dlq-<g>``                      ``%DLQ%proc``: ``logbus-dlq-proc``
a name Kafka accepts, not starting     itself                                  ``orders``: ``orders``
with ``logbus-dlq-`` or ``logbus-x-``
anything else                          ``logbus-x-`` + escaped name            ``orders in``: ``logbus-x-orders_20in``
=====================================  ======================================  ==========================

The escape keeps ``[a-zA-Z0-9.-]`` and writes every other character, ``_`` included, as
``_`` and two upper-case hex digits per UTF-8 byte (``%`` is ``_25``, ``ü`` is ``_C3_BC``).
A name whose Kafka name would be longer than 249 characters has none: Kafka clients do
not see it.

``from_kafka`` is the inverse, and answers None for a Kafka name that is no logbus
topic's name: it decodes, then checks that ``to_kafka`` gives the same name back. So
each logbus topic has exactly one Kafka name and each Kafka name names at most one topic
(``logbus-x-orders``, ``logbus-x-_25DLQ_25proc`` or ``logbus-x-_4F`` name none).

The prefixes: no ``__`` (Kafka's own internal topics, ``__consumer_offsets`` and the
like, and the tools that hide them), and neither ``.`` nor ``_`` (Kafka warns that a name
with both may collide in metric names, and refuses a topic that collides with another
that way), so a dead-letter topic's Kafka name holds ``.`` or ``_`` only when its group's
name does. ``logbus-`` names the product, as ``connect-`` and ``mm2-`` do in Kafka's own
tools.
"""

from __future__ import annotations

import re

MAX_KAFKA_NAME = 249  # Apache Kafka's Topic.MAX_NAME_LENGTH
DLQ_PREFIX = "%DLQ%"  # core/queues/pop.py's dead-letter topics
KAFKA_DLQ_PREFIX = "logbus-dlq-"
KAFKA_ESCAPED_PREFIX = "logbus-x-"
RESERVED_PREFIXES = (KAFKA_DLQ_PREFIX, KAFKA_ESCAPED_PREFIX)

_KAFKA_NAME = re.compile(r"[a-zA-Z0-9._-]*")
_KEPT = re.compile(r"[a-zA-Z0-9.-]")
_ESCAPED = re.compile(r"_([0-9A-F]{2})")


def is_kafka_legal(name: str) -> bool:
    """Whether Kafka clients accept ``name`` as a topic name."""
    return (0 < len(name) <= MAX_KAFKA_NAME and name not in (".", "..")
            and _KAFKA_NAME.fullmatch(name) is not None)


def _escape(name: str) -> str:
    return "".join(c if _KEPT.fullmatch(c) else "".join(f"_{b:02X}" for b in c.encode()) for c in name)


def _unescape(text: str) -> str | None:
    out = bytearray()
    pos = 0
    for m in _ESCAPED.finditer(text):
        out += text[pos:m.start()].encode()
        out.append(int(m.group(1), 16))
        pos = m.end()
    out += text[pos:].encode()
    try:
        return out.decode()
    except UnicodeDecodeError:
        return None


def to_kafka(name: str) -> str | None:
    """The Kafka name of the logbus topic ``name``, or None when it has none (too long)."""
    if name.startswith(DLQ_PREFIX):
        alias = KAFKA_DLQ_PREFIX + name[len(DLQ_PREFIX):]
        if is_kafka_legal(alias):
            return alias
    elif is_kafka_legal(name) and not name.startswith(RESERVED_PREFIXES):
        return name
    escaped = KAFKA_ESCAPED_PREFIX + _escape(name)
    return escaped if len(escaped) <= MAX_KAFKA_NAME else None


def from_kafka(kafka_name: str) -> str | None:
    """The logbus topic whose Kafka name is ``kafka_name``, or None when there is none."""
    if not is_kafka_legal(kafka_name):
        return None
    name: str | None
    if kafka_name.startswith(KAFKA_DLQ_PREFIX):
        name = DLQ_PREFIX + kafka_name[len(KAFKA_DLQ_PREFIX):]
    elif kafka_name.startswith(KAFKA_ESCAPED_PREFIX):
        name = _unescape(kafka_name[len(KAFKA_ESCAPED_PREFIX):])
    else:
        name = kafka_name
    return name if name is not None and to_kafka(name) == kafka_name else None
