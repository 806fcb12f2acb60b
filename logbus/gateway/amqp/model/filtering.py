"""Filtered bindings at publish time: which candidate queues (``Router.route_filtered``)
take a message. The message's properties (``filters.properties``, AMQP headers decoded
with their types) are built once, and only when a selector asks for them."""

from __future__ import annotations

from typing import Any

from ....core.message import Message
from ....core.routing.router import Candidates
from ....filters.properties import header_tag, message_properties
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

    tag = message_tag(message)
    return frozenset(queue for queue, f in candidates if f.matches(tag, properties))


def message_tag(message: Message) -> str | None:
    """The message's tag: its envelope's, else (Kafka, HTTP) its ``tag`` header."""
    return message.envelope.tag or header_tag(message.headers)
