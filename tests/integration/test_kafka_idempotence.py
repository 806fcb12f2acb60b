"""Idempotent producers against the Kafka gateway: kafka-python's and aiokafka's
defaults (idempotence on), and the exact rules on the wire: a retried batch is
acknowledged with its first offset and stored once; a gap or an old epoch is refused."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaProducer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

from tests.kafka_wire import Wire


def consume_values(server: Any, topic: str) -> list[bytes]:
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False, consumer_timeout_ms=2000)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        return [m.value for m in c]
    finally:
        c.close()


def test_kafka_python_default_producer_is_idempotent(logbus_server: Any) -> None:
    server = logbus_server()
    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"])  # enable_idempotence defaults to True
    try:
        offsets = [f.get(timeout=10).offset for f in [p.send("idem", b"v%d" % i) for i in range(200)]]
    finally:
        p.close()
    assert offsets == list(range(200))
    assert consume_values(server, "idem") == [b"v%d" % i for i in range(200)]


def test_aiokafka_idempotent_producer(logbus_server: Any) -> None:
    server = logbus_server()

    async def run() -> list[int]:
        p = AIOKafkaProducer(bootstrap_servers=server.addresses["kafka"], enable_idempotence=True, linger_ms=5)
        await p.start()
        try:
            futures = [await p.send("aio", b"a%d" % i) for i in range(100)]
            return [(await f).offset for f in futures]
        finally:
            await p.stop()

    assert asyncio.run(run()) == list(range(100))
    assert consume_values(server, "aio") == [b"a%d" % i for i in range(100)]


def test_retry_is_stored_once_and_gaps_and_old_epochs_are_refused(logbus_server: Any) -> None:
    server = logbus_server()
    w = Wire(server)
    try:
        init = w.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), InitProducerIdResponse, 1)
        pid, epoch = init.producer_id, init.producer_epoch
        assert init.error_code == 0 and pid >= 0 and epoch == 0
        assert w.produce("raw", pid, epoch, 0, [b"a", b"b"]) == (0, 0)
        assert w.produce("raw", pid, epoch, 0, [b"a", b"b"]) == (0, 0)  # a retry: same offset, not stored again
        assert w.produce("raw", pid, epoch, 2, [b"c"]) == (0, 2)
        assert w.produce("raw", pid, epoch, 5, [b"gap"])[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert w.produce("raw", pid, epoch + 1, 0, [b"d"]) == (0, 3)  # a new epoch starts at 0
        assert w.produce("raw", pid, epoch, 3, [b"zombie"])[0] == 47  # INVALID_PRODUCER_EPOCH
    finally:
        w.sock.close()
    assert consume_values(server, "raw") == [b"a", b"b", b"c", b"d"]
    # the state comes back (RocksDB snapshot + log tail) after a restart: the retry is
    # still a duplicate, and a new producer never gets an id handed out before
    server.stop()
    server.restart()
    w = Wire(server)
    try:
        again = w.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), InitProducerIdResponse, 1)
        assert again.error_code == 0 and again.producer_id > pid
        assert w.produce("raw", pid, epoch + 1, 0, [b"d"]) == (0, 3)
        assert w.produce("raw", pid, epoch + 1, 1, [b"e"]) == (0, 4)
    finally:
        w.sock.close()
    assert consume_values(server, "raw") == [b"a", b"b", b"c", b"d", b"e"]
