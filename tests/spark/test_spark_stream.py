"""Streaming reads through a real local Spark: micro-batches, checkpoints, restarts, a
running broker."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from logbus.core.log import Record
from logbus.spark.stream import share_limit
from tests.serverproc import ServerFactory
from tests.spark.conftest import LogWriter


def stream(spark: Any, data: Path, **options: str) -> Any:
    reader = spark.readStream.format("logbus").option("path", str(data))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def offsets_in(spark: Any, out: Path) -> list[tuple[int, int]]:
    rows = spark.read.parquet(str(out)).select("partition", "offset").collect()
    return sorted((r.partition, r.offset) for r in rows)


def test_share_limit_follows_the_backlog_and_always_advances() -> None:
    assert share_limit({("t", 0): 10, ("t", 1): 5}, 100) == {("t", 0): 10, ("t", 1): 5}
    assert share_limit({("t", 0): 300, ("t", 1): 100}, 40) == {("t", 0): 30, ("t", 1): 10}
    grant = share_limit({("t", 0): 1000, ("t", 1): 1, ("t", 2): 1}, 3)
    assert sum(grant.values()) == 3 and grant[("t", 0)] >= 1
    assert sum(share_limit({("t", 0): 5, ("t", 1): 5}, 0).values()) == 1  # never stuck


def test_parquet_sink_restarted_mid_way_gets_every_record_once(spark: Any, tmp_path: Path) -> None:
    w = LogWriter(tmp_path / "data")
    w.topic("events", partitions=3)
    for p in range(3):
        for b in range(4):
            w.append("events", p, [Record(b"k", b"%d-%d" % (p, b * 25 + i), 1000 + i) for i in range(25)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start() -> Any:
        df = stream(spark, w.data_dir, subscribe="events", startingOffsets="earliest", maxOffsetsPerTrigger="30")
        return (df.writeStream.format("parquet").option("path", str(out))
                .option("checkpointLocation", str(checkpoint)).trigger(processingTime="200 milliseconds").start())

    q = start()
    deadline = time.monotonic() + 60
    while (q.lastProgress is None or q.lastProgress["batchId"] < 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    q.stop()  # mid-way: 300 records, at most 30 a trigger
    first = offsets_in(spark, out)
    assert 0 < len(first) < 300
    for progress in q.recentProgress:
        assert progress["numInputRows"] <= 30
    # the log grows while the query is down (the writer is still open, as a broker is)
    for p in range(3):
        w.append("events", p, [Record(b"k", b"late", 2000)] * 10)
    q = start()
    q.processAllAvailable()
    q.stop()
    got = offsets_in(spark, out)
    assert got == [(p, o) for p in range(3) for o in range(110)]  # each exactly once
    end = json.loads(q.lastProgress["sources"][0]["endOffset"])
    assert end == {"events": {"0": 110, "1": 110, "2": 110}}
    w.close()


def test_available_now_stops_at_the_ends_and_new_partitions_start_at_earliest(spark: Any, tmp_path: Path) -> None:
    w = LogWriter(tmp_path / "data")
    w.topic("m-a")
    w.append("m-a", 0, [Record(None, b"a%d" % i, 1) for i in range(20)])
    checkpoint, out = tmp_path / "cp", tmp_path / "out"

    def run() -> list[Any]:
        df = stream(spark, w.data_dir, subscribePattern="m-.*", startingOffsets="latest", maxOffsetsPerTrigger="7")
        q = (df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
        q.awaitTermination(60)
        return q.recentProgress

    first = run()
    assert sum(p["numInputRows"] for p in first) == 0  # latest: nothing yet
    w.append("m-a", 0, [Record(None, b"b%d" % i, 1) for i in range(10)])
    w.topic("m-b")  # a new topic matching the pattern: read from its earliest offset
    w.append("m-b", 0, [Record(None, b"c%d" % i, 1) for i in range(5)])
    progress = run()
    assert sum(p["numInputRows"] for p in progress) == 15
    assert all(p["numInputRows"] <= 7 for p in progress) and len([p for p in progress if p["numInputRows"]]) >= 3
    rows = spark.read.parquet(str(out)).select("topic", "offset").collect()
    assert sorted((r.topic, r.offset) for r in rows) == [("m-a", o) for o in range(20, 30)] + [
        ("m-b", o) for o in range(5)]
    w.close()


@pytest.fixture
def server(tmp_path: Path) -> Any:
    factory = ServerFactory(tmp_path)
    try:
        yield factory.start(listeners={"amqp": "off", "mqtt": "off"})
    finally:
        factory.cleanup()


def test_stream_picks_up_what_a_running_broker_appends(spark: Any, server: Any) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": server.addresses["kafka"], "acks": "all", "linger.ms": 5})

    def produce(values: list[bytes]) -> None:
        for v in values:
            producer.produce("sensors", key=b"dev-1", value=v, headers=[("unit", b"C")])
        assert producer.flush(30) == 0

    produce([b"%d" % i for i in range(50)])
    df = stream(spark, server.data_dir, subscribe="sensors", startingOffsets="earliest", includeHeaders="true")
    q = df.writeStream.format("memory").queryName("live").start()
    try:
        q.processAllAvailable()
        assert spark.sql("select count(*) from live").collect()[0][0] == 50
        produce([b"%d" % i for i in range(50, 80)])  # while the query and the broker run
        deadline = time.monotonic() + 60
        while spark.sql("select count(*) from live").collect()[0][0] < 80 and time.monotonic() < deadline:
            time.sleep(0.2)
        rows = spark.sql("select key, value, offset, headers, protocol from live").collect()
    finally:
        q.stop()
    assert sorted(int(r.value) for r in rows) == list(range(80))
    assert sorted(r.offset for r in rows) == list(range(80))
    assert {r.key for r in rows} == {b"dev-1"}
    assert all([(h.key, h.value) for h in r.headers] == [("unit", b"C")] for r in rows)
    assert server.running()


def recreate(w: LogWriter, topic: str, partitions: int) -> None:
    """Delete ``topic`` and create it again, empty, with ``partitions`` partitions."""
    w.lm.delete_topic(topic)
    w.topic(topic, partitions=partitions)


def memory_rows(spark: Any, table: str) -> list[tuple[int, int, bytes]]:
    rows = spark.sql(f"select partition, offset, value from {table}").collect()
    return sorted((r.partition, r.offset, bytes(r.value)) for r in rows)


@pytest.mark.parametrize("partitions_after", [1, 2])
def test_recreated_topic_under_max_offsets_per_trigger_fails_on_data_loss(
    spark: Any, tmp_path: Path, partitions_after: int
) -> None:
    """Offsets that went back (and, with one partition after, a partition that is gone)
    stop the query, with the limit as without it."""
    w = LogWriter(tmp_path / "data")
    w.topic("fleet", partitions=2)
    for p in range(2):
        w.append("fleet", p, [Record(None, b"old", 1)] * 25)
    df = stream(spark, w.data_dir, subscribe="fleet", startingOffsets="earliest", maxOffsetsPerTrigger="1000")
    table = f"recreated_strict_{partitions_after}"
    q = df.writeStream.format("memory").queryName(table).start()
    try:
        q.processAllAvailable()
        assert len(memory_rows(spark, table)) == 50
        recreate(w, "fleet", partitions_after)
        w.append("fleet", 0, [Record(None, b"new", 1)] * 10)
        with pytest.raises(Exception, match="failOnDataLoss") as failed:
            q.processAllAvailable()
        assert "went back from 25 to" in str(failed.value) or "is gone" in str(failed.value)
    finally:
        q.stop()
    assert len(memory_rows(spark, table)) == 50
    w.close()


def test_recreated_topic_without_fail_on_data_loss_goes_on_from_the_new_start(spark: Any, tmp_path: Path) -> None:
    w = LogWriter(tmp_path / "data")
    w.topic("fleet", partitions=2)
    for p in range(2):
        w.append("fleet", p, [Record(None, b"old", 1)] * 25)
    df = stream(spark, w.data_dir, subscribe="fleet", startingOffsets="earliest", maxOffsetsPerTrigger="7",
                failOnDataLoss="false")
    q = df.writeStream.format("memory").queryName("recreated_lenient").start()
    try:
        q.processAllAvailable()
        old = [(p, o, b"old") for p in range(2) for o in range(25)]
        assert memory_rows(spark, "recreated_lenient") == old
        recreate(w, "fleet", 1)
        w.append("fleet", 0, [Record(None, b"new", 1)] * 10)
        q.processAllAvailable()
        assert memory_rows(spark, "recreated_lenient") == sorted(old + [(0, o, b"new") for o in range(10)])
        assert json.loads(q.lastProgress["sources"][0]["endOffset"]) == {"fleet": {"0": 10}}  # partition 1 dropped
        w.append("fleet", 0, [Record(None, b"newer", 1)] * 5)
        q.processAllAvailable()
        rows = memory_rows(spark, "recreated_lenient")
    finally:
        q.stop()
    assert rows == sorted(old + [(0, o, b"new") for o in range(10)] + [(0, o, b"newer") for o in range(10, 15)])
    assert all(p["numInputRows"] <= 7 for p in q.recentProgress)
    w.close()


def test_stream_with_filter_sql_writes_only_what_the_filter_takes(spark: Any, tmp_path: Path) -> None:
    from logbus.core.message import Message
    from tests.spark.conftest import env

    w = LogWriter(tmp_path / "data")
    w.topic("f")
    msgs = []
    for i in range(30):
        e = env(protocol=2, tag=("red", "blue")[i % 2])
        e.user_properties.add(key="n", value=str(i))
        msgs.append(Message(None, b"%d" % i, 1, [], e))
    w.append("f", 0, msgs)
    checkpoint, out = tmp_path / "cp", tmp_path / "out"
    df = stream(spark, w.data_dir, subscribe="f", startingOffsets="earliest", filterSql="n >= 10 AND n < 20", filterTag="red",
                maxOffsetsPerTrigger="8")
    q = (df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination(60)
    values = sorted(int(r.value) for r in spark.read.parquet(str(out)).select("value").collect())
    assert values == [10, 12, 14, 16, 18]
    w.close()
