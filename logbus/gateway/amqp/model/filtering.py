"""Filtered bindings at publish time: which candidate queues (``Router.route_filtered``)
take a message. The message's properties (``filters.properties``, AMQP headers decoded
with their types) are built once, and only when a selector asks for them."""

from __future__ import annotations

from typing import Any

from ....core.message import Message
from ....core.routing.router import Candidates
from ....filters.properties import message_properties
from .definitions import decode_table


def filter_properties(message: Message, topic: str) -> dict[str, Any]:
    env = message.envelope
    return message_properties(env, message.headers, key=message.key, topic=topic, timestamp=message.timestamp,
                              typed_headers=decode_table(env.amqp_headers) if env.amqp_headers else None)


def passing(candidates: Candidates, message: Message, topic: str) -> frozenset[str]:
    """The queues of ``candidates`` whose filter takes ``message``."""
    built: list[dict[str, Any]] = []

    def properties() -> dict[str, Any]:
        if not built:
            built.append(filter_properties(message, topic))
        return built[0]

    tag = message.envelope.tag or header_tag(message)
    return frozenset(queue for queue, f in candidates if f.matches(tag, properties))


def header_tag(message: Message) -> str | None:
    """A record's tag when its envelope has none (Kafka, HTTP): its ``tag`` header."""
    for name, value in message.headers:
        if name == "tag" and value is not None:
            return value.decode("utf-8", "replace")
    return None
