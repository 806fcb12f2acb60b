"""Router: bindings with a filter (``Binding.filter``; AMQP's ``x-filter-tag``,
``x-filter-sql`` arguments, translated as the AMQP gateway does) answer as candidates,
(queue, filter), for the caller to keep per message; everything else routes as before."""

from __future__ import annotations

import pytest

from logbus.core.errors import PreconditionFailed
from typing import Any

from logbus.core.routing.definitions import EXCHANGE, QUEUE
from logbus.core.routing.router import Router
from logbus.core.types import freeze_arguments
from logbus.gateway.amqp.model.translate import binding_filter, header_match

SQL = {"x-filter-sql": "temp > 30"}


def router(*queues: str) -> Router:
    r = Router()
    for q in queues:
        r.add_queue(q)
    return r


def bind(r: Router, source: str, destination: str, key: str = "", arguments: dict[str, Any] | None = None,
         kind: Any = QUEUE) -> None:
    args, spec = binding_filter(arguments, to_queue=kind == QUEUE)
    headers = r.has_exchange(source) and r.exchange(source).kind == "headers"
    r.bind(source, destination, key, args, kind=kind, filter=spec,
           match=header_match(freeze_arguments(args)) if headers else None)


def take(r: Router, exchange: str, key: str, props: dict[str, object], tag: str | None = None,
         headers: dict[str, object] | None = None) -> set[str]:
    queues, candidates = r.route_filtered(exchange, key, headers)
    return set(queues) | {q for q, f in candidates if f.matches(tag, lambda: props)}


@pytest.mark.parametrize(("kind", "key", "binding_key"), [
    ("direct", "k", "k"), ("fanout", "k", ""), ("topic", "a.b.c", "a.#"),
])  # fmt: skip
def test_candidates_per_exchange_type(kind: str, key: str, binding_key: str) -> None:
    r = router("hot", "all")
    r.declare("x", kind)
    bind(r, "x", "hot", binding_key, SQL)
    bind(r, "x", "all", binding_key)
    assert r.route("x", key) == {"all"}  # the plain answer leaves filtered bindings out
    assert take(r, "x", key, {"temp": 31}) == {"hot", "all"}
    assert take(r, "x", key, {"temp": 30}) == {"all"}
    assert take(r, "x", "other.key" if kind != "fanout" else key, {"temp": 31}) == (
        set() if kind != "fanout" else {"hot", "all"})


def test_headers_exchange_matches_first_then_filters() -> None:
    r = router("q")
    r.declare("h", "headers")
    bind(r, "h", "q", "", {"x-match": "all", "kind": "reading", **SQL})
    assert take(r, "h", "", {"temp": 31}, headers={"kind": "reading"}) == {"q"}
    assert take(r, "h", "", {"temp": 31}, headers={"kind": "alarm"}) == set()
    assert take(r, "h", "", {"temp": 1}, headers={"kind": "reading"}) == set()


def test_a_queue_reached_without_a_filter_is_no_candidate() -> None:
    r = router("q")
    r.declare("x", "topic")
    bind(r, "x", "q", "a.*", SQL)
    bind(r, "x", "q", "a.b")
    queues, candidates = r.route_filtered("x", "a.b")
    assert queues == {"q"} and candidates == ()
    queues, candidates = r.route_filtered("x", "a.c")
    assert queues == frozenset() and [q for q, _ in candidates] == ["q"]


def test_two_filtered_bindings_to_one_queue_either_takes_it() -> None:
    r = router("q")
    r.declare("x", "fanout")
    bind(r, "x", "q", "", {"x-filter-tag": "A"})
    bind(r, "x", "q", "", {"x-filter-tag": "B"})
    assert take(r, "x", "", {}, tag="B") == {"q"}
    assert take(r, "x", "", {}, tag="C") == set()


def test_unbind_and_queue_delete_remove_the_filtered_binding() -> None:
    r = router("q", "p")
    r.declare("x", "direct")
    bind(r, "x", "q", "k", SQL)
    bind(r, "x", "p", "k", {"x-filter-tag": "*"})
    assert len(r.bindings_from("x")) == 2
    args, spec = binding_filter(SQL, to_queue=True)
    r.unbind("x", "q", "k", args, filter=spec)
    assert [q for q, _ in r.route_filtered("x", "k")[1]] == ["p"]
    r.delete_queue("p")
    assert r.route_filtered("x", "k") == (frozenset(), ())
    assert r.bindings_from("x") == []


def test_through_exchange_bindings() -> None:
    r = router("q")
    r.declare("front", "fanout")
    r.declare("back", "direct")
    bind(r, "front", "back", "", kind=EXCHANGE)
    bind(r, "back", "q", "k", SQL)
    assert take(r, "front", "k", {"temp": 40}) == {"q"}
    assert take(r, "front", "k", {"temp": 4}) == set()


def test_a_filtered_binding_counts_as_a_route_for_the_alternate_exchange() -> None:
    r = router("q", "lost")
    r.declare("ae", "fanout")
    bind(r, "ae", "lost", "")
    r.declare("x", "direct", arguments={"alternate-exchange": "ae"})
    bind(r, "x", "q", "k", SQL)
    assert take(r, "x", "k", {"temp": 1}) == set()  # matched a binding: not the alternate's
    assert take(r, "x", "other", {"temp": 99}) == {"lost"}


@pytest.mark.parametrize(("arguments", "words"), [
    ({"x-filter-sql": "temp >"}, "x-filter-sql: expected a name"),
    ({"x-filter-tag": ""}, "x-filter-tag: an empty tag expression"),
    ({"x-filter-sql": 1}, "must be text"),
])  # fmt: skip
def test_bad_filters_are_refused(arguments: dict[str, object], words: str) -> None:
    r = router("q")
    r.declare("x", "direct")
    with pytest.raises(PreconditionFailed, match=words):
        bind(r, "x", "q", "k", arguments)
    assert r.bindings_from("x") == []


def test_no_filter_on_exchange_to_exchange_bindings() -> None:
    r = router()
    r.declare("a", "direct")
    r.declare("b", "direct")
    with pytest.raises(PreconditionFailed, match="bindings to queues"):
        bind(r, "a", "b", "k", SQL, kind=EXCHANGE)
    with pytest.raises(PreconditionFailed, match="bindings to queues"):
        r.bind("a", "b", "k", kind=EXCHANGE, filter=binding_filter(SQL, to_queue=True)[1])
