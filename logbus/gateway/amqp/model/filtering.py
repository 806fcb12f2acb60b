"""Filtered bindings at publish time: which candidate queues (``Router.route_filtered``)
take a message. The message's properties (``filters.properties``, AMQP headers decoded
with their types) are built once, and only when a selector asks for them."""

from __future__ import annotations

from typing import Any, Mapping

from ....core.message import Message
from ....core.routing.router import Candidates
from ....filters.properties import record_properties
from ....filters.properties import message_tag as tag_of
from ..errors import MalformedFrame
from ..fastpath import decode_table


def filter_properties(message: Message, topic: str) -> Mapping[str, Any]:
    """What a selector sees of ``message``, AMQP headers with their types; built once per
    message (``record_properties``)."""
    return record_properties(message, topic, _typed_headers)


def _typed_headers(message: Message) -> Mapping[str, Any] | None:
    raw = message.envelope.amqp_headers
    if not raw:
        return None
    try:
        typed: Mapping[str, Any] = decode_table(raw, 0, len(raw))[0]
        return typed
    except MalformedFrame:  # checked when published: not expected; the text headers remain
        return None


def passing(candidates: Candidates, message: Message, topic: str) -> frozenset[str]:
    """The queues of ``candidates`` whose filter takes ``message``."""
    tag = message_tag(message)
    props: Mapping[str, Any] | None = None
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
