"""Topics Kafka clients cannot name, reached through their Kafka names
(docs/kafka.md, "Topic names"), against a real ``logbus serve``: kafka-python and
confluent-kafka list and consume a topic made over HTTP with a space in its name and a
pop group's ``%DLQ%`` topic; a produce to an alias lands in the logbus topic; a
consumer group commits offsets under an alias; a Kafka name that names no topic is refused."""

from __future__ import annotations

import time
from typing import Any, Iterator
from urllib.parse import quote

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import InvalidTopicError
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from tests.integration.mgmt import Mgmt, Reply
from tests.kafka_wire import Wire
from tests.serverproc import LogbusServer, module_server

SPACED, SPACED_ALIAS = "orders in", "logbus-x-orders_20in"
DLQ, DLQ_ALIAS = "%DLQ%billing", "logbus-dlq-billing"
INVALID_TOPIC_EXCEPTION = 17


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "kafka-names", args=["--default-flush", "none"])


def call(server: LogbusServer, method: str, path: str, body: Any = None) -> Reply:
    return Mgmt(server).call(method, path, body)


def topic_info(server: LogbusServer, name: str) -> dict[str, Any] | None:
    reply = call(server, "GET", "/api/topics/" + quote(name, safe=""))
    if reply.status == 404:
        return None
    assert reply.status == 200, reply
    info: dict[str, Any] = reply.json()
    return info


def made_over_http(server: LogbusServer, name: str, values: list[str]) -> None:
    if topic_info(server, name) is None:
        assert call(server, "POST", "/api/topics", {"name": name}).status == 201
    reply = call(server, "POST", f"/api/topics/{quote(name, safe='')}/messages",
                 {"messages": [{"value": v} for v in values]})
    assert reply.status == 200, reply


def read_kafka_python(server: LogbusServer, kafka_name: str) -> list[Any]:
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False,
                      consumer_timeout_ms=3000)
    try:
        tp = TopicPartition(kafka_name, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        return list(c)
    finally:
        c.close()


def test_kafka_python_lists_and_consumes_aliased_topics(server: LogbusServer) -> None:
    made_over_http(server, SPACED, ["a", "b"])
    made_over_http(server, DLQ, ["dead"])
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"])
    try:
        topics = c.topics()
        assert {SPACED_ALIAS, DLQ_ALIAS} <= topics
        assert not {SPACED, DLQ} & topics
        assert c.partitions_for_topic(SPACED_ALIAS) == {0}
    finally:
        c.close()
    assert [(r.topic, r.value) for r in read_kafka_python(server, SPACED_ALIAS)][:2] == [
        (SPACED_ALIAS, b"a"), (SPACED_ALIAS, b"b")]
    assert [r.value for r in read_kafka_python(server, DLQ_ALIAS)][:1] == [b"dead"]


def test_a_produce_to_an_alias_lands_in_the_logbus_topic(server: LogbusServer) -> None:
    made_over_http(server, SPACED, ["a", "b"])
    before = topic_info(server, SPACED)
    assert before is not None
    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks="all", enable_idempotence=False)
    try:
        meta = p.send(SPACED_ALIAS, b"from kafka").get(timeout=10)
        assert meta.topic == SPACED_ALIAS
        p.send("logbus-dlq-made-by-kafka", b"x").get(timeout=10)  # auto-created
    finally:
        p.close()
    after = topic_info(server, SPACED)
    assert after is not None
    assert after["partition_detail"][0]["log_end_offset"] == before["partition_detail"][0]["log_end_offset"] + 1
    assert topic_info(server, "%DLQ%made-by-kafka") is not None
    assert topic_info(server, "logbus-dlq-made-by-kafka") is None
    assert read_kafka_python(server, SPACED_ALIAS)[-1].value == b"from kafka"


def test_a_group_commits_offsets_under_an_alias(server: LogbusServer) -> None:
    made_over_http(server, DLQ, ["dead"])
    c = KafkaConsumer(DLQ_ALIAS, bootstrap_servers=server.addresses["kafka"], group_id="replayer",
                      auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        got = [r.value for r in c]
        assert got and got[0] == b"dead"
        c.commit()
        assert c.committed(TopicPartition(DLQ_ALIAS, 0)) == len(got)
    finally:
        c.close()
    admin = KafkaAdminClient(bootstrap_servers=server.addresses["kafka"])
    try:
        offsets = admin.list_group_offsets("replayer")["replayer"]  # null topics: every committed one
        assert {tp.topic for tp in offsets} == {DLQ_ALIAS}
        # a Kafka name that is no topic's: refused, and nothing is created
        with pytest.raises(InvalidTopicError):
            admin.create_topics([KNewTopic("logbus-x-orders", 1, 1)])
        assert topic_info(server, "orders") is None
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, SPACED_ALIAS)])
        [(_, by_name)] = described.items()
        assert list(by_name) == [SPACED_ALIAS]  # answered without an error, under the alias
    finally:
        admin.close()


def test_confluent_kafka_lists_consumes_and_produces_aliased_topics(server: LogbusServer) -> None:
    made_over_http(server, DLQ, ["dead"])
    boot = server.addresses["kafka"]
    admin = AdminClient({"bootstrap.servers": boot, "log_level": 3})
    topics = admin.list_topics(timeout=10).topics
    assert DLQ_ALIAS in topics and DLQ not in topics
    created = admin.create_topics([NewTopic("logbus-x-made_20by_20librdkafka", 1, 1)])
    for f in created.values():
        f.result(timeout=10)
    assert topic_info(server, "made by librdkafka") is not None
    p = Producer({"bootstrap.servers": boot, "log_level": 3})
    errors: list[Any] = []
    p.produce("logbus-x-made_20by_20librdkafka", b"v", on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(10) == 0 and errors == []
    c = Consumer({"bootstrap.servers": boot, "group.id": "cfk", "enable.auto.commit": False, "log_level": 3})
    try:
        c.assign([CTopicPartition(DLQ_ALIAS, 0, 0)])
        deadline = time.monotonic() + 10
        m = None
        while m is None and time.monotonic() < deadline:
            m = c.poll(0.5)
        assert m is not None and m.error() is None
        assert (m.topic(), m.value()) == (DLQ_ALIAS, b"dead")
    finally:
        c.close()


def test_the_logbus_name_itself_is_no_kafka_name(server: LogbusServer) -> None:
    """Sent on the wire as it is (clients refuse to send it): each topic has one Kafka name."""
    made_over_http(server, DLQ, ["dead"])
    T = MetadataRequest.MetadataRequestTopic
    with Wire(server) as wire:
        resp = wire.call(MetadataRequest(topics=[T(name=DLQ), T(name="logbus-x-billing"), T(name=DLQ_ALIAS)],
                                         allow_auto_topic_creation=True), MetadataResponse, 9)
    assert [(t.name, t.error_code) for t in resp.topics] == [
        (DLQ, INVALID_TOPIC_EXCEPTION), ("logbus-x-billing", INVALID_TOPIC_EXCEPTION), (DLQ_ALIAS, 0)]
    assert topic_info(server, "billing") is None
