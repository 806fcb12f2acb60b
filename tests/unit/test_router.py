"""Exchanges and bindings (logbus.core.routing: router, matchers) with RabbitMQ's semantics: each exchange
type against examples and, for topic and headers, against slow obvious reference
matchers; exchange-to-exchange graphs against a fixpoint reachability model; every
AMQP error with its reply code and text."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logbus.gateway.amqp.errors import REPLY_CODE_FOR, REPLY_NAMES
from logbus.core.routing.definitions import DIRECT, EXCHANGE, FANOUT, HEADERS, QUEUE, TOPIC, Binding
from logbus.core.routing.log_topics import DEFAULT_EXCHANGE_TOPIC
from logbus.core.routing.router import (
    AccessRefused,
    PreconditionFailed,
    Router,
    Refused,
)
from logbus.core.routing.topic_trie import TopicTrie
from logbus.core.types import freeze_arguments
from logbus.gateway.amqp.model.translate import header_match

VHOST = "/"  # exchange X is backed by topic X here (test_vhost_topics.py: other vhosts)


def router(*queues: str, **kw: Any) -> Router:
    r = Router(VHOST, **kw)
    for q in queues:
        r.add_queue(q)
    return r


def raises(exc: type[Refused], text: str, fn: Any, *args: Any, **kw: Any) -> Refused:
    with pytest.raises(exc) as info:
        fn(*args, **kw)
    e = info.value
    assert f"{REPLY_NAMES[REPLY_CODE_FOR[e.code]]} - {e}" == text  # as the AMQP gateway answers it
    return e


# -- reference matchers: slow and obvious --------------------------------------------------


def ref_words(s: str) -> list[str]:
    return [] if s == "" else s.split(".")


def ref_topic(pattern: list[str], words: list[str]) -> bool:
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(ref_topic(rest, words[i:]) for i in range(len(words) + 1))
    return bool(words) and head in ("*", words[0]) and ref_topic(rest, words[1:])


def ref_value(v: Any) -> tuple[str, Any]:
    """AMQP field values as RabbitMQ compares them: strings and bytes are binaries,
    booleans are not numbers."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, (int, float)):
        return ("number", v)
    if isinstance(v, str):
        return ("binary", v.encode())
    if isinstance(v, bytes):
        return ("binary", v)
    return ("other", v)


def ref_headers(args: dict[str, Any], headers: dict[str, Any]) -> bool:
    """RabbitMQ's merge over both tables sorted by key."""
    mode = args.get("x-match", "all")
    pattern = sorted(((k, v) for k, v in args.items()
                      if k != "x-match" and (mode.endswith("-with-x") or not k.startswith("x-"))),
                     key=lambda kv: kv[0])
    data = sorted(headers.items(), key=lambda kv: kv[0])
    all_match, any_match, j = True, False, 0
    for key, want in pattern:
        while j < len(data) and data[j][0] < key:
            j += 1
        if j < len(data) and data[j][0] == key and (
                want is None or ref_value(want) == ref_value(data[j][1])):
            any_match = True
        else:
            all_match = False
    return all_match if mode.startswith("all") else any_match


def test_reference_topic_matcher_itself() -> None:
    assert ref_topic(ref_words("a.#"), ref_words("a"))
    assert ref_topic(ref_words("#"), ref_words(""))
    assert not ref_topic(ref_words("*"), ref_words(""))
    assert not ref_topic(ref_words("a.*"), ref_words("a"))


# -- direct, fanout, default ---------------------------------------------------------------


def test_direct_routes_on_the_exact_key() -> None:
    r = router("q1", "q2", "q3")
    r.declare("d", DIRECT)
    r.bind("d", "q1", "k")
    r.bind("d", "q2", "k")
    r.bind("d", "q3", "other")
    assert r.route("d", "k") == {"q1", "q2"}
    assert r.route("d", "other") == {"q3"}
    assert r.route("d", "K") == frozenset()
    assert r.route("d", "") == frozenset()


