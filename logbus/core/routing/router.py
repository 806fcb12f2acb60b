"""Exchanges and bindings of one virtual host: AMQP 0-9-1 routing with RabbitMQ's rules,
in memory. No I/O: the broker persists the definitions (frozen dataclasses,
core/routing/definitions.py) and calls ``route()`` on every publish.

Theory of operation
===================

**Model.** A ``Router`` holds exchanges by name, the names of the queues it was told
about, and explicit bindings ``source exchange -> destination`` (a queue, or an exchange
for exchange-to-exchange bindings). Each exchange owns a *matcher* for its type
(``MATCHERS``, core/routing/matchers.py), fed every binding added or removed; a reverse
index (destination -> bindings) makes deleting a queue or exchange cost only its own
bindings. The default exchange ``""`` is a direct matcher holding one implicit binding
per queue, by the queue's name. A delayed exchange (``ExchangeDef.delayed``) routes with
the matcher of its type; its publishes with a delay are routed when due (core/vhost.py).

**Routing.** The exchange's own match gives queues and destination exchanges. With no
destination exchange and no alternate exchange to consult, its queue set is the answer
(the hot path: two dict lookups, no allocation). Otherwise the exchange graph is walked
from there, each exchange visited at most once (so cycles end), and an exchange whose
own match is empty passes the message to its ``alternate-exchange``. Each queue is in
the answer once, however many paths reach it.

**Filters** (docs/filters.md). A binding to a queue with a filter (``Binding.filter``, a
``filters.FilterSpec``: tag expression, SQL92 selector) goes to a second matcher
of the exchange, under a name of its own; a match there is a *candidate* (queue,
filter) that the caller keeps only for a message the filter takes (``route_filtered``).
A binding with a filter counts as a route for the alternate exchange whatever the filter
says.

**Lifecycle.** Deleting an exchange removes its bindings both ways; removing the last
binding *from* an ``auto_delete`` exchange deletes it, which may cascade. Mutations
return what they removed (``Removed``), for a store to apply in one batch.

**Log topics** (docs/architecture.md section 4). Each exchange is backed by one log topic
(``ExchangeDef.topic``, default its own name; the default exchange's is
``DEFAULT_EXCHANGE_TOPIC``) and a topic backs at most one exchange, so a record a Kafka
producer appends to a topic routes through that exchange: ``route_log()``. That is in
vhost ``/``; in any other vhost the topic is ``vhost_topic(vhost, t)``
(core/routing/log_topics.py), so the same names in two vhosts never share a topic. A new
exchange whose topic would not be a valid topic name (over 249 bytes, ``/`` in the name,
...) is refused with 406.

Not here: policies, exchange plugins, stripping CR/LF from names, any protocol's
arguments (the AMQP gateway translates its ``x-`` arguments into these terms).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..errors import (  # noqa: F401  (re-exported)
    AccessRefused,
    Unsupported,
    NotFound,
    PreconditionFailed,
    ResourceLocked,  # noqa: F401
    Refused,  # noqa: F401
)
from ..errors import InvalidTopicName
from ..log.topic_config import validate_topic_name
from .definitions import (
    ALTERNATE_EXCHANGE,
    DIRECT,
    EXCHANGE,
    FANOUT,
    HEADERS,
    QUEUE,
    TOPIC,
    Arguments,
    Binding,
    DestKind,
    Destination,
    ExchangeDef,
    HeaderMatch,
    Removed,
    freeze_arguments,
    lookup,
)
from ...filters.message_filter import FilterSpec, MessageFilter
from .log_topics import DEFAULT_EXCHANGE_TOPIC, DEFAULT_VHOST, vhost_topic
from .matchers import EMPTY, MATCHERS, TOPIC_CACHE_SIZE, Matcher, TopicMatcher

Candidates = tuple[tuple[str, MessageFilter], ...]  # (queue, filter) of filtered bindings matched
NO_CANDIDATES: Final[Candidates] = ()

DEFAULT_EXCHANGE: Final = ""
PREDECLARED: Final = {"amq.direct": DIRECT, "amq.fanout": FANOUT, "amq.topic": TOPIC,
                      "amq.headers": HEADERS, "amq.match": HEADERS}
RESERVED_PREFIX: Final = "amq."


def _show(value: Any) -> str:
    if value is None:
        return "none"
    return f"'{str(value).lower() if isinstance(value, bool) else value}'"


@dataclass(slots=True, eq=False)
class _Exchange:
    definition: ExchangeDef
    matcher: Matcher
    alternate: str | None
    bindings: dict[Binding, None] = field(default_factory=dict)  # explicit, as source
    filtered: Matcher | None = None  # bindings with a filter, each under its own name
    filters: dict[Binding, tuple[str, Binding]] = field(default_factory=dict)  # binding -> (name, its stand-in)
    candidates: dict[str, tuple[str, MessageFilter]] = field(default_factory=dict)  # name -> (queue, filter)


class Router:
    """The exchanges, bindings and queue names of one virtual host."""

    def __init__(self, vhost: str = "/", *, topic_cache_size: int = TOPIC_CACHE_SIZE) -> None:
        self.vhost = vhost
        self.topic_cache_size = topic_cache_size
        self._exchanges: dict[str, _Exchange] = {}
        self._queues: set[str] = set()
        self._inbound: dict[Destination, dict[Binding, None]] = {}
        self._by_topic: dict[str, str] = {}
        self._changes = 0  # bumped by every change of exchanges and bindings
        self._headers_free: dict[str, tuple[int, bool]] = {}  # exchange -> (at _changes, answer)
        self._add(ExchangeDef(DEFAULT_EXCHANGE, DIRECT, durable=True,
                              topic=vhost_topic(vhost, DEFAULT_EXCHANGE_TOPIC)))
        for name, kind in PREDECLARED.items():
            self._add(ExchangeDef(name, kind, durable=True, topic=self._topic_of(name)))
        self._default = self._exchanges[DEFAULT_EXCHANGE].matcher

    def forget_routes(self) -> int:
        """Empty the topic exchanges' caches of routes (filled again as messages are
        routed); returns how many routes there were."""
        n = 0
        for x in self._exchanges.values():
            for m in (x.matcher, x.filtered):
                if isinstance(m, TopicMatcher):
                    n += m.forget_routes()
        return n

    def add_queue(self, name: str) -> None:
        if name not in self._queues:
            self._queues.add(name)
            self._default.add(Binding(DEFAULT_EXCHANGE, name, QUEUE, name))

    def has_queue(self, name: str) -> bool:
        return name in self._queues

    def delete_queue(self, name: str) -> Removed:
        """Forget a queue and its bindings (auto-delete exchanges may follow)."""
        removed: list[Binding | ExchangeDef] = []
        if name in self._queues:
            self._queues.remove(name)
            self._default.remove(Binding(DEFAULT_EXCHANGE, name, QUEUE, name))
            for b in list(self._inbound.get(Destination(QUEUE, name), ())):
                self._remove_binding(b, removed)
        return Removed.of(removed)

    def declare(self, name: str, kind: str = DIRECT, *, durable: bool = False,
                auto_delete: bool = False, internal: bool = False,
                arguments: Mapping[str, Any] | Arguments | None = None,
                topic: str | None = None, passive: bool = False, delayed: bool = False) -> ExchangeDef:
        """``exchange.declare``: the exchange as it now is (created if new)."""
        if passive:
            self._refuse_default(name)
            return self.exchange(name)
        if kind not in MATCHERS:
            raise Unsupported(f"unknown exchange type '{kind}'")
        self._refuse_default(name)
        if topic is None:
            topic = self._topic_of(name)
        wanted = ExchangeDef(name, kind, durable, auto_delete, internal,
                             freeze_arguments(arguments), topic, delayed)
        found = self._exchanges.get(name)
        if found is not None:
            self._assert_equivalent(found.definition, wanted)
            return found.definition
        if name.startswith(RESERVED_PREFIX):
            raise AccessRefused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
        ae = lookup(wanted.arguments, ALTERNATE_EXCHANGE)
        if ae is not None and not isinstance(ae, str):
            raise PreconditionFailed(f"invalid type '{type(ae).__name__}' for arg "
                                     f"'{ALTERNATE_EXCHANGE}' in {self._rs(EXCHANGE, name)}")
        owner = self._by_topic.get(wanted.log_topic)
        if owner is not None:
            raise PreconditionFailed(f"log topic '{wanted.log_topic}' already backs "
                                     f"{self._rs(EXCHANGE, owner)}")
        try:
            validate_topic_name(wanted.log_topic)
        except InvalidTopicName as exc:
            raise PreconditionFailed(f"{self._rs(EXCHANGE, name)} cannot be backed by log topic "
                                     f"'{wanted.log_topic}': {exc}") from None
        self._add(wanted)
        return wanted

    def topic_for(self, name: str) -> str:
        """The log topic a new exchange ``name`` declared here gets."""
        topic = self._topic_of(name)
        return name if topic is None else topic

    def _topic_of(self, name: str) -> str | None:
        """``ExchangeDef.topic`` for exchange ``name`` (None in vhost "/": its own name)."""
        return None if self.vhost == DEFAULT_VHOST else vhost_topic(self.vhost, name)

    def delete(self, name: str, *, if_unused: bool = False) -> Removed:
        """``exchange.delete``; deleting an exchange that does not exist succeeds."""
        self._refuse_default(name)
        if name.startswith(RESERVED_PREFIX):
            raise AccessRefused(f"deletion of system {self._rs(EXCHANGE, name)} not allowed")
        removed: list[Binding | ExchangeDef] = []
        x = self._exchanges.get(name)
        if x is not None:
            if if_unused and x.bindings:
                raise PreconditionFailed(f"{self._rs(EXCHANGE, name)} in use")
            self._drop(x, removed)
        return Removed.of(removed)

    def exchange(self, name: str) -> ExchangeDef:
        x = self._exchanges.get(name)
        if x is None:
            raise NotFound(f"no {self._rs(EXCHANGE, name)}")
        return x.definition

    def exchange_or_none(self, name: str) -> ExchangeDef | None:
        x = self._exchanges.get(name)
        return None if x is None else x.definition

    def has_exchange(self, name: str) -> bool:
        return name in self._exchanges

    def exchanges(self) -> list[ExchangeDef]:
        return [x.definition for x in self._exchanges.values()]

    def exchange_for_topic(self, topic: str) -> ExchangeDef | None:
        name = self._by_topic.get(topic)
        return None if name is None else self._exchanges[name].definition

    def bind(self, source: str, destination: str, routing_key: str = "",
             arguments: Mapping[str, Any] | Arguments | None = None, *,
             kind: DestKind = QUEUE, filter: FilterSpec | None = None,
             match: HeaderMatch | None = None) -> Binding:
        """``queue.bind`` (``kind=QUEUE``) or ``exchange.bind`` (``kind=EXCHANGE``);
        ``filter``: to a queue only; ``match``: what a headers exchange asks."""
        if filter is not None and kind != QUEUE:
            raise PreconditionFailed("a filter applies to bindings to queues, not to exchanges")
        b = self._binding(source, destination, routing_key, arguments, kind, filter, match)
        x = self._exchanges.get(source)
        if x is None:
            raise NotFound(f"no {self._rs(EXCHANGE, source)}")
        if destination not in (self._queues if kind == QUEUE else self._exchanges):
            raise NotFound(f"no {self._rs(kind, destination)}")
        if b not in x.bindings:
            f = self._filter_of(b)
            if f is None:
                x.matcher.add(b)
            else:
                self._add_filtered(x, b, f)
            x.bindings[b] = None
            self._inbound.setdefault(b.target, {})[b] = None
            self._changes += 1
        return b

    def has_binding(self, source: str, destination: str, routing_key: str = "",
                    arguments: Mapping[str, Any] | Arguments | None = None, *,
                    kind: DestKind = QUEUE, filter: FilterSpec | None = None,
                    match: HeaderMatch | None = None) -> bool:
        x = self._exchanges.get(source)
        return x is not None and self._binding(source, destination, routing_key, arguments, kind, filter,
                                               match) in x.bindings

    def _filter_of(self, b: Binding) -> MessageFilter | None:
        return None if b.filter is None else b.filter.filter

    def _add_filtered(self, x: _Exchange, b: Binding, f: MessageFilter) -> None:
        if x.filtered is None:
            kind = x.definition.routing_kind
            x.filtered = TopicMatcher(self.topic_cache_size) if kind == TOPIC else MATCHERS[kind]()
        name = f"{b.destination}\x00{id(b)}"
        stand_in = Binding(b.source, name, QUEUE, b.routing_key, b.arguments, match=b.match)
        x.filtered.add(stand_in)
        x.filters[b] = (name, stand_in)
        x.candidates[name] = (b.destination, f)

    def unbind(self, source: str, destination: str, routing_key: str = "",
               arguments: Mapping[str, Any] | Arguments | None = None, *,
               kind: DestKind = QUEUE, filter: FilterSpec | None = None,
               match: HeaderMatch | None = None) -> Removed:
        """``queue.unbind`` / ``exchange.unbind``; a missing binding is no error."""
        b = self._binding(source, destination, routing_key, arguments, kind, filter, match)
        removed: list[Binding | ExchangeDef] = []
        x = self._exchanges.get(source)
        if x is not None and b in x.bindings:
            self._remove_binding(b, removed)
        return Removed.of(removed)

    def bindings(self) -> list[Binding]:
        """Every explicit binding (the default exchange's are implicit)."""
        return [b for x in self._exchanges.values() for b in x.bindings]

    def bindings_from(self, exchange: str) -> list[Binding]:
        x = self._exchanges.get(exchange)
        return [] if x is None else list(x.bindings)

    def bindings_to(self, destination: str, kind: DestKind = QUEUE, *,
                    implicit: bool = False) -> list[Binding]:
        """Bindings to a queue or exchange; ``implicit`` adds a queue's default binding."""
        found = list(self._inbound.get(Destination(kind, destination), ()))
        if implicit and kind == QUEUE and destination in self._queues:
            found.insert(0, Binding(DEFAULT_EXCHANGE, destination, QUEUE, destination))
        return found

    def route(self, exchange: str, routing_key: str = "",
              headers: Mapping[str, Any] | None = None) -> frozenset[str]:
        """The queues a message published to ``exchange`` goes to (empty: unroutable),
        bindings with a filter left out (``route_filtered``)."""
        return self.route_filtered(exchange, routing_key, headers)[0]

    def route_filtered(self, exchange: str, routing_key: str = "",
                       headers: Mapping[str, Any] | None = None) -> tuple[frozenset[str], Candidates]:
        """The queues a message published to ``exchange`` goes to, and the candidates:
        (queue, filter) of the bindings with a filter it matches."""
        x = self._exchanges.get(exchange)
        if x is None:
            raise NotFound(f"no {self._rs(EXCHANGE, exchange)}")
        if x.definition.internal:
            raise AccessRefused(f"cannot publish to internal {self._rs(EXCHANGE, exchange)}")
        return self._route(x, routing_key, headers)

    def headers_free(self, exchange: str) -> bool:
        """Whether a message's headers cannot change where ``exchange`` routes it: no
        headers exchange is reachable from it (through exchange bindings or alternate
        exchanges). Remembered until the exchanges or bindings change."""
        hit = self._headers_free.get(exchange)
        if hit is not None and hit[0] == self._changes:
            return hit[1]
        seen, todo, free = {exchange}, [exchange], True
        while todo and free:
            x = self._exchanges.get(todo.pop())
            if x is None:
                continue
            if x.definition.routing_kind == HEADERS:
                free = False
                break
            nxt = [b.destination for b in x.bindings if b.destination_kind == EXCHANGE]
            if x.alternate is not None:
                nxt.append(x.alternate)
            for name in nxt:
                if name not in seen:
                    seen.add(name)
                    todo.append(name)
        self._headers_free[exchange] = (self._changes, free)
        return free

    def routes_topic(self, topic: str) -> bool:
        """Whether a record appended to ``topic`` can reach a queue: an exchange is
        behind it and has a binding or an alternate exchange."""
        name = self._by_topic.get(topic)
        if name is None:
            return False
        x = self._exchanges[name]
        return bool(x.bindings) or x.alternate is not None

    def route_log(self, topic: str, key: str = "",
                  headers: Mapping[str, Any] | None = None) -> frozenset[str]:
        """The queues a record appended to ``topic`` (by a Kafka producer) goes to,
        bindings with a filter left out (``route_log_filtered``)."""
        return self.route_log_filtered(topic, key, headers)[0]

    def route_log_filtered(self, topic: str, key: str = "",
                           headers: Mapping[str, Any] | None = None) -> tuple[frozenset[str], Candidates]:
        name = self._by_topic.get(topic)
        if name is None:
            return EMPTY, NO_CANDIDATES
        return self._route(self._exchanges[name], key, headers)

    def _route(self, x: _Exchange, routing_key: str,
               headers: Mapping[str, Any] | None) -> tuple[frozenset[str], Candidates]:
        queues, exchanges = x.matcher.match(routing_key, headers)
        if x.filtered is None:
            if not exchanges and (queues or x.alternate is None):
                return queues, NO_CANDIDATES
        return self._walk(x, routing_key, headers)

    def _walk(self, x: _Exchange, routing_key: str,
              headers: Mapping[str, Any] | None) -> tuple[frozenset[str], Candidates]:
        seen = {x.definition.name}
        todo = [x]
        found: set[str] = set()
        candidates: list[tuple[str, MessageFilter]] = []
        while todo:
            x = todo.pop()
            queues, exchanges = x.matcher.match(routing_key, headers)
            found.update(queues)
            matched = bool(queues or exchanges)
            if x.filtered is not None:
                names = x.filtered.match(routing_key, headers)[0]
                if names:
                    matched = True
                    candidates += [x.candidates[n] for n in names]
            if not matched and x.alternate is not None:
                exchanges = frozenset((x.alternate,))
            for name in exchanges:
                nxt = self._exchanges.get(name)
                if nxt is not None and name not in seen:
                    seen.add(name)
                    todo.append(nxt)
        return frozenset(found), tuple(c for c in candidates if c[0] not in found)

    def _rs(self, kind: str, name: str) -> str:
        return f"{kind} '{name}' in vhost '{self.vhost}'"

    def _refuse_default(self, name: str) -> None:
        if name == DEFAULT_EXCHANGE:
            raise AccessRefused("operation not permitted on the default exchange")

    def _binding(self, source: str, destination: str, routing_key: str,
                 arguments: Mapping[str, Any] | Arguments | None, kind: DestKind,
                 filter: FilterSpec | None = None, match: HeaderMatch | None = None) -> Binding:
        if kind == EXCHANGE:
            self._refuse_default(destination)
        self._refuse_default(source)
        return Binding(source, destination, kind, routing_key, freeze_arguments(arguments), filter, match)

    def _assert_equivalent(self, have: ExchangeDef, want: ExchangeDef) -> None:
        checks = [("type", want.kind, have.kind), ("delayed", want.delayed, have.delayed),
                  ("durable", want.durable, have.durable),
                  ("auto_delete", want.auto_delete, have.auto_delete),
                  ("internal", want.internal, have.internal),
                  (ALTERNATE_EXCHANGE, lookup(want.arguments, ALTERNATE_EXCHANGE),
                   lookup(have.arguments, ALTERNATE_EXCHANGE))]
        if want.topic is not None:
            checks.append(("topic", want.log_topic, have.log_topic))
        for arg, received, current in checks:
            if received != current or type(received) is not type(current):
                raise PreconditionFailed(
                    f"inequivalent arg '{arg}' for {self._rs(EXCHANGE, have.name)}: "
                    f"received {_show(received)} but current is {_show(current)}")

    def _add(self, definition: ExchangeDef) -> None:
        self._changes += 1
        kind = definition.routing_kind
        matcher = TopicMatcher(self.topic_cache_size) if kind == TOPIC else MATCHERS[kind]()
        self._exchanges[definition.name] = _Exchange(definition, matcher, definition.alternate)
        self._by_topic[definition.log_topic] = definition.name

    def _unlink(self, x: _Exchange, b: Binding, removed: list[Binding | ExchangeDef]) -> None:
        self._changes += 1
        del x.bindings[b]
        hit = x.filters.pop(b, None)
        if hit is None:
            x.matcher.remove(b)
        else:
            name, stand_in = hit
            assert x.filtered is not None
            x.filtered.remove(stand_in)
            del x.candidates[name]
        inbound = self._inbound[b.target]
        del inbound[b]
        if not inbound:
            del self._inbound[b.target]
        removed.append(b)

    def _remove_binding(self, b: Binding, removed: list[Binding | ExchangeDef]) -> None:
        x = self._exchanges[b.source]
        self._unlink(x, b, removed)
        if x.definition.auto_delete and not x.bindings:
            self._drop(x, removed)

    def _drop(self, x: _Exchange, removed: list[Binding | ExchangeDef]) -> None:
        """Delete an exchange: its bindings as source, then as destination (which may
        auto-delete their sources), then itself."""
        self._changes += 1
        del self._exchanges[x.definition.name]
        del self._by_topic[x.definition.log_topic]
        for b in list(x.bindings):
            self._unlink(x, b, removed)
        for b in list(self._inbound.get(Destination(EXCHANGE, x.definition.name), ())):
            self._remove_binding(b, removed)
        removed.append(x.definition)
