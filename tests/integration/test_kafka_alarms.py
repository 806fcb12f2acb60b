"""Resource alarms on Kafka against a real `logbus serve` (docs/operations.md, "Resource
alarms"; gateway/kafka/alarms.py): the disk alarm is set for real over HTTP. A
kafka-python producer's Produce is held (neither appended nor answered) and completes
once the alarm clears, nothing lost or doubled, while a consumer's Fetch goes on. On a
raw socket: a Produce held past most of its timeout_ms is answered REQUEST_TIMED_OUT
with throttle_time_ms and appends nothing; under the memory alarm a connection in the
middle of a large request is not read until it clears."""

from __future__ import annotations

import socket
import struct
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from tests.integration.alarms import ABOVE_ANY_DISK, EVERY_BYTE, bytes_in, metric, send_until_stalled, set_limits, wait_for
from tests.integration.mgmt import Mgmt
from tests.kafka_wire import Wire

REQUEST_TIMED_OUT = 7


def values(server: Any, topic: str) -> list[bytes]:
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False,
                      consumer_timeout_ms=2000)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        return [r.value for r in c]
    finally:
        c.close()


def test_a_produce_is_held_until_the_alarm_clears(logbus_server: Any) -> None:
    server = logbus_server(listeners={"amqp": "off", "mqtt": "off"}, args=["--disk-free-limit", "1"])
    topic = "alarm-held"
    producer = KafkaProducer(bootstrap_servers=server.addresses["kafka"], acks="all", linger_ms=0,
                             enable_idempotence=False)
    try:
        producer.send(topic, b"before", partition=0).get(timeout=20)
        assert set_limits(server, disk_free_limit=ABOVE_ANY_DISK)["alarms"] == ["disk"]
        future = producer.send(topic, b"during", partition=0)
        wait_for(lambda: metric(server, "logbus_kafka_produces_held") >= 1)
        assert not future.is_done
        assert values(server, topic) == [b"before"]  # Fetch goes on, nothing of the held one appended
        assert not future.is_done

        set_limits(server, disk_free_limit=1)
        assert future.get(timeout=20).offset == 1
        producer.send(topic, b"after", partition=0).get(timeout=20)
        assert values(server, topic) == [b"before", b"during", b"after"]  # nothing lost, nothing twice
    finally:
        set_limits(server, disk_free_limit=1)
        producer.close()


def produce_request(topic: str, value: bytes, timeout_ms: int) -> ProduceRequest:
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    b.append(0, 1000, None, value, [])
    T = ProduceRequest.TopicProduceData
    return ProduceRequest(transactional_id=None, acks=1, timeout_ms=timeout_ms, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=bytes(b.build()))])])


def test_a_produce_held_past_its_timeout_is_answered_request_timed_out(logbus_server: Any) -> None:
    server = logbus_server(listeners={"amqp": "off", "mqtt": "off"}, args=["--disk-free-limit", "1"])
    topic = "alarm-timeout"
    Mgmt(server).call("POST", "/api/topics", {"name": topic, "partitions": 1})
    set_limits(server, disk_free_limit=ABOVE_ANY_DISK)
    try:
        with Wire(server) as wire:
            answer = wire.call(produce_request(topic, b"held", 500), ProduceResponse, 8)
            part = answer.responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (REQUEST_TIMED_OUT, -1)
            assert answer.throttle_time_ms > 0 and answer.responses[0].name == topic
            set_limits(server, disk_free_limit=1)
            answer = wire.call(produce_request(topic, b"retried", 500), ProduceResponse, 8)
            assert answer.responses[0].partition_responses[0].error_code == 0
            assert [r.value for r in wire.fetch(topic)] == [b"retried"]  # the timed-out one never appended
    finally:
        set_limits(server, disk_free_limit=1)


def test_a_large_unfinished_request_is_not_read_under_the_memory_alarm(logbus_server: Any) -> None:
    server = logbus_server(listeners={"amqp": "off", "mqtt": "off"})
    host, port = server.addresses["kafka"].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    peer = "%s:%d" % sock.getsockname()
    try:
        sock.sendall(struct.pack(">i", 90 << 20) + b"\0" * (2 << 20))  # 2 MiB of a 90 MiB request
        wait_for(lambda: bytes_in(server, peer) >= (2 << 20))
        assert set_limits(server, memory_high_watermark=EVERY_BYTE)["alarms"] == ["memory"]
        wait_for(lambda: metric(server, "logbus_kafka_unfinished_paused") >= 1)
        sent = send_until_stalled(sock, b"\0" * (64 << 20))
        assert sent < (64 << 20)  # the broker stopped reading: only the socket buffers took some
        held = bytes_in(server, peer)
        assert held < (2 << 20) + sent
        set_limits(server, memory_high_watermark=0.9)
        wait_for(lambda: bytes_in(server, peer) >= (2 << 20) + sent)  # read again
    finally:
        set_limits(server, memory_high_watermark=0.9)
        sock.close()