def test_forgotten_routes_are_found_again() -> None:
    """What a quiet broker does (core/quiet.py): the topic exchanges' cached routes go,
    and routing finds them again from the bindings."""
    r = router("q1", "q2")
    r.declare("t", TOPIC)
    r.bind("t", "q1", "a.*")
    r.bind("t", "q2", "#")
    assert r.route("t", "a.b") == {"q1", "q2"} and r.route("t", "c") == {"q2"}
    assert r.forget_routes() == 2 and r.forget_routes() == 0
    assert r.route("t", "a.b") == {"q1", "q2"} and r.forget_routes() == 1


def test_a_queue_bound_twice_stays_routed_until_its_last_binding_goes() -> None:
    r = router("q")
    r.declare("d", DIRECT)
    r.bind("d", "q", "k", {"a": 1})
    r.bind("d", "q", "k", {"a": 2})
    r.bind("d", "q", "k", {"a": 2})  # the same binding again: no-op
    assert len(r.bindings_from("d")) == 2
    assert r.route("d", "k") == {"q"}
    assert r.unbind("d", "q", "k", {"a": 1}).bindings == (Binding("d", "q", QUEUE, "k", (("a", 1),)),)
    assert r.route("d", "k") == {"q"}
    r.unbind("d", "q", "k", {"a": 2})
    assert r.route("d", "k") == frozenset()


def test_fanout_ignores_the_routing_key() -> None:
    r = router("q1", "q2")
    r.declare("f", FANOUT)
    assert r.route("f", "x") == frozenset()
    r.bind("f", "q1", "ignored")
    r.bind("f", "q2")
    assert r.route("f", "anything") == r.route("f", "") == {"q1", "q2"}
    r.unbind("f", "q1", "ignored")
    assert r.route("f", "x") == {"q2"}


def test_default_exchange_routes_to_the_queue_named_by_the_key() -> None:
    r = router("q1")
    assert r.route("", "q1") == {"q1"}
    assert r.route("", "nope") == frozenset()
    r.add_queue("q2")
    assert r.route("", "q2") == {"q2"}
    assert r.bindings_to("q2", implicit=True) == [Binding("", "q2", QUEUE, "q2")]
    assert r.bindings_to("q2") == []
    r.delete_queue("q1")
    assert r.route("", "q1") == frozenset()
    assert r.exchange("").log_topic == DEFAULT_EXCHANGE_TOPIC


@pytest.mark.parametrize("action", [
    lambda r: r.bind("", "q", "q"),
    lambda r: r.unbind("", "q", "q"),
    lambda r: r.bind("amq.direct", "", kind=EXCHANGE),
    lambda r: r.unbind("amq.direct", "", kind=EXCHANGE),
    lambda r: r.delete(""),
    lambda r: r.declare("", DIRECT),
    lambda r: r.declare("", passive=True),
])
def test_the_default_exchange_cannot_be_touched(action: Any) -> None:
    r = router("q")
    err = raises(AccessRefused, "ACCESS_REFUSED - operation not permitted on the default exchange",
                 action, r)
    assert err.code == "access_refused"
    assert r.route("", "q") == {"q"}


# -- topic ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("pattern", "key", "matches"), [
    ("a.b", "a.b", True), ("a.b", "a.b.c", False), ("a.*", "a.b", True), ("a.*", "a", False),
    ("a.*", "a.b.c", False), ("a.#", "a", True), ("a.#", "a.b.c", True), ("a.#", "b.a", False),
    ("#", "", True), ("#", "a.b", True), ("#.#", "", True), ("#.#", "a", True),
    ("*", "", False), ("*", "a", True), ("", "", True), ("", "a", False),
    ("#.b", "b", True), ("#.b", "a.a.b", True), ("#.b", "b.a", False),
    ("a.#.b", "a.b", True), ("a.#.b", "a.x.y.b", True), ("a.#.b", "a.b.c", False),
    ("*.#", "", False), ("#.*", "a", True), ("#.*.#", "", False),
    ("a..b", "a..b", True), ("a.*.b", "a..b", True), ("*", ".", False), ("*.*", ".", True),
    ("a.", "a", False), ("a.", "a.", True), ("a.*", "a.", True),
    ("*", "*", True), ("a", "*", False), ("#", "#", True), ("a.#", "a.#", True),
])
def test_topic_examples(pattern: str, key: str, matches: bool) -> None:
    assert ref_topic(ref_words(pattern), ref_words(key)) is matches
    r = router("q")
    r.declare("t", TOPIC)
    r.bind("t", "q", pattern)
    assert (r.route("t", key) == {"q"}) is matches


