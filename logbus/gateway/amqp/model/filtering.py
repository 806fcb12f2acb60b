"""Filtered bindings at publish time: which candidate queues (``Router.route_filtered``)
take a message. The message's properties (``filters.properties``, AMQP headers decoded
with their types) are built once, and only when a selector asks for them."""

from __future__ import annotations

from typing import Any, Mapping

from ....core.message import Message
from ....core.routing.router import Candidates
from ....filters.properties import message_properties
from ....filters.properties import message_tag as tag_of
from ..errors import MalformedFrame
from ..fastpath import decode_table


def filter_properties(message: Message, topic: str) -> dict[str, Any]:
    env = message.envelope
    typed: Mapping[str, Any] | None = None
    if env.amqp_headers:
        try:
            typed = decode_table(env.amqp_headers, 0, len(env.amqp_headers))[0]
        except MalformedFrame:  # checked when published: not expected; the text headers remain
            typed = None
    return message_properties(env, message.headers, key=message.key, topic=topic, timestamp=message.timestamp,
                              typed_headers=typed)


def passing(candidates: Candidates, message: Message, topic: str) -> frozenset[str]:
    """The queues of ``candidates`` whose filter takes ``message``."""
    tag = message_tag(message)
    props: dict[str, Any] | None = None
    out = []
    for queue, f in candidates:
        tags, selector = f.tags, f.selector
        if tags is not None and not tags.matches(tag):
            continue
        if selector is not None:
            if props is None:
                props = filter_properties(message, topic)
            if not selector.matches(props):
                continue
        out.append(queue)
    return frozenset(out)


def message_tag(message: Message) -> str | None:
    """The message's tag: its envelope's, else (Kafka, HTTP) its ``tag`` header."""
    return tag_of(message.envelope, message.headers)
