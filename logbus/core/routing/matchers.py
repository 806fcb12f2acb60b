"""The matcher of each exchange type: fed every binding added to or removed from one
exchange, it answers which queues and exchanges a routing key (and headers) reach.

- ``direct``/``fanout``: routing key (fanout: always ``""``) -> destinations, each
  key's answer built on first use after a change. The default exchange ``""`` is a
  direct matcher holding one implicit binding per queue, by the queue's name.
- ``topic``: a ``TopicTrie`` (core/routing/topic_trie.py) over dot-separated words. Answers
  are cached per routing key (bounded, oldest out first); any change to the exchange's
  bindings drops the cache.
- ``headers``: each binding's ``HeaderMatch`` (all or any of some headers; a ``None``
  value means "present"; the AMQP gateway makes it from ``x-match`` and the binding's
  arguments). Values compare like RabbitMQ's tables: ``str`` and ``bytes`` are both
  binaries (a Kafka header matches an AMQP binding), ``True`` is not ``1``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol

from .definitions import (
    DIRECT, FANOUT, HEADERS, MATCH_EVERYTHING, QUEUE, TOPIC, Arguments, Binding, Destination, freeze,
)  # fmt: skip
from .topic_trie import TopicTrie, ref_count, unref_count

TOPIC_CACHE_SIZE: Final = 16384  # a route per device topic for a fleet of 10,000 (4,096 thrashed: FIFO under cyclic keys)

Targets = tuple[frozenset[str], frozenset[str]]  # (queues, exchanges)
EMPTY: Final[frozenset[str]] = frozenset()
NO_TARGETS: Final[Targets] = (EMPTY, EMPTY)
_MISSING: Final = object()


def _targets(dests: Iterable[Destination]) -> Targets:
    queues: set[str] = set()
    exchanges: set[str] = set()
    for kind, name in dests:
        (queues if kind == QUEUE else exchanges).add(name)
    return frozenset(queues), frozenset(exchanges)


class Matcher(Protocol):
    def add(self, b: Binding) -> None: ...
    def remove(self, b: Binding) -> None: ...
    def match(self, routing_key: str, headers: Mapping[str, Any] | None) -> Targets: ...


class DirectMatcher:
    fanout = False

    def __init__(self) -> None:
        self._keys: dict[str, dict[Destination, int]] = {}
        self._routes: dict[str, Targets] = {}

    def add(self, b: Binding) -> None:
        key = "" if self.fanout else b.routing_key
        ref_count(self._keys.setdefault(key, {}), b.target)
        self._routes.pop(key, None)

    def remove(self, b: Binding) -> None:
        key = "" if self.fanout else b.routing_key
        unref_count(self._keys[key], b.target)
        if not self._keys[key]:
            del self._keys[key]
        self._routes.pop(key, None)

    def match(self, routing_key: str, headers: Mapping[str, Any] | None) -> Targets:
        if self.fanout:
            routing_key = ""
        route = self._routes.get(routing_key)
        if route is None:
            counts = self._keys.get(routing_key)
            if counts is None:
                return NO_TARGETS
            route = self._routes[routing_key] = _targets(counts)
        return route


class FanoutMatcher(DirectMatcher):
    fanout = True


class TopicMatcher:
    def __init__(self, cache_size: int = TOPIC_CACHE_SIZE) -> None:
        self._trie: TopicTrie[Destination] = TopicTrie()
        self._cache: dict[str, Targets] = {}
        self._cache_size = cache_size

    def add(self, b: Binding) -> None:
        self._trie.add(b.routing_key, b.target)
        self._cache.clear()

    def remove(self, b: Binding) -> None:
        self._trie.remove(b.routing_key, b.target)
        self._cache.clear()

    def forget_routes(self) -> int:
        """Empty the cache of routes (a quiet broker's: ``core/quiet.py``); returns how
        many there were."""
        n = len(self._cache)
        self._cache = {}
        return n

    def match(self, routing_key: str, headers: Mapping[str, Any] | None) -> Targets:
        route = self._cache.get(routing_key)
        if route is None:
            route = _targets(self._trie.match(routing_key))
            if len(self._cache) >= self._cache_size:
                del self._cache[next(iter(self._cache))]
            self._cache[routing_key] = route
        return route


def _same(want: Any, have: Any) -> bool:
    if isinstance(want, tuple):
        have = freeze(have)
    elif isinstance(want, str) and isinstance(have, (bytes, bytearray)):
        want = want.encode("utf-8", "surrogatepass")
    elif isinstance(want, (bytes, bytearray)) and isinstance(have, str):
        have = have.encode("utf-8", "surrogatepass")
    return bool(want == have) and isinstance(want, bool) == isinstance(have, bool)


def headers_match(match_all: bool, counted: Arguments, headers: Mapping[str, Any]) -> bool:
    for key, want in counted:
        have = headers.get(key, _MISSING)
        if have is _MISSING:
            ok = False
        elif want is None:
            ok = True
        elif type(want) is type(have):
            ok = want == have
        else:
            ok = _same(want, have)
        if ok != match_all:
            return ok
    return match_all


class HeadersMatcher:
    def __init__(self) -> None:
        self._rules: dict[Binding, tuple[Destination, bool, Arguments]] = {}

    def add(self, b: Binding) -> None:
        m = b.match or MATCH_EVERYTHING
        self._rules[b] = (b.target, m.match_all, m.headers)

    def remove(self, b: Binding) -> None:
        del self._rules[b]

    def match(self, routing_key: str, headers: Mapping[str, Any] | None) -> Targets:
        h = headers if headers is not None else {}
        hits = [target for target, match_all, counted in self._rules.values()
                if headers_match(match_all, counted, h)]
        return _targets(hits) if hits else NO_TARGETS


MATCHERS: Final[dict[str, Callable[[], Matcher]]] = {
    DIRECT: DirectMatcher, FANOUT: FanoutMatcher, TOPIC: TopicMatcher, HEADERS: HeadersMatcher}
