"""The AMQP room's declares and publishes: an AMQP method's words (``x-`` arguments,
the delayed-message type, ``x-delay``, ``x-filter-*``) turned into the neutral model's
terms (``core/vhost.py``), with RabbitMQ's checks and wording. The channel's methods
(``declarations.py``, ``publishing.py``) call these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ....core.errors import PreconditionFailed
from ....core.types import (
    HEADERS, QUEUE, DestKind, HeaderMatch, QueueSettings, QueueState, freeze_arguments,
)  # fmt: skip
from ....core.ports import Queues
from .queue_args import check_equivalent, parse_queue_arguments
from .translate import binding_filter, exchange_kind, header_match


def declare_exchange(vhost: Queues, name: str, kind: str = "direct", *, durable: bool = False,
                     auto_delete: bool = False, internal: bool = False, arguments: Mapping[str, Any] | None = None,
                     passive: bool = False) -> None:
    """exchange.declare; ``kind`` may be ``x-delayed-message`` (with ``x-delayed-type``)."""
    routing, delayed = (kind, False) if passive else exchange_kind(kind, arguments)
    vhost.declare_exchange(name, routing, durable=durable, auto_delete=auto_delete, internal=internal,
                           arguments=arguments, passive=passive, delayed=delayed)


def declare_queue(vhost: Queues, name: str, *, durable: bool = False, exclusive: Any = None,
                  auto_delete: bool = False, arguments: Mapping[str, Any] | None = None, passive: bool = False,
                  declarer: Any = None) -> QueueState:
    """queue.declare: a new queue's ``x-`` arguments are its settings; a queue that exists
    must have been declared with the same ones."""
    new = not passive and name not in vhost.queues
    settings = parse_queue_arguments(name, vhost.name, arguments).settings() if new else QueueSettings()
    return vhost.declare_queue(name, settings, durable=durable, exclusive=exclusive, auto_delete=auto_delete,
                               arguments=arguments, passive=passive, declarer=declarer,
                               equivalent=check_equivalent(vhost.name))


def bind(vhost: Queues, source: str, destination: str, routing_key: str = "",
         arguments: Mapping[str, Any] | None = None, *, kind: DestKind = QUEUE) -> None:
    """queue.bind / exchange.bind; ``x-filter-tag``/``x-filter-sql`` are the binding's
    filter, ``x-match`` and the other arguments a headers exchange's match."""
    args, spec = binding_filter(arguments, to_queue=kind == QUEUE)
    vhost.bind(source, destination, routing_key, args, kind=kind, filter=spec,
               match=_match(vhost, source, args))


def unbind(vhost: Queues, source: str, destination: str, routing_key: str = "",
           arguments: Mapping[str, Any] | None = None, *, kind: DestKind = QUEUE) -> None:
    args, spec = binding_filter(arguments, to_queue=kind == QUEUE)
    try:
        match = _match(vhost, source, args)
    except PreconditionFailed:
        return  # no such binding can exist: nothing to remove
    vhost.unbind(source, destination, routing_key, args, kind=kind, filter=spec, match=match)


def _match(vhost: Queues, source: str, arguments: Mapping[str, Any]) -> HeaderMatch | None:
    """A binding's match when its source is a headers exchange (else None)."""
    if not vhost.has_exchange(source) or vhost.exchange(source).routing_kind != HEADERS:
        return None
    return header_match(freeze_arguments(arguments))
