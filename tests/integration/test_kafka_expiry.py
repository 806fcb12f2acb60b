"""Per-client state Kafka expires, against a real ``logbus serve`` with short settings and
real Kafka clients (issue 30): an idempotent producer's state after
``--kafka-producer-id-expiration-ms`` (Kafka's producer.id.expiration.ms), the committed
offsets of a group with no members after ``--kafka-offsets-retention-ms`` (Kafka's
offsets.retention.minutes). Each waits for the expiry's counter in /metrics, not a sleep."""

from __future__ import annotations

import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from tests.kafka_members import ready_to_join
from tests.serverproc import LogbusServer, ServerFactory


def wait_for_metric(server: LogbusServer, name: str, at_least: float, timeout: float = 30.0) -> float:
    deadline = time.monotonic() + timeout
    while True:
        value = server.metric(name)
        if value >= at_least or time.monotonic() > deadline:
            return value
        time.sleep(0.05)  # polling the broker's own count of the event, with a deadline


def values(server: LogbusServer, topic: str) -> list[bytes]:
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False,
                      consumer_timeout_ms=2000)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        return [m.value for m in c]
    finally:
        c.close()


def test_an_idempotent_producer_idle_past_the_expiry_goes_on(logbus_server: ServerFactory) -> None:
    """Its state is forgotten (counted); its next batch, sequence 100, is taken, not
    refused as out of order, and nothing is duplicated or lost."""
    server = logbus_server(args=["--kafka-producer-id-expiration-ms", "500"])
    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], enable_idempotence=True)
    try:
        first = [f.get(timeout=10).offset for f in [p.send("idle", b"a%d" % i, partition=0) for i in range(100)]]
        assert first == list(range(100))
        assert server.metric("logbus_producer_states_expired_total") == 0
        assert wait_for_metric(server, "logbus_producer_states_expired_total", 1) == 1
        later = [f.get(timeout=10).offset for f in [p.send("idle", b"b%d" % i, partition=0) for i in range(10)]]
        assert later == list(range(100, 110))
    finally:
        p.close()
    assert values(server, "idle") == [b"a%d" % i for i in range(100)] + [b"b%d" % i for i in range(10)]


def test_offsets_of_a_group_left_empty_expire_and_a_consumer_starts_over(logbus_server: ServerFactory) -> None:
    server = logbus_server(args=["--kafka-offsets-retention-ms", "1000"])
    boot = server.addresses["kafka"]
    p = KafkaProducer(bootstrap_servers=boot)
    for i in range(5):
        p.send("exp", b"m%d" % i, partition=0)
    p.flush()
    p.close()
    tp = TopicPartition("exp", 0)
    c = ready_to_join(KafkaConsumer("exp", bootstrap_servers=boot, group_id="g", auto_offset_reset="earliest",
                                    enable_auto_commit=False, consumer_timeout_ms=3000))
    assert [m.value for m in c] == [b"m%d" % i for i in range(5)]
    c.commit({tp: OffsetAndMetadata(5, "", -1)})
    admin = KafkaAdminClient(bootstrap_servers=boot)
    try:
        assert admin.list_group_offsets("g")["g"][tp].offset == 5
        assert "g" in [g["group_id"] for g in admin.list_groups()]
        assert server.metric("logbus_group_offsets_expired_total") == 0  # a member holds the group
        c.close()  # leaves: the group is Empty from here
        assert wait_for_metric(server, "logbus_group_offsets_expired_total", 1) == 1
        assert admin.list_group_offsets("g")["g"] == {}
        assert "g" not in [g["group_id"] for g in admin.list_groups()]  # Dead: gone
    finally:
        admin.close()
    # what a client sees: no committed offset, so auto.offset.reset applies again
    c2 = ready_to_join(KafkaConsumer("exp", bootstrap_servers=boot, group_id="g", auto_offset_reset="earliest",
                                     enable_auto_commit=False, consumer_timeout_ms=3000))
    try:
        assert [m.value for m in c2][:1] == [b"m0"]
    finally:
        c2.close()
