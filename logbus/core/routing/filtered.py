"""Filtered bindings at routing (docs/filters.md, decision 0019): of the candidates the
router matched, (queue, filter) of bindings with a filter, the queues whose filter takes
a message. Its properties are built once (``properties``, the broker's forms), and only
when a selector asks for them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...filters.properties import message_tag
from ..message import Message
from .router import Candidates


def passing(candidates: Candidates, message: Message, topic: str,
            properties: Callable[[Message, str], Mapping[str, Any]]) -> frozenset[str]:
    """The queues of ``candidates`` whose filter takes ``message`` (in log topic ``topic``)."""
    tag = message_tag(message.envelope, message.headers)
    props: Mapping[str, Any] | None = None
    out = []
    for queue, f in candidates:
        tags, selector = f.tags, f.selector
        if tags is not None and not tags.matches(tag):
            continue
        if selector is not None:
            if props is None:
                props = properties(message, topic)
            if not selector.matches(props):
                continue
        out.append(queue)
    return frozenset(out)
