"""The log topics behind exchanges of vhosts other than "/" (core/routing/log_topics.py,
used by router.py): quote(vhost) + "@" + the topic the exchange would have in "/", and a
clear 406 for a name that cannot be a topic. Vhost "/" is unchanged: exchange X is topic
X (test_router_lifecycle.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logbus.core.log.topic_config import MAX_TOPIC_NAME, validate_topic_name
from logbus.core.routing.log_topics import DEFAULT_EXCHANGE_TOPIC, topic_exchange, vhost_topic
from logbus.core.routing.router import (
    PREDECLARED,
    PreconditionFailed,
    Router,
)


def test_vhost_topic_names() -> None:
    assert vhost_topic("/", "orders") == "orders"
    assert vhost_topic("/", DEFAULT_EXCHANGE_TOPIC) == "__amqp_default"
    assert vhost_topic("prod", "orders") == "prod@orders"
    assert vhost_topic("a/b", "orders") == "a%2Fb@orders"  # no "/" in a topic name
    assert vhost_topic("a@b", "c") == "a%40b@c"  # the first "@" always ends the vhost
    assert vhost_topic("é x", "q") == "%C3%A9%20x@q"
    assert vhost_topic("v", "x@y") == "v@x@y"  # vhost v, exchange x@y: unambiguous
    for vhost in ("prod", "a/b", "\\", "\x01", "é"):
        validate_topic_name(vhost_topic(vhost, "amq.topic"))


def test_a_topic_stands_for_the_exchange_of_the_vhost_in_its_name() -> None:
    """What permission checks read a log topic as (docs/security.md, "What names mean")."""
    assert topic_exchange("orders") == ("/", "orders")
    assert topic_exchange("__amqp_default") == ("/", "")  # the default exchange
    assert topic_exchange("prod@orders") == ("prod", "orders")
    assert topic_exchange("prod@__amqp_default") == ("prod", "")
    assert topic_exchange("a%2Fb@orders") == ("a/b", "orders")
    assert topic_exchange("%DLQ%billing") == ("/", "%DLQ%billing")
    assert topic_exchange("v@x@y") == ("v", "x@y")


@given(st.text(min_size=1).filter(lambda v: v != "/"), st.text())
def test_topic_exchange_inverts_vhost_topic(vhost: str, exchange_topic: str) -> None:
    """Every exchange of every vhost is read back from its topic's name, so a name
    cannot stand for an exchange of another vhost than the one whose topic it is."""
    expected = "" if exchange_topic == DEFAULT_EXCHANGE_TOPIC else exchange_topic
    assert topic_exchange(vhost_topic(vhost, exchange_topic)) == (vhost, expected)
    if "@" not in exchange_topic:
        assert topic_exchange(vhost_topic("/", exchange_topic)) == ("/", expected)


def test_a_router_names_every_exchange_of_its_vhost() -> None:
    r = Router("prod")
    assert r.exchange("").log_topic == "prod@__amqp_default"
    for name in PREDECLARED:
        assert r.exchange(name).log_topic == f"prod@{name}"
    assert r.declare("orders", "topic").log_topic == "prod@orders" == r.topic_for("orders")
    assert r.exchange_for_topic("prod@orders") == r.exchange("orders")
    assert r.exchange_for_topic("orders") is None
    assert r.declare("orders", "topic").topic == "prod@orders"  # redeclared: equivalent
    assert r.declare("x", "direct", topic="custom").log_topic == "custom"  # explicit topic wins
    assert Router("/").declare("orders", "topic").log_topic == "orders"
    assert Router("/").topic_for("orders") == "orders"


def test_an_exchange_whose_topic_cannot_be_named_is_refused_with_406() -> None:
    long_vhost = Router("v" * 200)
    err = pytest.raises(PreconditionFailed, long_vhost.declare, "e" * 60, "direct").value
    assert err.code == "precondition_failed"
    assert f"topic name longer than {MAX_TOPIC_NAME} bytes" in str(err)
    assert str(err).startswith(f"exchange '{'e' * 60}' in vhost '{'v' * 200}' "
                                     "cannot be backed by log topic")
    assert not long_vhost.has_exchange("e" * 60)
    long_vhost.declare("e" * 40, "direct")  # 200 + 1 + 40 bytes: fits
    root = Router("/")
    with pytest.raises(PreconditionFailed, match="may not be '.' or '..' or contain '/'"):
        root.declare("a/b", "fanout")  # a crash before: the topic was created after the exchange
    with pytest.raises(PreconditionFailed, match="longer than 249 bytes"):
        root.declare("x" * 250, "fanout")
    # escaped for the file system, non-ASCII names grow: the directory limit counts too
    with pytest.raises(PreconditionFailed, match="too long once escaped"):
        Router("é" * 30).declare("x", "direct")  # 182 bytes, 302 escaped again for the directory
