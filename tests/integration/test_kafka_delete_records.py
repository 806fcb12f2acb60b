"""DeleteRecords (API 21) against a real ``logbus serve``: the log start offset (low
watermark) moves forward, survives a restart, and fetches below it are out of range;
with kafka-python, aiokafka and confluent-kafka."""

from __future__ import annotations

import asyncio
from typing import Any

import kafka.errors as Errors
import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse

from tests.integration.test_kafka_admin import admin_client, produce
from tests.integration.test_kafka_groups_admin import create_topics
from tests.kafka_wire import Wire
from tests.serverproc import LogbusServer

OFFSET_OUT_OF_RANGE = 1


def earliest(server: LogbusServer, tp: TopicPartition) -> int:
    c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"])
    try:
        return int(c.beginning_offsets([tp])[tp])
    finally:
        c.close()


def fetch_error(server: LogbusServer, tp: TopicPartition, offset: int) -> tuple[int, int]:
    """(error code, log start offset) of a raw Fetch v11 at ``offset``."""
    T = FetchRequest.FetchTopic
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, rack_id="",
                       topics=[T(topic=tp.topic, partitions=[T.FetchPartition(
                           partition=tp.partition, current_leader_epoch=-1, fetch_offset=offset,
                           log_start_offset=-1, partition_max_bytes=1 << 20)])],
                       forgotten_topics_data=[])
    with Wire(server) as wire:
        (topic,) = wire.call(req, FetchResponse, 11).responses
    (p,) = topic.partitions
    return p.error_code, p.log_start_offset


def test_delete_records_moves_the_log_start(logbus_server: Any) -> None:
    server = logbus_server()
    admin = admin_client(server)
    try:
        admin.create_topics({"trim": {"num_partitions": 2}})
        assert produce(server, "trim", 0, 10) == list(range(10))
        assert produce(server, "trim", 1, 3) == [0, 1, 2]
        tp, other = TopicPartition("trim", 0), TopicPartition("trim", 1)
        result = admin.delete_records({tp: 4})
        assert result[tp]["low_watermark"] == 4 and result[tp]["error_code"] == 0
        assert earliest(server, tp) == 4 and earliest(server, other) == 0
        assert admin.delete_records({tp: 2})[tp]["low_watermark"] == 4  # never moves back
        assert fetch_error(server, tp, 3) == (OFFSET_OUT_OF_RANGE, 4)
        assert fetch_error(server, tp, 4) == (0, 4)
        with pytest.raises(Errors.OffsetOutOfRangeError):
            admin.delete_records({tp: 11})  # above the high watermark
        with pytest.raises(Errors.UnknownTopicOrPartitionError):
            admin.delete_records({TopicPartition("trim", 7): 1}, partition_leader_id=0)

        # a consumer positioned below the start is reset (auto_offset_reset=earliest)
        c = KafkaConsumer(bootstrap_servers=server.addresses["kafka"], auto_offset_reset="earliest",
                          enable_auto_commit=False, consumer_timeout_ms=3000)
        try:
            c.assign([tp])
            c.seek(tp, 1)
            assert [m.offset for m in c] == [4, 5, 6, 7, 8, 9]
        finally:
            c.close()
    finally:
        admin.close()

    assert server.stop() == 0
    server.restart()
    assert earliest(server, tp) == 4
    assert fetch_error(server, tp, 2) == (OFFSET_OUT_OF_RANGE, 4)
    admin = admin_client(server)
    try:
        assert admin.delete_records({tp: -1})[tp]["low_watermark"] == 10  # -1: the high watermark
    finally:
        admin.close()
    assert server.stop() == 0
    server.restart()
    assert earliest(server, tp) == 10
    assert produce(server, "trim", 0, 1) == [10]


def test_aiokafka_and_librdkafka_delete_records(logbus_server: Any) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
    from aiokafka.structs import TopicPartition as AioTP
    from confluent_kafka import TopicPartition as RdTP
    from confluent_kafka.admin import AdminClient

    server = logbus_server()
    create_topics(server, ["aio-trim"])
    produce(server, "aio-trim", 0, 6)

    async def delete(offset: int) -> Any:
        admin = AIOKafkaAdminClient(bootstrap_servers=server.addresses["kafka"])
        await admin.start()
        try:
            return await admin.delete_records({AioTP("aio-trim", 0): RecordsToDelete(offset)})
        finally:
            await admin.close()

    assert asyncio.run(delete(2)) == {AioTP("aio-trim", 0): 2}
    a = AdminClient({"bootstrap.servers": server.addresses["kafka"]})
    (future,) = a.delete_records([RdTP("aio-trim", 0, 5)], request_timeout=10).values()
    assert future.result(timeout=10).low_watermark == 5
    assert earliest(server, TopicPartition("aio-trim", 0)) == 5
