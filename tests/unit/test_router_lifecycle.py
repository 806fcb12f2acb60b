"""Exchange lifecycle (logbus.core.routing.router) with RabbitMQ's semantics: predeclared
exchanges, declare and redeclare, bind errors, delete and auto-delete cascades, and the
log topics behind exchanges. Routing itself is in test_router.py."""

from __future__ import annotations

from typing import Any

import pytest

from logbus.core.errors import LogbusError
from logbus.core.routing.definitions import (
    DIRECT,
    EXCHANGE,
    FANOUT,
    HEADERS,
    QUEUE,
    TOPIC,
    Binding,
    ExchangeDef,
    Removed,
)
from logbus.core.routing.log_topics import DEFAULT_EXCHANGE_TOPIC
from logbus.core.routing.router import (
    AccessRefused,
    Unsupported,
    NotFound,
    PreconditionFailed,
)
from tests.unit.test_router import raises, router

# -- declare, delete, lifecycle ------------------------------------------------------------


def test_predeclared_exchanges() -> None:
    r = router()
    kinds = {d.name: d.kind for d in r.exchanges()}
    assert kinds == {"": DIRECT, "amq.direct": DIRECT, "amq.fanout": FANOUT, "amq.topic": TOPIC,
                     "amq.headers": HEADERS, "amq.match": HEADERS}
    assert all(d.durable for d in r.exchanges())
    assert r.declare("amq.topic", TOPIC, durable=True) == ExchangeDef("amq.topic", TOPIC, durable=True)
    raises(PreconditionFailed, "PRECONDITION_FAILED - inequivalent arg 'type' for exchange "
           "'amq.direct' in vhost '/': received 'fanout' but current is 'direct'",
           r.declare, "amq.direct", FANOUT, durable=True)
    err = raises(AccessRefused, "ACCESS_REFUSED - deletion of system exchange 'amq.fanout' in "
                 "vhost '/' not allowed", r.delete, "amq.fanout")
    assert err.code == "access_refused"
    raises(AccessRefused, "ACCESS_REFUSED - exchange name 'amq.mine' contains reserved prefix "
           "'amq.*'", r.declare, "amq.mine", DIRECT)
    assert "amq.mine" not in {d.name for d in r.exchanges()}


def test_declare_is_idempotent_and_passive_declare_finds() -> None:
    r = router()
    d = r.declare("x", TOPIC, durable=True, arguments={"alternate-exchange": "ae", "other": [1]})
    assert d == ExchangeDef("x", TOPIC, True, False, False,
                            (("alternate-exchange", "ae"), ("other", (1,))))
    assert r.declare("x", TOPIC, durable=True, arguments={"alternate-exchange": "ae"}) == d
    assert r.declare("x", passive=True) == d
    err = raises(NotFound, "NOT_FOUND - no exchange 'y' in vhost '/'", r.declare, "y", passive=True)
    assert err.code == "not_found" and err.code == "not_found" and isinstance(err, LogbusError)


@pytest.mark.parametrize(("change", "arg", "received", "current"), [
    ({"kind": FANOUT}, "type", "'fanout'", "'direct'"),
    ({"durable": False}, "durable", "'false'", "'true'"),
    ({"auto_delete": True}, "auto_delete", "'true'", "'false'"),
    ({"internal": True}, "internal", "'true'", "'false'"),
    ({"arguments": {}}, "alternate-exchange", "none", "'ae'"),
    ({"arguments": {"alternate-exchange": "other"}}, "alternate-exchange", "'other'", "'ae'"),
    ({"topic": "t2"}, "topic", "'t2'", "'x'"),
])
def test_redeclare_with_other_properties_fails(change: dict[str, Any], arg: str, received: str,
                                               current: str) -> None:
    r = router()
    props: dict[str, Any] = {"kind": DIRECT, "durable": True,
                             "arguments": {"alternate-exchange": "ae"}}
    r.declare("x", **props)
    err = raises(PreconditionFailed, f"PRECONDITION_FAILED - inequivalent arg '{arg}' for "
                 f"exchange 'x' in vhost '/': received {received} but current is {current}",
                 r.declare, "x", **(props | change))
    assert err.code == "precondition_failed"
    assert r.declare("x", **props, topic="x").kind == DIRECT


def test_declare_errors() -> None:
    r = router()
    err = raises(Unsupported, "COMMAND_INVALID - unknown exchange type 'x-weird'",
                 r.declare, "x", "x-weird")
    assert err.code == "unsupported"
    raises(PreconditionFailed, "PRECONDITION_FAILED - invalid type 'int' for arg "
           "'alternate-exchange' in exchange 'x' in vhost '/'",
           r.declare, "x", DIRECT, arguments={"alternate-exchange": 7})
    raises(NotFound, "NOT_FOUND - no exchange 'x' in vhost '/'", r.exchange, "x")


def test_bind_errors() -> None:
    r = router("q")
    r.declare("x", DIRECT)
    raises(NotFound, "NOT_FOUND - no exchange 'nope' in vhost '/'", r.bind, "nope", "q")
    raises(NotFound, "NOT_FOUND - no queue 'nope' in vhost '/'", r.bind, "x", "nope")
    raises(NotFound, "NOT_FOUND - no exchange 'nope' in vhost '/'",
           r.bind, "x", "nope", kind=EXCHANGE)
    raises(NotFound, "NOT_FOUND - no exchange 'nope' in vhost '/'", r.bind, "nope", "nope")
    assert r.bindings() == []