topic_words = st.sampled_from(["a", "b", "", "*", "#"])
topic_strings = st.lists(topic_words, max_size=5).map(".".join)


@given(st.lists(topic_strings, min_size=1, max_size=12), st.lists(topic_strings, max_size=12),
       st.data())
def test_topic_trie_matches_the_reference(patterns: list[str], keys: list[str],
                                          data: st.DataObject) -> None:
    r = router(*(f"q{i}" for i in range(len(patterns))))
    r.declare("t", TOPIC)
    for i, p in enumerate(patterns):
        r.bind("t", f"q{i}", p)

    def check(live: set[int]) -> None:
        for key in keys + patterns:
            want = {f"q{i}" for i in live if ref_topic(ref_words(patterns[i]), ref_words(key))}
            assert r.route("t", key) == want, (key, patterns)

    live = set(range(len(patterns)))
    check(live)
    for i in data.draw(st.lists(st.sampled_from(sorted(live)), unique=True)):
        r.unbind("t", f"q{i}", patterns[i])
        live.discard(i)
        check(live)


def test_topic_trie_values_are_a_multiset_and_removal_prunes() -> None:
    trie: TopicTrie[str] = TopicTrie()
    trie.add("a.#", "x")
    trie.add("a.#", "x")
    trie.add("a.*.c", "y")
    assert trie.match("a.b.c") == {"x", "y"}
    assert trie.remove("a.#", "x")
    assert trie.match("a") == {"x"}
    assert trie.remove("a.#", "x")
    assert not trie.remove("a.#", "x")
    assert not trie.remove("a.b", "y")
    assert trie.match("a.b.c") == {"y"}
    assert trie.remove("a.*.c", "y")
    assert trie.match("a.b.c") == set()
    assert trie._root.children == {}


def test_many_hashes_do_not_blow_up() -> None:
    """Without each (#-node, position) expanded once, this takes hours."""
    pattern = ".".join(["#", "a"] * 12 + ["b"])
    trie: TopicTrie[str] = TopicTrie()
    trie.add(pattern, "x")
    assert trie.match(".".join(["a"] * 40)) == set()
    assert trie.match(".".join(["a"] * 40 + ["b"])) == {"x"}


def test_topic_cache_follows_binding_changes() -> None:
    r = router("q1", "q2", topic_cache_size=2)
    r.declare("t", TOPIC)
    r.bind("t", "q1", "a.b")
    assert r.route("t", "a.b") == {"q1"}
    r.bind("t", "q2", "a.*")
    assert r.route("t", "a.b") == {"q1", "q2"}
    r.unbind("t", "q1", "a.b")
    assert r.route("t", "a.b") == {"q2"}
    for key in ["a.c", "a.d", "x", "a.b", "a.c"]:  # more keys than the cache holds
        assert r.route("t", key) == ({"q2"} if key.startswith("a.") else set())
    r.delete_queue("q2")
    assert r.route("t", "a.b") == frozenset()


# -- headers -------------------------------------------------------------------------------
# A headers binding's match is made from its arguments as the AMQP gateway makes it
# (x-match: gateway/amqp/model/translate.py) and handed to the router.


def hbind(r: Router, source: str, queue: str, key: str, args: dict[str, Any]) -> None:
    r.bind(source, queue, key, args, match=header_match(freeze_arguments(args)))



