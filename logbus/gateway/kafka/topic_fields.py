"""Topic names at the Kafka edge: every request's topic names are turned from Kafka names
into logbus names before its handler runs, and every response's back after it
(``KafkaHandlers.handle``), with names.py's ``from_kafka`` and ``to_kafka``. Handlers see
only logbus names.

Theory of operation
-------------------
Where the names are comes from Apache Kafka's own message schemas, which kafka-python's
classes carry: every field marked ``"entityType": "topicName"`` (a string, or an array of
strings, at any depth), and the ``ResourceName`` of a config resource whose
``ResourceType`` is 2 (a topic). An API added to the handler table is therefore covered
without a line here; ``tests/unit/test_kafka_names.py`` lists what each API gets.

A Kafka name that names no logbus topic becomes an ``Unmapped``: ``/`` followed by the
name, which no logbus topic name can equal (they may not contain ``/``). So a handler
finds no such topic and creates none (CreateTopics and Metadata answer
INVALID_TOPIC_EXCEPTION), and the response carries the name the client sent.

In a response, a topic without a Kafka name (one whose name would be longer than 249
characters) is left out of its array: only Metadata and OffsetFetch list topics the
request did not name.

Fetch answers are encoded by ``codec.encode_fetch_response``, not as objects: the Fetch
handler names their topics with ``outbound`` itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

from .names import KAFKA_DLQ_PREFIX, KAFKA_ESCAPED_PREFIX, from_kafka, is_kafka_legal, to_kafka

RESOURCE_TOPIC = 2  # Kafka's ConfigResource.Type.TOPIC


class Unmapped(str):
    """A Kafka name that names no logbus topic, as a rewritten request holds it."""

    kafka: str

    def __new__(cls, kafka_name: str) -> Unmapped:
        self = super().__new__(cls, "/" + kafka_name)
        self.kafka = kafka_name
        return self

    def __repr__(self) -> str:
        return repr(self.kafka)

    @property
    def reason(self) -> str:
        if not is_kafka_legal(self.kafka):
            return (f"Topic name {self.kafka!r} is illegal: Kafka topic names are 1 to 249 ASCII "
                    "alphanumerics, '.', '_' and '-', and not '.' or '..'")
        return (f"Topic name {self.kafka!r} names no logbus topic: names starting with "
                f"{KAFKA_DLQ_PREFIX!r} or {KAFKA_ESCAPED_PREFIX!r} are logbus's aliases (docs/kafka.md)")


@lru_cache(maxsize=4096)
def inbound(kafka_name: str) -> str:
    """The logbus name a handler sees for ``kafka_name``."""
    name = from_kafka(kafka_name)
    return name if name is not None else Unmapped(kafka_name)


def outbound(name: str) -> str | None:
    """The Kafka name a response carries for the logbus name ``name`` (None: it has none)."""
    if isinstance(name, Unmapped):
        return name.kafka
    return _to_kafka(name)


_to_kafka = lru_cache(maxsize=4096)(to_kafka)


# -- where topic names are ----------------------------------------------------------------

NAME, NAMES, RESOURCE, STRUCT, STRUCTS = "name", "names", "resource", "struct", "structs"


@dataclass(frozen=True, slots=True)
class Place:
    attr: str  # the kafka-python attribute
    kind: str  # NAME, NAMES, RESOURCE (resource_name of a topic resource), STRUCT, STRUCTS
    inner: tuple[Place, ...] = ()


def _places(struct: Any) -> tuple[Place, ...]:
    out = []
    for attr, field in struct.fields.items():
        schema = field._json
        if schema.get("entityType") == "topicName":
            out.append(Place(attr, NAMES if schema["type"] == "[]string" else NAME))
        elif field.is_struct() or field.is_struct_array():
            inner = _places(field)
            if inner:
                out.append(Place(attr, STRUCTS if field.is_struct_array() else STRUCT, inner))
    if "resource_type" in struct.fields and "resource_name" in struct.fields:
        out.append(Place("resource_name", RESOURCE))
    return tuple(out)


_PLACES: dict[type, tuple[Place, ...]] = {}


def places(message_cls: type) -> tuple[Place, ...]:
    """Where the topic names of a kafka-python message class are."""
    found = _PLACES.get(message_cls)
    if found is None:
        found = _PLACES[message_cls] = _places(message_cls._struct)  # type: ignore[attr-defined]
    return found


# -- the rewrite ------------------------------------------------------------------------

def _rewrite(obj: Any, where: tuple[Place, ...], rename: Callable[[str], str | None]) -> bool:
    """Rename the topic names of ``obj`` in place; False when its own topic name has no
    new name (the enclosing array then leaves it out)."""
    keep = True
    for p in where:
        value = getattr(obj, p.attr)
        if value is None:
            continue
        if p.kind == NAME:
            new = rename(value)
            if new is None:
                keep = False
            else:
                setattr(obj, p.attr, new)
        elif p.kind == RESOURCE:
            if obj.resource_type == RESOURCE_TOPIC:
                new = rename(value)
                setattr(obj, p.attr, new if new is not None else value)
        elif p.kind == NAMES:
            setattr(obj, p.attr, [n for n in map(rename, value) if n is not None])
        elif p.kind == STRUCT:
            _rewrite(value, p.inner, rename)
        elif value:
            setattr(obj, p.attr, [item for item in value if _rewrite(item, p.inner, rename)])
    return keep


def rename_request(body: Any) -> None:
    """Kafka names -> logbus names, in place, in a decoded request."""
    _rewrite(body, places(type(body)), inbound)


def rename_response(response: Any) -> Any:
    """Logbus names -> Kafka names, in place, in a response object; returns it."""
    _rewrite(response, places(type(response)), outbound)
    return response
