"""A raw Kafka connection for tests that need exact control of what goes on the wire:
one request out, its response back, encoded with kafka-python's schema classes."""

from __future__ import annotations

import socket
import struct
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kafka.protocol.producer import ProduceRequest, ProduceResponse


class Wire:
    """A raw Kafka connection: send one request, read its response."""

    def __init__(self, server: Any, listener: str = "kafka") -> None:
        host, port = server.addresses[listener].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, request: Any, response_cls: Any, version: int) -> Any:
        self.correlation += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self.correlation, client_id="wire")
        self.sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = struct.unpack(">i", self._exactly(4))[0]
        return response_cls.decode(self._exactly(size), version=version, header=True)

    def _exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf

    def produce(self, topic: str, pid: int, epoch: int, seq: int, values: list[bytes]) -> tuple[int, int]:
        b = DefaultRecordBatchBuilder(2, 0, 0, pid, epoch, seq, 1 << 20)
        for i, v in enumerate(values):
            b.append(i, 1000 + i, None, v, [])
        T = ProduceRequest.TopicProduceData
        req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
            T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=bytes(b.build()))])
        ])
        r = self.call(req, ProduceResponse, 8).responses[0].partition_responses[0]
        return r.error_code, r.base_offset

    def fetch(self, topic: str, partition: int = 0, offset: int = 0) -> list[Any]:
        """The records of ``topic``/``partition`` from ``offset`` (one Fetch v4; the names
        Kafka clients refuse to send, such as ``%DLQ%<group>``, go on the wire as they are)."""
        from aiokafka.record.memory_records import MemoryRecords
        from kafka.protocol.consumer import FetchRequest, FetchResponse

        T = FetchRequest.FetchTopic
        req = FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           topics=[T(topic=topic, partitions=[T.FetchPartition(
                               partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)])])
        part = self.call(req, FetchResponse, 4).responses[0].partitions[0]
        assert part.error_code == 0, part
        records = []
        batches = MemoryRecords(bytes(part.records or b""))
        while batches.has_next():
            batch = batches.next_batch()
            assert batch is not None
            records.extend(batch)
        return records
