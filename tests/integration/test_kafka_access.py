"""Kafka clients and the one access check (``Doors.authorize``) against a real `logbus
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

from logbus.gateway.kafka.operations import DESCRIBE, DESCRIBE_CONFIGS, READ, WRITE
from tests.integration.mgmt import Mgmt
from tests.kafka_members import ready_to_join
from tests.kafka_wire import Wire
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
        try:  # Metadata answers 29 for the topic (as Kafka), so kafka-python fetches nothing
            got = [r.value for r in consumer]
        except TopicAuthorizationFailedError:
            got = []
        assert got == []
        partition = mgmt.ok("GET", "/api/topics/prod%40orders").json()["partition_detail"][0]
        assert partition["log_end_offset"] == 1  # the refused produce appended nothing
    finally:
        producer.close()
        consumer.close()


def test_metadata_shows_only_what_the_user_may_describe_and_says_what_it_may_do(server: LogbusServer,
                                                                                 mgmt: Mgmt) -> None:
    """Kafka lists only the topics a user may describe, answers a named one it may not
    with 29 (whether it exists or not), and KIP-430's authorized operations are the
    user's own: read and write here, no create, delete or alter."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse  # type: ignore[import-untyped]

    for name in ("md-shown", "md-hidden"):
        mgmt.ok("POST", "/api/topics", {"name": name})
    mgmt.grant("/", "guest", configure="", write="^md-shown$", read="^md-shown$")
    T = MetadataRequest.MetadataRequestTopic
    with Wire(server) as w:
        every = w.call(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                       include_cluster_authorized_operations=False,
                                       include_topic_authorized_operations=True), MetadataResponse, 9)
        shown = {t.name: t for t in every.topics}
        assert "md-shown" in shown and "md-hidden" not in shown
        assert set(shown["md-shown"].authorized_operations) == {READ, WRITE, DESCRIBE, DESCRIBE_CONFIGS}
        named = w.call(MetadataRequest(topics=[T(name="md-hidden"), T(name="md-nowhere")],
                                       allow_auto_topic_creation=True, include_cluster_authorized_operations=False,
                                       include_topic_authorized_operations=False), MetadataResponse, 9)
        assert [(t.name, t.error_code) for t in named.topics] == [("md-hidden", 29), ("md-nowhere", 29)]
    assert mgmt.call("GET", "/api/topics/md-nowhere").status == 404  # not created either


def test_a_consumer_group_needs_read_on_the_group(server: LogbusServer, mgmt: Mgmt) -> None:
    """A group is queue <group> of vhost "/" for these checks (docs/security.md)."""
    from kafka.errors import GroupAuthorizationFailedError  # type: ignore[import-untyped]

    mgmt.ok("POST", "/api/topics", {"name": "grp-topic"})
    mgmt.ok("POST", "/api/topics/grp-topic/messages", {"messages": [{"value": "m"}]})
    mgmt.grant("/", "guest", configure="", write="", read="^(grp-topic|members)$")
    addr = server.addresses["kafka"]
    ok = ready_to_join(KafkaConsumer("grp-topic", bootstrap_servers=addr, group_id="members",
                                     auto_offset_reset="earliest", consumer_timeout_ms=10_000))
    try:
        assert [r.value for r in ok][:1] == [b"m"]
    finally:
        ok.close()
    refused = KafkaConsumer("grp-topic", bootstrap_servers=addr, group_id="others", auto_offset_reset="earliest",
                            consumer_timeout_ms=5000)
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            refused.poll(timeout_ms=5000)
    finally:
        refused.close()


def test_a_produce_key_is_held_to_the_topic_permission(server: LogbusServer, mgmt: Mgmt) -> None:
    """The issue's case: a Kafka produce to amq.topic with key alarm.fire reached MQTT
    subscribers although the user's topic permission allows sensors.* only."""
    mgmt.ok("PUT", "/api/topic-permissions/%2F/guest", {"exchange": "amq.topic", "write": "^sensors\\.", "read": ".*"})
    if mgmt.call("GET", "/api/topics/amq.topic").status == 404:
        mgmt.ok("POST", "/api/topics", {"name": "amq.topic"})
    before = mgmt.ok("GET", "/api/topics/amq.topic").json()["partition_detail"][0]["log_end_offset"]
    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"], enable_idempotence=False, retries=0,
                             max_block_ms=3000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("amq.topic", key=b"alarm.fire", value=b"x", partition=0).get(timeout=WAIT)
        assert producer.send("amq.topic", key=b"sensors.a", value=b"y", partition=0).get(timeout=WAIT).offset >= 0
    finally:
        producer.close()
        mgmt.ok("DELETE", "/api/topic-permissions/%2F/guest")
    after = mgmt.ok("GET", "/api/topics/amq.topic").json()["partition_detail"][0]["log_end_offset"]
    assert after == before + 1  # the refused record left no trace
