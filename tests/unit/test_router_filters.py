"""Router: bindings with a filter (``x-filter-tag``, ``x-filter-sql``) answer as candidates,
(queue, filter), for the caller to keep per message; everything else routes as before."""

from __future__ import annotations

import pytest

from logbus.core.errors import PreconditionFailed
from logbus.core.routing.definitions import EXCHANGE
from logbus.core.routing.router import Router

SQL = {"x-filter-sql": "temp > 30"}


def router(*queues: str) -> Router:
    r = Router()
    for q in queues:
        r.add_queue(q)
    return r


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
    r.bind("x", "hot", binding_key, SQL)
    r.bind("x", "all", binding_key)
    assert r.route("x", key) == {"all"}  # the plain answer leaves filtered bindings out
    assert take(r, "x", key, {"temp": 31}) == {"hot", "all"}
    assert take(r, "x", key, {"temp": 30}) == {"all"}
    assert take(r, "x", "other.key" if kind != "fanout" else key, {"temp": 31}) == (
        set() if kind != "fanout" else {"hot", "all"})


def test_headers_exchange_matches_first_then_filters() -> None:
    r = router("q")
    r.declare("h", "headers")
    r.bind("h", "q", "", {"x-match": "all", "kind": "reading", **SQL})
    assert take(r, "h", "", {"temp": 31}, headers={"kind": "reading"}) == {"q"}
    assert take(r, "h", "", {"temp": 31}, headers={"kind": "alarm"}) == set()
    assert take(r, "h", "", {"temp": 1}, headers={"kind": "reading"}) == set()


def test_a_queue_reached_without_a_filter_is_no_candidate() -> None:
    r = router("q")
    r.declare("x", "topic")
    r.bind("x", "q", "a.*", SQL)
    r.bind("x", "q", "a.b")
    queues, candidates = r.route_filtered("x", "a.b")
    assert queues == {"q"} and candidates == ()
    queues, candidates = r.route_filtered("x", "a.c")
    assert queues == frozenset() and [q for q, _ in candidates] == ["q"]


def test_two_filtered_bindings_to_one_queue_either_takes_it() -> None:
    r = router("q")
    r.declare("x", "fanout")
    r.bind("x", "q", "", {"x-filter-tag": "A"})
    r.bind("x", "q", "", {"x-filter-tag": "B"})
    assert take(r, "x", "", {}, tag="B") == {"q"}
    assert take(r, "x", "", {}, tag="C") == set()


def test_unbind_and_queue_delete_remove_the_filtered_binding() -> None:
    r = router("q", "p")
    r.declare("x", "direct")
    r.bind("x", "q", "k", SQL)
    r.bind("x", "p", "k", {"x-filter-tag": "*"})
    assert len(r.bindings_from("x")) == 2
    r.unbind("x", "q", "k", SQL)
    assert [q for q, _ in r.route_filtered("x", "k")[1]] == ["p"]
    r.delete_queue("p")
    assert r.route_filtered("x", "k") == (frozenset(), ())
    assert r.bindings_from("x") == []


def test_through_exchange_bindings() -> None:
    r = router("q")
    r.declare("front", "fanout")
    r.declare("back", "direct")
    r.bind("front", "back", "", kind=EXCHANGE)
    r.bind("back", "q", "k", SQL)
    assert take(r, "front", "k", {"temp": 40}) == {"q"}
    assert take(r, "front", "k", {"temp": 4}) == set()


def test_a_filtered_binding_counts_as_a_route_for_the_alternate_exchange() -> None:
    r = router("q", "lost")
    r.declare("ae", "fanout")
    r.bind("ae", "lost", "")
    r.declare("x", "direct", arguments={"alternate-exchange": "ae"})
    r.bind("x", "q", "k", SQL)
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
        r.bind("x", "q", "k", arguments)
    assert r.bindings_from("x") == []


def test_no_filter_on_exchange_to_exchange_bindings() -> None:
    r = router()
    r.declare("a", "direct")
    r.declare("b", "direct")
    with pytest.raises(PreconditionFailed, match="bindings to queues"):
        r.bind("a", "b", "k", SQL, kind=EXCHANGE)
