"""What a queue's binding (or subscription, or pop group) asks of a message: a tag
expression, a selector, or both (both must hold).

    f = MessageFilter.from_arguments({"x-filter-sql": "temp > 30"}, TAG_ARG, SQL_ARG)
    f.matches(tag, lambda: properties)   # the properties are built only if needed
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .errors import FilterError
from .properties import message_tag
from .selector import Selector
from .tags import TagFilter

# AMQP binding and consumer arguments
TAG_ARG = "x-filter-tag"
SQL_ARG = "x-filter-sql"


class MessageFilter:
    __slots__ = ("tags", "selector")

    def __init__(self, tags: TagFilter | None = None, selector: Selector | None = None) -> None:
        self.tags = tags
        self.selector = selector

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any], tag_name: str = TAG_ARG,
                       sql_name: str = SQL_ARG) -> MessageFilter | None:
        """The filter named by ``arguments`` (None when they name none). Raises
        FilterError, its text naming the argument, for one that is not text or does
        not parse."""
        tag, sql = arguments.get(tag_name), arguments.get(sql_name)
        if tag is None and sql is None:
            return None
        tags = selector = None
        name = tag_name
        try:
            if tag is not None:
                tags = TagFilter.parse(_text(tag))
            name = sql_name
            if sql is not None:
                selector = Selector.parse(_text(sql))
        except FilterError as e:
            raise FilterError(f"{name}: {e.reason}", e.position) from None
        return cls(tags, selector)

    def matches(self, tag: str | None, properties: Callable[[], Mapping[str, Any]]) -> bool:
        if self.tags is not None and not self.tags.matches(tag):
            return False
        return self.selector is None or self.selector.matches(properties())

    def takes(self, message: Any, topic: str, properties_of: Callable[[Any, str], Mapping[str, Any]]) -> bool:
        """Whether ``message`` (a logbus Message) from ``topic`` passes;
        ``properties_of(message, topic)`` is called only if the selector needs it."""
        if self.tags is not None and not self.tags.matches(message_tag(message.envelope, message.headers)):
            return False
        return self.selector is None or self.selector.matches(properties_of(message, topic))

    def __repr__(self) -> str:
        parts = [repr(p) for p in (self.tags, self.selector) if p is not None]
        return f"MessageFilter({', '.join(parts)})"


@dataclass(frozen=True, slots=True)
class FilterSpec:
    """A filter with the texts it was made from, to store and to compare: an MQTT
    subscription's, a pop group's. Equal when the texts are."""

    tag: str | None
    sql: str | None
    filter: MessageFilter = field(compare=False)

    @classmethod
    def parse(cls, tag: Any, sql: Any, tag_name: str = TAG_ARG, sql_name: str = SQL_ARG) -> FilterSpec | None:
        """None when neither is given; raises FilterError naming ``tag_name`` or
        ``sql_name`` (for one that is not text, too: text as bytes is decoded)."""
        f = MessageFilter.from_arguments({tag_name: tag, sql_name: sql}, tag_name, sql_name)
        if f is None:
            return None
        return cls(None if tag is None else _text(tag), None if sql is None else _text(sql), f)

    def arguments(self) -> dict[str, str]:
        """As binding arguments (``x-filter-tag``, ``x-filter-sql``)."""
        args = {}
        if self.tag is not None:
            args[TAG_ARG] = self.tag
        if self.sql is not None:
            args[SQL_ARG] = self.sql
        return args


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            raise FilterError("is not UTF-8 text", 0) from None
    if not isinstance(value, str):
        raise FilterError(f"must be text, not {type(value).__name__}", 0)
    return value
