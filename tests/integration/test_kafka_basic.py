"""The Kafka gateway's first cut against real clients (kafka-python): produce with
acks=all, consume by assignment, offsets by time, durability across restart and
kill -9, and bad input that closes only the offending connection."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def producer(server: Any) -> KafkaProducer:
    # idempotence needs InitProducerId, which the gateway does not answer yet
    return KafkaProducer(
        bootstrap_servers=server.addresses["kafka"], acks="all", linger_ms=5, enable_idempotence=False
    )


def produce(server: Any, topic: str, n: int, start: int = 0) -> list[int]:
    p = producer(server)
    try:
        futures = [p.send(topic, key=b"k%d" % i, value=b"v%d" % i, timestamp_ms=1_000_000 + i) for i in range(start, start + n)]
        p.flush()
        return [f.get(timeout=10).offset for f in futures]
    finally:
        p.close()


def consume_all(server: Any, topic: str, partition: int = 0) -> list[Any]:
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False, consumer_timeout_ms=2000)
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek_to_beginning(tp)
        return list(c)
    finally:
        c.close()


def test_produce_then_consume_in_order(logbus_server: Any) -> None:
    server = logbus_server()
    offsets = produce(server, "orders", 300)
    assert offsets == list(range(300))
    got = consume_all(server, "orders")
    assert [(m.offset, m.key, m.value, m.timestamp) for m in got] == [
        (i, b"k%d" % i, b"v%d" % i, 1_000_000 + i) for i in range(300)
    ]


def test_offsets_by_time_and_ends(logbus_server: Any) -> None:
    server = logbus_server()
    produce(server, "t", 50)
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False)
    try:
        tp = TopicPartition("t", 0)
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 50}
        found = c.offsets_for_times({tp: 1_000_020})[tp]
        assert (found.offset, found.timestamp) == (20, 1_000_020)
        assert c.offsets_for_times({tp: 9_000_000})[tp] is None
    finally:
        c.close()


def test_acknowledged_records_survive_restart_and_kill(logbus_server: Any) -> None:
    server = logbus_server()
    assert produce(server, "durable", 100) == list(range(100))
    assert server.stop() == 0
    server.restart()
    assert produce(server, "durable", 100, start=100) == list(range(100, 200))
    server.kill()  # no flush, no clean marker: every acks=all record must still be there
    server.restart()
    got = consume_all(server, "durable")
    assert [m.value for m in got] == [b"v%d" % i for i in range(200)]


def raw_connection(server: Any) -> socket.socket:
    host, port = server.addresses["kafka"].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def closed_by_peer(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_bad_input_closes_only_that_connection(logbus_server: Any) -> None:
    server = logbus_server()
    produce(server, "safe", 10)
    bad_inputs = [
        struct.pack(">i", 200 * 1024 * 1024),  # frame over the size limit
        struct.pack(">i", 12) + struct.pack(">hhi", 999, 0, 1) + b"\x00\x00\x00\x00",  # unknown API key
        struct.pack(">i", 6) + b"\x00\x03\x00\x01\xff\xff",  # Metadata header cut short
        struct.pack(">i", -1),  # negative size
    ]
    for payload in bad_inputs:
        with raw_connection(server) as s:
            s.sendall(payload)
            assert closed_by_peer(s), payload
    # a truncated frame just waits for more; the client goes away
    with raw_connection(server) as s:
        s.sendall(struct.pack(">i", 100) + b"\x00\x03")
        time.sleep(0.1)
    # everyone else is still served, nothing acknowledged is lost
    assert produce(server, "safe", 10, start=10) == list(range(10, 20))
    assert [m.value for m in consume_all(server, "safe")] == [b"v%d" % i for i in range(20)]
    assert server.running()


def test_long_poll_fetch_wakes_on_produce(logbus_server: Any) -> None:
    import threading

    server = logbus_server()
    produce(server, "wake", 1)
    c = KafkaConsumer(
        bootstrap_servers=server.addresses["kafka"], enable_auto_commit=False,
        # a max wait longer than the test's deadline: records that arrive were woken by the append
        fetch_max_wait_ms=300_000, request_timeout_ms=400_000, fetch_min_bytes=1,
    )
    try:
        tp = TopicPartition("wake", 0)
        c.assign([tp])
        c.seek(tp, 1)
        c.poll(timeout_ms=500)  # nothing yet: the consumer now waits in a long-poll Fetch
        later = threading.Timer(0.5, produce, args=(server, "wake", 1, 1))
        later.start()
        t0 = time.monotonic()
        records: list[Any] = []
        while not records and time.monotonic() - t0 < 120:
            records = [r for rs in c.poll(timeout_ms=15_000).values() for r in rs]
        later.join()
        assert [r.value for r in records] == [b"v1"]  # woken by the append: the wait is 300 s
    finally:
        c.close()


def test_reserved_envelope_header_is_refused(logbus_server: Any) -> None:
    import pytest
    from kafka.errors import InvalidRecordError

    server = logbus_server()
    for compression in (None, "gzip"):
        p = KafkaProducer(
            bootstrap_servers=server.addresses["kafka"], acks="all", enable_idempotence=False,
            compression_type=compression, retries=0,
        )
        try:
            f = p.send("guarded", value=b"x", headers=[("logbus.envelope", b"\x01")])
            with pytest.raises(InvalidRecordError):
                f.get(timeout=10)
            assert p.send("guarded", value=b"ok", headers=[("other", b"1")]).get(timeout=10).offset >= 0
        finally:
            p.close()
    assert [m.value for m in consume_all(server, "guarded")] == [b"ok", b"ok"]


def test_advertised_address_is_configurable(logbus_server: Any) -> None:
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    from tests.kafka_wire import Wire

    server = logbus_server(args=["--kafka-advertised", "kafka.example.test:19092"])
    w = Wire(server)
    try:
        meta = w.call(MetadataRequest(topics=[]), MetadataResponse, 1)
    finally:
        w.sock.close()
    assert [(b.host, b.port) for b in meta.brokers] == [("kafka.example.test", 19092)]


def test_auto_creation_can_be_turned_off(logbus_server: Any) -> None:
    import pytest
    from kafka.errors import KafkaTimeoutError

    server = logbus_server(env={"LOGBUS_KAFKA_AUTO_CREATE_TOPICS": "false"})
    p = KafkaProducer(bootstrap_servers=server.addresses["kafka"], max_block_ms=1500, enable_idempotence=False)
    try:
        with pytest.raises(KafkaTimeoutError):  # the topic never appears in Metadata
            p.send("not-there", b"x").get(timeout=5)
    finally:
        p.close()
    import json
    import urllib.request

    from tests.serverproc import ADMIN_AUTH

    with urllib.request.urlopen(urllib.request.Request(server.http_url + "/api/topics", headers=ADMIN_AUTH),
                                timeout=5) as r:
        assert "not-there" not in json.dumps(json.load(r))
