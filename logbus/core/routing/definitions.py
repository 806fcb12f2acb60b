"""Exchanges and bindings as values: the frozen definitions a router holds and a store
persists (``ExchangeDef``, ``Binding``, what a mutation ``Removed``), the exchange types
and the hashable form of declared arguments."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple

from ...filters.message_filter import FilterSpec

DIRECT, FANOUT, TOPIC, HEADERS = "direct", "fanout", "topic", "headers"
QUEUE: Final = "queue"
EXCHANGE: Final = "exchange"
DestKind = Literal["queue", "exchange"]

ALTERNATE_EXCHANGE: Final = "alternate-exchange"

Arguments = tuple[tuple[str, Any], ...]


def freeze(value: Any) -> Any:
    """A hashable copy of an argument value: tables become sorted pairs, lists tuples."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def freeze_arguments(arguments: Mapping[str, Any] | Arguments | None) -> Arguments:
    return freeze(dict(arguments)) if arguments else ()


def lookup(arguments: Arguments, key: str) -> Any:
    """The value of argument ``key``, None when it is absent."""
    return next((v for k, v in arguments if k == key), None)


@dataclass(frozen=True, slots=True)
class ExchangeDef:
    name: str
    kind: str = DIRECT
    durable: bool = False
    auto_delete: bool = False
    internal: bool = False
    arguments: Arguments = ()
    topic: str | None = None  # the backing log topic; None: the exchange's own name
    delayed: bool = False  # a publish with a delay is routed when due (RabbitMQ's delayed-message type)

    @property
    def log_topic(self) -> str:
        return self.name if self.topic is None else self.topic

    @property
    def alternate(self) -> str | None:
        ae = lookup(self.arguments, ALTERNATE_EXCHANGE)
        return ae if isinstance(ae, str) else None

    @property
    def routing_kind(self) -> str:
        """How it routes (a delayed exchange routes as its ``kind``, when due)."""
        return self.kind


@dataclass(frozen=True, slots=True)
class HeaderMatch:
    """What a binding of a headers exchange asks of a message's headers: every one of
    ``headers`` (``match_all``) or any; a None value asks only that the header is there."""

    match_all: bool = True
    headers: Arguments = ()


MATCH_EVERYTHING: Final = HeaderMatch()


class Destination(NamedTuple):
    kind: DestKind
    name: str


@dataclass(frozen=True, slots=True)
class Binding:
    source: str
    destination: str
    destination_kind: DestKind = QUEUE
    routing_key: str = ""
    arguments: Arguments = ()
    filter: FilterSpec | None = None  # to a queue: only what it takes is queued (docs/filters.md)
    match: HeaderMatch | None = None  # from a headers exchange: what it asks of the headers

    @property
    def target(self) -> Destination:
        return Destination(self.destination_kind, self.destination)


@dataclass(frozen=True, slots=True)
class Removed:
    """What one operation removed: bindings, and exchanges (explicit or auto-deleted)."""

    bindings: tuple[Binding, ...] = ()
    exchanges: tuple[ExchangeDef, ...] = ()

    @classmethod
    def of(cls, items: list[Binding | ExchangeDef]) -> Removed:
        return cls(tuple(i for i in items if isinstance(i, Binding)),
                   tuple(i for i in items if isinstance(i, ExchangeDef)))
