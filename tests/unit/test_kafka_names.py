"""The Kafka names of logbus topics (gateway/kafka/names.py) and their rewrite in requests
and responses (gateway/kafka/topic_fields.py).

The oracle for "Kafka accepts it" is kafka-python's own ``ensure_valid_topic_name``, the
check a client makes before it sends a topic name."""

from __future__ import annotations

import string

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import (
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.util import ensure_valid_topic_name

from logbus.core.errors import InvalidTopicName
from logbus.core.log.topic_config import validate_topic_name
from logbus.gateway.kafka import admin, configs, groups, records_admin
from logbus.gateway.kafka.handlers import KafkaHandlers
from logbus.gateway.kafka.names import from_kafka, is_kafka_legal, to_kafka
from logbus.gateway.kafka.topic_fields import (
    NAME,
    NAMES,
    RESOURCE,
    STRUCTS,
    Unmapped,
    places,
    rename_request,
    rename_response,
)

KAFKA_ALPHABET = string.ascii_letters + string.digits + "._-"
kafka_text = st.text(alphabet=KAFKA_ALPHABET, max_size=260)
any_text = st.text(max_size=260)


def kafka_accepts(name: str) -> bool:
    try:
        ensure_valid_topic_name(name)
    except ValueError:
        return False
    return True


def logbus_accepts(name: str) -> bool:
    try:
        validate_topic_name(name)
    except InvalidTopicName:
        return False
    return True


# -- names.py ----------------------------------------------------------------------------


@given(st.one_of(any_text, kafka_text))
@example("%DLQ%proc")
@example("orders in")
@example("logbus-dlq-x")
@example("logbus-x-abc")
@example("%DLQ%")
@example("%DLQ%a b")
@example("a_b")
@settings(max_examples=2000)
def test_every_name_round_trips_through_a_name_kafka_accepts(name: str) -> None:
    alias = to_kafka(name)
    if alias is None:
        return
    assert kafka_accepts(alias) and is_kafka_legal(alias)
    assert from_kafka(alias) == name


@given(kafka_text)
@example("logbus-x-_25DLQ_25proc")
@example("logbus-x-orders")
@example("logbus-x-_4F")
@example("logbus-x-_2f")
@example("logbus-x-_C3")
@example("logbus-x-__41")
@example("logbus-dlq-")
@settings(max_examples=2000)
def test_a_kafka_name_names_at_most_one_topic(kafka_name: str) -> None:
    name = from_kafka(kafka_name)
    assert name is None or to_kafka(name) == kafka_name
    assert is_kafka_legal(kafka_name) == kafka_accepts(kafka_name)


@given(any_text, any_text)
def test_no_two_topics_share_a_kafka_name(a: str, b: str) -> None:
    if a != b and to_kafka(a) is not None:
        assert to_kafka(a) != to_kafka(b)


@given(kafka_text)
def test_names_kafka_accepts_are_their_own_kafka_names(name: str) -> None:
    if kafka_accepts(name) and not name.startswith(("logbus-dlq-", "logbus-x-")):
        assert to_kafka(name) == name
        assert from_kafka(name) == name


@given(st.text(alphabet=KAFKA_ALPHABET, min_size=1, max_size=238))
def test_a_dead_letter_topic_gets_a_readable_name(group: str) -> None:
    assert to_kafka(f"%DLQ%{group}") == f"logbus-dlq-{group}"
    assert from_kafka(f"logbus-dlq-{group}") == f"%DLQ%{group}"


def test_the_documented_examples() -> None:
    assert to_kafka("%DLQ%proc") == "logbus-dlq-proc"
    assert to_kafka("orders") == "orders"
    assert to_kafka("orders in") == "logbus-x-orders_20in"
    assert to_kafka("%DLQ%a b") == "logbus-x-_25DLQ_25a_20b"
    assert to_kafka("grüße") == "logbus-x-gr_C3_BC_C3_9Fe"
    assert to_kafka("a_b c") == "logbus-x-a_5Fb_20c"
    assert to_kafka("logbus-dlq-x") == "logbus-x-logbus-dlq-x"
    for unnamed in ("logbus-x-orders", "logbus-x-_25DLQ_25proc", "logbus-x-_4F", "logbus-x-_2f", "%DLQ%proc",
                    "orders in", "", ".", ".."):
        assert from_kafka(unnamed) is None, unnamed


@given(st.text(alphabet=st.characters(max_codepoint=127), min_size=1, max_size=80).filter(logbus_accepts))
def test_every_ascii_name_of_up_to_80_characters_has_a_kafka_name(name: str) -> None:
    assert to_kafka(name) is not None


# -- topic_fields.py ---------------------------------------------------------------------


def all_apis() -> dict[int, tuple[type, type]]:
    h = KafkaHandlers(None, None, None, None, None)  # type: ignore[arg-type]
    for module in (groups, admin, configs, records_admin):
        module.install(h)
    return {key: (req, resp) for key, (req, resp, _, _) in h.supported.items()}


def summary(message_cls: type) -> list[str]:
    out = []

    def walk(where: tuple, path: str) -> None:
        for p in where:
            if p.kind in (NAME, NAMES, RESOURCE):
                out.append(f"{path}{p.attr}:{p.kind}")
            else:
                walk(p.inner, f"{path}{p.attr}{'[]' if p.kind == STRUCTS else ''}.")

    walk(places(message_cls), "")
    return out


EXPECTED = {  # api key: topic names in the request, in the response
    0: (["topic_data[].name:name"], ["responses[].name:name"]),
    1: (["topics[].topic:name", "forgotten_topics_data[].topic:name"], ["responses[].topic:name"]),
    2: (["topics[].name:name"], ["topics[].name:name"]),
    3: (["topics[].name:name"], ["topics[].name:name"]),
    8: (["topics[].name:name"], ["topics[].name:name"]),
    9: (["topics[].name:name", "groups[].topics[].name:name"], ["topics[].name:name", "groups[].topics[].name:name"]),
    19: (["topics[].name:name"], ["topics[].name:name"]),
    20: (["topics[].name:name", "topic_names:names"], ["responses[].name:name"]),
    21: (["topics[].name:name"], ["topics[].name:name"]),
    32: (["resources[].resource_name:resource"], ["results[].resource_name:resource"]),
    33: (["resources[].resource_name:resource"], ["responses[].resource_name:resource"]),
    37: (["topics[].name:name"], ["results[].name:name"]),
    44: (["resources[].resource_name:resource"], ["responses[].resource_name:resource"]),
}


def test_every_api_has_its_topic_names_found_in_the_schemas() -> None:
    """A new API is covered by its schema; this lists what each gets, so a change shows."""
    got = {key: (summary(req), summary(resp)) for key, (req, resp) in all_apis().items()}
    assert {k: v for k, v in got.items() if v != ([], [])} == EXPECTED


def test_a_request_is_renamed_in_place() -> None:
    T = MetadataRequest.MetadataRequestTopic
    req = MetadataRequest(topics=[T(name="logbus-dlq-g"), T(name="plain"), T(name="%DLQ%g"), T(name="logbus-x-x")],
                          allow_auto_topic_creation=True)
    rename_request(req)
    names = [t.name for t in req.topics]
    assert names[:2] == ["%DLQ%g", "plain"]
    assert all(isinstance(n, Unmapped) and n.startswith("/") for n in names[2:])
    assert [n.kafka for n in names[2:]] == ["%DLQ%g", "logbus-x-x"]
    assert "illegal" in names[2].reason and "names no logbus topic" in names[3].reason
    dt = DeleteTopicsRequest(topic_names=["logbus-x-a_20b", "x"], timeout_ms=1)
    rename_request(dt)
    assert dt.topic_names == ["a b", "x"]
    ct = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name="logbus-dlq-g", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=1, validate_only=False)
    rename_request(ct)
    assert ct.topics[0].name == "%DLQ%g"