@pytest.mark.parametrize(("args", "headers", "matches"), [
    ({"a": 1, "b": "x"}, {"a": 1, "b": "x"}, True),
    ({"a": 1, "b": "x"}, {"a": 1}, False),
    ({"x-match": "all", "a": 1}, {"a": 1, "z": 9}, True),
    ({"x-match": "any", "a": 1, "b": 2}, {"b": 2}, True),
    ({"x-match": "any", "a": 1, "b": 2}, {"a": 2, "b": 1}, False),
    ({}, {}, True), ({"x-match": "any"}, {"a": 1}, False),
    ({"a": None}, {"a": "whatever"}, True), ({"a": None}, {}, False),
    ({"x-k": 1}, {}, True), ({"x-k": 1, "x-match": "all-with-x"}, {}, False),
    ({"x-k": 1, "x-match": "all-with-x"}, {"x-k": 1}, True),
    ({"x-k": 1, "a": 1, "x-match": "any"}, {"x-k": 1}, False),
    ({"x-k": 1, "a": 1, "x-match": "any-with-x"}, {"x-k": 1}, True),
    ({"x-match": "any-with-x"}, {"x-match": "any-with-x"}, False),
    ({"a": "eu"}, {"a": b"eu"}, True), ({"a": b"eu"}, {"a": "eu"}, True),
    ({"a": 1}, {"a": True}, False), ({"a": True}, {"a": 1}, False), ({"a": 1}, {"a": 1.0}, True),
    ({"a": 1}, {"a": "1"}, False), ({"a": "1"}, {"a": None}, False),
    ({"a": {"k": [1, 2]}}, {"a": {"k": [1, 2]}}, True), ({"a": [1]}, {"a": [2]}, False),
])
def test_headers_examples(args: dict[str, Any], headers: dict[str, Any], matches: bool) -> None:
    assert ref_headers(args, headers) is matches
    r = router("q")
    r.declare("h", HEADERS)
    hbind(r, "h", "q", "ignored", args)
    assert (r.route("h", "any key", headers) == {"q"}) is matches


header_keys = st.sampled_from(["a", "b", "c", "x-d"])
header_values = st.sampled_from([None, 0, 1, 1.0, True, False, "1", b"1", "a", b"a"])
binding_args = st.tuples(
    st.sampled_from([None, "all", "any", "all-with-x", "any-with-x"]),
    st.dictionaries(header_keys, header_values, max_size=4),
).map(lambda t: t[1] if t[0] is None else {"x-match": t[0], **t[1]})


@given(st.lists(binding_args, min_size=1, max_size=8),
       st.lists(st.dictionaries(st.sampled_from(["a", "b", "c", "x-d", "x-match"]), header_values,
                                max_size=5), min_size=1, max_size=8))
def test_headers_match_the_reference(bindings: list[dict[str, Any]],
                                     messages: list[dict[str, Any]]) -> None:
    r = router(*(f"q{i}" for i in range(len(bindings))))
    r.declare("h", HEADERS)
    for i, args in enumerate(bindings):
        hbind(r, "h", f"q{i}", "", args)
    for headers in messages:
        want = {f"q{i}" for i, args in enumerate(bindings) if ref_headers(args, headers)}
        assert r.route("h", "", headers) == want


def test_headers_without_headers_is_an_empty_table() -> None:
    r = router("all", "any")
    r.declare("h", HEADERS)
    hbind(r, "h", "all", "", {"x-match": "all"})
    hbind(r, "h", "any", "", {"x-match": "any", "a": None})
    assert r.route("h", "k", None) == {"all"}


@pytest.mark.parametrize(("x_match", "text"), [
    ("some", ("PRECONDITION_FAILED - Invalid x-match field value 'some'; "
              "expected all, any, all-with-x, or any-with-x")),
    (5, "PRECONDITION_FAILED - Invalid x-match field type int (value 5); expected longstr"),
])
def test_headers_binding_with_a_bad_x_match_is_refused(x_match: Any, text: str) -> None:
    r = router("q")
    r.declare("h", HEADERS)
    err = raises(PreconditionFailed, text, hbind, r, "h", "q", "", {"x-match": x_match})
    assert err.code == "precondition_failed"
    assert r.bindings_from("h") == [] and r.bindings_to("q") == []
    r.declare("d", DIRECT)
    r.bind("d", "q", "", {"x-match": x_match})  # only headers exchanges read x-match


# -- exchange to exchange, alternate exchanges ---------------------------------------------


def test_exchange_to_exchange_bindings_route_transitively() -> None:
    r = router("q1", "q2", "q3")
    r.declare("front", TOPIC)
    r.declare("mid", DIRECT, internal=True)
    r.declare("back", FANOUT)
    r.bind("front", "mid", "orders.#", kind=EXCHANGE)
    r.bind("mid", "back", "orders.eu", kind=EXCHANGE)
    r.bind("mid", "q1", "orders.eu")
    r.bind("back", "q2")
    r.bind("front", "q3", "#")
    assert r.route("front", "orders.eu") == {"q1", "q2", "q3"}
    assert r.route("front", "orders.us") == {"q3"}
    raises(AccessRefused, "ACCESS_REFUSED - cannot publish to internal exchange 'mid' in vhost '/'",
           r.route, "mid", "orders.eu")
    assert r.bindings_to("mid", EXCHANGE) == [Binding("front", "mid", EXCHANGE, "orders.#")]


