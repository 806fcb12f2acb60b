"""Kafka clients and the one access check (``Broker.authorize``) against a real `logbus
serve`: with no login yet they act as the broker's default user, whose permissions on the
exchange a topic stands for (in the topic's vhost: docs/security.md) decide: write to produce, read to fetch, configure
to create (also by auto-creation) or delete. A refusal is TOPIC_AUTHORIZATION_FAILED (29)
for that topic alone; a permission change takes effect on the next request."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # type: ignore[import-untyped]
from kafka.admin import NewTopic  # type: ignore[import-untyped]
from kafka.errors import TopicAuthorizationFailedError  # type: ignore[import-untyped]

from tests.integration.mgmt import Mgmt
from tests.serverproc import LogbusServer, module_server

WAIT = 15


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogbusServer]:
    yield from module_server(tmp_path_factory, "kafka-access", listeners={"amqp": "off", "mqtt": "off"})


@pytest.fixture
def mgmt(server: LogbusServer) -> Iterator[Mgmt]:
    m = Mgmt(server)
    yield m
    m.grant("/", "guest")  # everything again, for the next test


def test_produce_fetch_and_create_follow_the_default_users_permissions(server: LogbusServer, mgmt: Mgmt) -> None:
    mgmt.grant("/", "guest", configure="^ok-", write="^ok-", read="^(ok-|ro-)")
    addr = server.addresses["kafka"]
    producer = KafkaProducer(bootstrap_servers=addr, enable_idempotence=False, retries=0, max_block_ms=3000)
    admin = KafkaAdminClient(bootstrap_servers=addr)
    try:
        assert producer.send("ok-a", b"v").get(timeout=WAIT).offset == 0  # auto-created: configure allowed
        with pytest.raises(TopicAuthorizationFailedError):
            admin.create_topics([NewTopic("ro-b", 1, 1)])  # refused: configure on ro-b
        assert "ro-b" not in admin.list_topics()
        mgmt.grant("/", "guest", configure=".*", write="^ok-", read="^(ok-|ro-)")
        admin.create_topics([NewTopic("ro-b", 1, 1)])
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("ro-b", b"v").get(timeout=WAIT)  # write refused
        consumer = KafkaConsumer(bootstrap_servers=addr, enable_auto_commit=False, consumer_timeout_ms=3000)
        try:
            tp = TopicPartition("ok-a", 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            assert [r.value for r in consumer] == [b"v"]
        finally:
            consumer.close()
        mgmt.grant("/", "guest", configure=".*", write=".*", read="^ro-")  # ok-a: no read now
        consumer = KafkaConsumer(bootstrap_servers=addr, enable_auto_commit=False, consumer_timeout_ms=3000)
        try:
            consumer.assign([TopicPartition("ok-a", 0)])
            consumer.seek(TopicPartition("ok-a", 0), 0)
            with pytest.raises(TopicAuthorizationFailedError):
                list(consumer)
        finally:
            consumer.close()
        assert producer.send("ro-b", b"w").get(timeout=WAIT).offset == 0  # write allowed now
    finally:
        producer.close()
        admin.close()


def test_another_vhosts_topic_needs_that_vhosts_permissions(server: LogbusServer, mgmt: Mgmt) -> None:
    """Topic prod@orders (Kafka name logbus-x-prod_40orders) is exchange orders of vhost
    prod: the default user's permissions on "/" do not reach it (they did before: the
    check read every topic as an exchange of "/")."""
    mgmt.add_vhost("prod")
    mgmt.grant("prod", "guest")
    mgmt.ok("POST", "/api/topics", {"name": "prod@orders"})
    mgmt.ok("POST", "/api/topics/prod%40orders/messages", {"messages": [{"value": "secret"}]})
    mgmt.ok("DELETE", "/api/permissions/prod/guest")
    addr = server.addresses["kafka"]
    producer = KafkaProducer(bootstrap_servers=addr, enable_idempotence=False, retries=0, max_block_ms=3000)
    consumer = KafkaConsumer(bootstrap_servers=addr, enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("logbus-x-prod_40orders", b"v").get(timeout=WAIT)
        tp = TopicPartition("logbus-x-prod_40orders", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        with pytest.raises(TopicAuthorizationFailedError):
            list(consumer)
        partition = mgmt.ok("GET", "/api/topics/prod%40orders").json()["partition_detail"][0]
        assert partition["log_end_offset"] == 1  # the refused produce appended nothing
    finally:
        producer.close()
        consumer.close()