def test_a_response_is_renamed_and_topics_without_a_kafka_name_are_left_out() -> None:
    T = MetadataResponse.MetadataResponseTopic
    too_long = "é" * 120
    assert to_kafka(too_long) is None
    resp = MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=0,
                            topics=[T(error_code=0, name=n, is_internal=False, partitions=[])
                                    for n in ("%DLQ%g", too_long, "a b", Unmapped("x y"))])
    rename_response(resp)
    assert [t.name for t in resp.topics] == ["logbus-dlq-g", "logbus-x-a_20b", "x y"]


@pytest.mark.parametrize("resource_type, expected", [(2, "logbus-dlq-g"), (4, "%DLQ%g")])
def test_only_topic_resources_are_renamed(resource_type: int, expected: str) -> None:
    R = DescribeConfigsResponse.DescribeConfigsResult
    resp = DescribeConfigsResponse(throttle_time_ms=0, results=[
        R(error_code=0, error_message=None, resource_type=resource_type, resource_name="%DLQ%g", configs=[])])
    rename_response(resp)
    assert resp.results[0].resource_name == expected
    req = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=resource_type, resource_name="logbus-dlq-g", configuration_keys=None)])
    rename_request(req)
    assert req.resources[0].resource_name == ("%DLQ%g" if resource_type == 2 else "logbus-dlq-g")