def test_cycles_deliver_to_each_queue_once_and_terminate() -> None:
    r = router("qa", "qb", "qc")
    for name in ("xa", "xb", "xc"):
        r.declare(name, FANOUT)
        r.bind(name, "q" + name[1])
    r.bind("xa", "xb", kind=EXCHANGE)
    r.bind("xb", "xc", kind=EXCHANGE)
    r.bind("xc", "xa", kind=EXCHANGE)
    r.bind("xb", "xb", kind=EXCHANGE)
    for start in ("xa", "xb", "xc"):
        assert r.route(start) == {"qa", "qb", "qc"}


def test_alternate_exchange_takes_what_nothing_else_matched() -> None:
    r = router("q", "unrouted")
    r.declare("ae", FANOUT)
    r.bind("ae", "unrouted")
    r.declare("x", DIRECT, arguments={"alternate-exchange": "ae"})
    r.bind("x", "q", "known")
    assert r.exchange("x").alternate == "ae"
    assert r.route("x", "known") == {"q"}
    assert r.route("x", "unknown") == {"unrouted"}
    r.delete("ae")
    assert r.route("x", "unknown") == frozenset()


def test_alternate_exchanges_apply_per_exchange_and_cycles_end() -> None:
    r = router("q1", "q2")
    r.declare("a1", DIRECT, arguments={"alternate-exchange": "a2"})
    r.declare("a2", DIRECT, arguments={"alternate-exchange": "a1"})
    assert r.route("a1", "k") == frozenset()
    r.declare("x", DIRECT)
    r.bind("x", "a1", "k", kind=EXCHANGE)  # x matched a1, so only a1's alternate applies
    r.bind("a2", "q1", "k")
    assert r.route("x", "k") == {"q1"}
    r.bind("a1", "q2", "k")
    assert r.route("x", "k") == {"q2"}


fanout_graphs = st.tuples(
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), max_size=10),  # exchange edges
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), max_size=6),  # queue bindings
    st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=5, max_size=5),  # alternates
)


@given(fanout_graphs)
def test_exchange_graphs_match_a_reachability_model(graph: Any) -> None:
    edges, queue_bindings, alternates = graph
    r = router(*(f"q{i}" for i in range(4)))
    for i, ae in enumerate(alternates):
        r.declare(f"x{i}", FANOUT, arguments=None if ae is None else {"alternate-exchange": f"x{ae}"})
    for src, dst in edges:
        r.bind(f"x{src}", f"x{dst}", kind=EXCHANGE)
    for src, q in queue_bindings:
        r.bind(f"x{src}", f"q{q}")
    bound = {src for src, _ in edges} | {src for src, _ in queue_bindings}
    nexts = {i: {d for s, d in edges if s == i} if i in bound
             else ({alternates[i]} if alternates[i] is not None and alternates[i] < 5 else set())
             for i in range(5)}
    for start in range(5):
        reached = {start}
        while True:
            more = reached | {n for i in reached for n in nexts[i]}
            if more == reached:
                break
            reached = more
        want = {f"q{q}" for s, q in queue_bindings if s in reached}
        assert r.route(f"x{start}") == want


def test_headers_free_says_whether_headers_can_change_a_route() -> None:
    r = Router()
    r.add_queue("q")
    r.declare("t", "topic")
    r.declare("h", "headers")
    r.declare("d", "direct", arguments={"alternate-exchange": "h"})
    assert r.headers_free("t") and not r.headers_free("h") and not r.headers_free("d")
    assert not r.headers_free("amq.headers") and r.headers_free("amq.topic")
    r.bind("t", "d", "k", kind=EXCHANGE)  # t -> d -> (alternate) h
    assert not r.headers_free("t")
    r.unbind("t", "d", "k", kind=EXCHANGE)
    assert r.headers_free("t")
    r.delete("h")
    assert r.headers_free("d")  # its alternate is gone
