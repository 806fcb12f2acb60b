"""Kafka ACLs as a view of logbus permissions (gateway/kafka/acls.py): expressions read as
alternatives, each alternative a binding, and back; what the model cannot hold refused."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from logbus.gateway.kafka.acls import (
    ALL,
    GROUP,
    LITERAL,
    MATCH,
    PREFIXED,
    TOPIC,
    AclRefused,
    Alt,
    Binding,
    alternatives,
    bindings,
    check_binding,
    matches,
    perms_for,
    target,
    topic_pattern,
    with_alternative,
    without_alternative,
)
from logbus.gateway.kafka.operations import ALTER, CREATE, DELETE, DESCRIBE, READ, WRITE


@dataclass
class P:
    user: str
    vhost: str
    configure: str = ""
    write: str = ""
    read: str = ""


names = st.text(min_size=1, max_size=12).filter(lambda s: "@" not in s and s != "*")
alts = st.one_of(st.just(Alt("any")), st.builds(Alt, st.sampled_from(["literal", "prefix"]), names))


def test_expressions_read_as_alternatives() -> None:
    assert [a for _, a in alternatives(".*")] == [Alt("any")]
    assert [a for _, a in alternatives("^orders$|^logs-|x[0-9]+")] == [Alt("literal", "orders"),
                                                                       Alt("prefix", "logs-"), None]
    assert [a for _, a in alternatives("^a\\.b$")] == [Alt("literal", "a.b")]
    assert [a for _, a in alternatives("^(a|b)$")] == [None]  # one alternative, not two
    assert [a for _, a in alternatives("^alice-")] == [Alt("prefix", "alice-")]  # RabbitMQ's usual form
    assert alternatives("") == []
    assert [a for _, a in alternatives("^\\\\$")] == [Alt("literal", "\\")]  # an escaped backslash, then the end
    assert [a for _, a in alternatives("^a\\$")] == [Alt("prefix", "a$")]  # an escaped "$": a character


@given(st.lists(alts, max_size=5), alts)
@example([], Alt("literal", "\\"))  # found by Hypothesis in CI: "^\\\\$" read as an escaped "$"
def test_adding_and_removing_an_alternative(existing: list[Alt], alt: Alt) -> None:
    expression = ""
    for a in existing:
        expression = with_alternative(expression, a)
    added = with_alternative(expression, alt)
    assert alt in [a for _, a in alternatives(added)]
    assert with_alternative(added, alt) == added  # once
    removed = without_alternative(added, alt)
    assert alt not in [a for _, a in alternatives(removed)]
    assert [a for _, a in alternatives(removed)] == [a for a in dict.fromkeys(existing) if a != alt]


@given(st.sampled_from(["/", "prod", "a/b"]), alts)
def test_a_topic_pattern_stands_for_its_vhost_and_alternative(vhost: str, alt: Alt) -> None:
    name, pattern = topic_pattern(vhost, alt)
    assert target(TOPIC, name, pattern) == (vhost, alt)


def test_permissions_as_bindings() -> None:
    got = set(bindings([P("guest", "/", ".*", ".*", ".*"), P("bob", "prod", "", "^orders$", ""),
                        P("ann", "/", "", "", "^in-|custom[0-9]")]))
    assert Binding(TOPIC, "*", LITERAL, "guest", READ) in got
    assert Binding(GROUP, "*", LITERAL, "guest", READ) in got and Binding(GROUP, "*", LITERAL, "guest", DELETE) in got
    assert {Binding(TOPIC, "*", LITERAL, "guest", op) for op in (CREATE, DELETE, ALTER)} <= got
    assert Binding(TOPIC, "prod@orders", LITERAL, "bob", WRITE) in got
    assert not any(b.user == "bob" and b.resource_type == GROUP for b in got)  # groups live in "/"
    assert {b for b in got if b.user == "ann"} == {Binding(TOPIC, "in-", PREFIXED, "ann", READ),
                                                   Binding(GROUP, "in-", PREFIXED, "ann", READ)}


def test_what_the_model_cannot_hold_is_refused() -> None:
    assert check_binding("User:alice", "*", 3) == "alice"
    for principal, host, permission in (("User:alice", "*", 2), ("User:alice", "10.0.0.1", 3),
                                        ("Group:ops", "*", 3), ("User:", "*", 3)):
        with pytest.raises(AclRefused):
            check_binding(principal, host, permission)
    with pytest.raises(AclRefused, match="administrator"):
        target(4, "kafka-cluster", LITERAL)
    with pytest.raises(AclRefused):
        target(TOPIC, "orders", MATCH)
    assert perms_for(TOPIC, ALL) == ("configure", "write", "read")
    assert perms_for(TOPIC, DESCRIBE) == ()
    assert perms_for(GROUP, READ) == ("read",)
    with pytest.raises(AclRefused):
        perms_for(GROUP, WRITE)


def test_filters_match_as_kafka() -> None:
    b = Binding(TOPIC, "logs-", PREFIXED, "ann", READ)
    assert matches(b, 1, None, 1, None, None, 1, 1)
    assert matches(b, TOPIC, "logs-2026", MATCH, "User:ann", "*", READ, 3)
    assert not matches(b, TOPIC, "logs-", LITERAL, None, None, 1, 1)
    assert matches(b, TOPIC, "logs-", PREFIXED, None, None, 1, 1)
    assert not matches(b, GROUP, None, 1, None, None, 1, 1)
    assert not matches(b, 1, None, 1, "User:bob", None, 1, 1)
    assert not matches(b, 1, None, 1, None, None, WRITE, 1)
    star = Binding(TOPIC, "*", LITERAL, "guest", READ)
    assert matches(star, TOPIC, "anything", MATCH, None, None, 1, 1)
