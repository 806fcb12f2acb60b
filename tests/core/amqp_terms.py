"""A core ``VHost`` spoken to in AMQP's words, as the AMQP channel speaks to it (through
``gateway/amqp/model/room.py``): for core tests written in RabbitMQ's terms (``x-``
arguments, ``x-delay``, dead letters with ``x-death``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from logbus.core.message import Message
from logbus.core.vhost import VHost
from logbus.gateway.amqp.model import room
from logbus.gateway.amqp.model.translate import x_delay


class AmqpTerms:
    def __init__(self, vhost: VHost) -> None:
        self.vhost = vhost

    def declare_exchange(self, *args: Any, **kw: Any) -> None:
        room.declare_exchange(self.vhost, *args, **kw)

    def declare_queue(self, *args: Any, **kw: Any) -> Any:
        return room.declare_queue(self.vhost, *args, **kw)

    def bind(self, *args: Any, **kw: Any) -> None:
        room.bind(self.vhost, *args, **kw)

    def unbind(self, *args: Any, **kw: Any) -> None:
        room.unbind(self.vhost, *args, **kw)

    def publish(self, exchange: str, routing_key: str, message: Message, *,
                headers: Mapping[str, Any] | None = None, on_durable: Any = None) -> Any:
        """basic.publish; an ``x-delay`` header delays it on a delayed-message exchange."""
        return self.vhost.publish(exchange, routing_key, message, headers=headers,
                                  delay_ms=x_delay(headers) if headers else 0, on_durable=on_durable)

    def __getattr__(self, name: str) -> Any:  # the rest: neutral already
        return getattr(self.vhost, name)
