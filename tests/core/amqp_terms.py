"""A core ``VHost`` spoken to in AMQP's words, as the AMQP channel speaks to it (through
``gateway/amqp/model/room.py``): for core tests written in RabbitMQ's terms (``x-``
arguments, ``x-delay``, dead letters with ``x-death``)."""

from __future__ import annotations

from typing import Any

from logbus.core.vhost import VHost
from logbus.gateway.amqp.model import room


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

    def publish(self, *args: Any, **kw: Any) -> Any:
        return room.publish(self.vhost, *args, **kw)

    def __getattr__(self, name: str) -> Any:  # the rest: neutral already
        return getattr(self.vhost, name)