def test_unbinding_what_is_not_there_is_no_error() -> None:
    r = router("q")
    r.declare("x", DIRECT)
    r.bind("x", "q", "k")
    assert r.unbind("x", "q", "other") == Removed()
    assert r.unbind("x", "gone", "k") == Removed()
    assert r.unbind("gone", "q", "k") == Removed()
    assert r.bindings() == [Binding("x", "q", QUEUE, "k")]


def test_route_to_a_missing_exchange() -> None:
    err = raises(NotFound, "NOT_FOUND - no exchange 'x' in vhost '/'", router().route, "x", "k")
    assert err.code == "not_found"


def test_delete_if_unused_and_delete_removes_bindings_both_ways() -> None:
    r = router("q")
    r.declare("up", FANOUT)
    r.declare("x", FANOUT)
    r.bind("up", "x", kind=EXCHANGE)
    r.bind("x", "q")
    raises(PreconditionFailed, "PRECONDITION_FAILED - exchange 'x' in vhost '/' in use",
           r.delete, "x", if_unused=True)
    removed = r.delete("x")
    assert set(removed.bindings) == {Binding("up", "x", EXCHANGE), Binding("x", "q")}
    assert removed.exchanges == (ExchangeDef("x", FANOUT),)
    assert r.bindings() == [] and r.bindings_to("q") == []
    assert r.route("up") == frozenset()
    assert r.delete("x") == Removed()
    assert r.delete("up", if_unused=True).exchanges == (ExchangeDef("up", FANOUT),)


def test_auto_delete_exchange_goes_with_its_last_binding() -> None:
    r = router("q1", "q2")
    r.declare("ad", DIRECT, auto_delete=True)
    r.bind("ad", "q1", "a")
    r.bind("ad", "q2", "b")
    assert r.unbind("ad", "q1", "a").exchanges == ()
    removed = r.unbind("ad", "q2", "b")
    assert removed.exchanges == (ExchangeDef("ad", DIRECT, auto_delete=True),)
    raises(NotFound, "NOT_FOUND - no exchange 'ad' in vhost '/'", r.exchange, "ad")
    r.declare("ad2", DIRECT, auto_delete=True)
    assert r.exchange("ad2").auto_delete  # never bound: stays
    r.declare("up", FANOUT)
    r.bind("ad2", "q1", "k")
    r.bind("up", "ad2", kind=EXCHANGE)
    assert r.unbind("up", "ad2", kind=EXCHANGE).exchanges == ()  # only bindings *from* it count
    assert r.route("up") == frozenset() and r.route("ad2", "k") == {"q1"}


def test_deleting_a_queue_removes_its_bindings_and_may_cascade() -> None:
    r = router("q", "keep")
    r.declare("top", FANOUT, auto_delete=True)
    r.declare("mid", FANOUT, auto_delete=True)
    r.declare("other", DIRECT)
    r.bind("top", "mid", kind=EXCHANGE)
    r.bind("mid", "q")
    r.bind("other", "q", "k")
    r.bind("other", "keep", "k")
    removed = r.delete_queue("q")
    assert set(removed.bindings) == {Binding("mid", "q"), Binding("top", "mid", EXCHANGE),
                                     Binding("other", "q", QUEUE, "k")}
    assert {d.name for d in removed.exchanges} == {"mid", "top"}
    assert not r.has_queue("q")
    assert r.route("other", "k") == {"keep"}
    assert {"other"} <= {d.name for d in r.exchanges()} and r.exchange_for_topic("top") is None
    raises(NotFound, "NOT_FOUND - no queue 'q' in vhost '/'", r.bind, "other", "q")
    assert r.delete_queue("q") == Removed()


def test_deleting_a_destination_exchange_auto_deletes_its_source() -> None:
    r = router()
    r.declare("src", FANOUT, auto_delete=True)
    r.declare("dst", FANOUT)
    r.bind("src", "dst", kind=EXCHANGE)
    r.bind("src", "src", kind=EXCHANGE)
    r.unbind("src", "src", kind=EXCHANGE)
    assert {d.name for d in r.delete("dst").exchanges} == {"dst", "src"}
    assert r.exchange_for_topic("src") is None


# -- log topics ----------------------------------------------------------------------------


def test_exchanges_are_backed_by_log_topics() -> None:
    r = router("q1", "q2")
    assert r.declare("orders", TOPIC).log_topic == "orders"
    r.declare("audit", FANOUT, internal=True, topic="audit-log")
    assert r.exchange_for_topic("audit-log") == r.exchange("audit")
    assert r.exchange_for_topic("audit") is None
    assert r.exchange_for_topic("amq.topic") == r.exchange("amq.topic")
    raises(PreconditionFailed, "PRECONDITION_FAILED - log topic 'orders' already backs "
           "exchange 'orders' in vhost '/'", r.declare, "other", DIRECT, topic="orders")
    r.bind("orders", "q1", "eu.#")
    r.bind("audit", "q2")
    assert r.route_log("orders", "eu.de", {}) == {"q1"}
    assert r.route_log("audit-log", "any") == {"q2"}  # a Kafka record: internal is no bar
    assert r.route_log("nobody", "k") == frozenset()
    assert r.route_log(DEFAULT_EXCHANGE_TOPIC, "q1") == {"q1"}
    r.declare("clicks", DIRECT, arguments={"alternate-exchange": "audit"})
    assert r.route_log("clicks", "unmatched") == {"q2"}
    r.delete("orders")
    assert r.declare("other", DIRECT, topic="orders").log_topic == "orders"
