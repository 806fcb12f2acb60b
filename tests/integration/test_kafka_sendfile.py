"""Fetch answers are sent with sendfile(2) straight from the segment files: large
answers spanning several segments, a slow reader whose socket fills up (partial
sends, waits for writability), pipelined requests answered in order, and a reader
that goes away in the middle of an answer."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from kafka.admin import KafkaAdminClient, NewTopic
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.record import MemoryRecords

from tests.kafka_wire import Wire

VALUE = 10 * 1024
BATCH = 50
BATCHES = 24  # 24 batches x 50 x 10 KiB: 12 MB in 1 MiB segments


def fill(server: Any) -> list[bytes]:
    admin = KafkaAdminClient(bootstrap_servers=server.addresses["kafka"])
    try:
        admin.create_topics([NewTopic("big", 1, 1, topic_configs={"segment.bytes": str(1 << 20)})])
    finally:
        admin.close()
    w = Wire(server)
    values = []
    for b in range(BATCHES):
        batch = [bytes([b, i]) * (VALUE // 2) for i in range(BATCH)]
        assert w.produce("big", -1, -1, -1, batch) == (0, b * BATCH)
        values += batch
    w.sock.close()
    return values


def fetch_request(max_bytes: int) -> Any:
    T = FetchRequest.FetchTopic
    return FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[T(topic="big", partitions=[T.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=max_bytes)])],
    )


def encoded(request: Any, version: int, correlation_id: int) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="sendfile-test")
    return bytes(request.encode(header=True, framed=True))


def read_frame(sock: socket.socket, slow: bool = False) -> bytes:
    def exactly(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(min(n - len(buf), 4096 if slow else 1 << 20))
            assert chunk, "connection closed"
            buf += chunk
            if slow and len(buf) < 256 * 1024:
                time.sleep(0.001)  # the broker's socket fills up meanwhile
        return bytes(buf)

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def values_of(records: bytes) -> list[bytes]:
    out = []
    mr = MemoryRecords(records)
    while mr.has_next():
        batch = mr.next_batch()
        out += [r.value for r in batch]
    return out


def test_large_pipelined_fetches_to_a_slow_reader(logbus_server: Any) -> None:
    server = logbus_server()
    values = fill(server)
    host, port = server.addresses["kafka"].rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect((host, int(port)))
    # Fetch everything, Metadata, Fetch again: sent at once, answered in this order
    sock.sendall(
        encoded(fetch_request(64 << 20), 11, 1)
        + encoded(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="big")],
                                  allow_auto_topic_creation=False), 1, 2)
        + encoded(fetch_request(64 << 20), 11, 3)
    )
    first = FetchResponse.decode(read_frame(sock, slow=True), version=11, header=True)
    meta = MetadataResponse.decode(read_frame(sock), version=1, header=True)
    second = FetchResponse.decode(read_frame(sock), version=11, header=True)
    assert [first.header.correlation_id, meta.header.correlation_id, second.header.correlation_id] == [1, 2, 3]
    assert [t.name for t in meta.topics] == ["big"]
    for resp in (first, second):
        part = resp.responses[0].partitions[0]
        assert (part.error_code, part.high_watermark) == (0, BATCHES * BATCH)
        assert values_of(part.records) == values
    sock.close()


def test_reader_leaving_mid_answer_leaves_the_broker_serving(logbus_server: Any) -> None:
    server = logbus_server()
    values = fill(server)
    host, port = server.addresses["kafka"].rsplit(":", 1)
    for _ in range(3):
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
        sock.sendall(encoded(fetch_request(64 << 20), 11, 1))
        sock.recv(1000)
        sock.close()
    time.sleep(0.2)
    w = Wire(server)
    resp = w.call(fetch_request(64 << 20), FetchResponse, 11)
    w.sock.close()
    assert values_of(resp.responses[0].partitions[0].records) == values
    assert server.running()
