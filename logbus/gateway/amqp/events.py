"""What the AMQP decoder (codec.py) reports: one event per frame, or per message for
content. NamedTuples rather than frozen dataclasses, which cost three times as much to
build (fastpath.py); their equality is made typed at the bottom of this module.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pamqp import base

from .errors import AMQPChannelError
from .fastpath import Properties


class Heartbeat(NamedTuple):
    pass


class MethodReceived(NamedTuple):
    channel: int
    method: base.Frame  # a pamqp method object


class Publish(NamedTuple):
    channel: int
    exchange: str
    routing_key: str
    mandatory: bool
    immediate: bool
    properties: Properties
    raw_properties: bytes  # flags and property values as received, for delivering unchanged
    body: bytes
    # raw_properties without the message-id and timestamp values (shapes.properties_of);
    # None: not known, the message is taken as it is
    shape: bytes | None = None


class ContentReceived(NamedTuple):
    """basic.return, basic.deliver or basic.get-ok with its content (a client has no
    business sending these; the state machine decides what to answer)."""

    channel: int
    method: base.Frame
    properties: Properties
    raw_properties: bytes
    body: bytes


class Ack(NamedTuple):
    channel: int
    delivery_tag: int
    multiple: bool


class Nack(NamedTuple):
    channel: int
    delivery_tag: int
    multiple: bool
    requeue: bool


class Reject(NamedTuple):
    channel: int
    delivery_tag: int
    requeue: bool


class ChannelFailed(NamedTuple):
    """A channel exception: close ``error.channel``, the connection goes on."""

    error: AMQPChannelError


Event = Heartbeat | MethodReceived | Publish | ContentReceived | Ack | Nack | Reject | ChannelFailed
HEARTBEAT = Heartbeat()


def _typed_eq(self: tuple[Any, ...], other: object) -> bool:
    return type(self) is type(other) and tuple.__eq__(self, other)  # type: ignore[operator]


def _typed_ne(self: tuple[Any, ...], other: object) -> bool:
    return not _typed_eq(self, other)


def _typed_hash(self: tuple[Any, ...]) -> int:
    return hash((type(self), tuple(self)))


for _cls in (Heartbeat, MethodReceived, Publish, ContentReceived, Ack, Nack, Reject, ChannelFailed):
    # a NamedTuple equals any tuple with the same items: Ack(1, 5, False) == Reject(1, 5, False)
    _cls.__eq__ = _typed_eq  # type: ignore[assignment,method-assign]
    _cls.__ne__ = _typed_ne  # type: ignore[assignment,method-assign]
    _cls.__hash__ = _typed_hash  # type: ignore[assignment,method-assign]
