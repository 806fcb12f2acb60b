"""Batch reads through a real local Spark: ``spark.read.format("logbus")``."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from logbus.core.log import Record
from logbus.core.message import Message
from logbus.spark import schema as S
from tests.spark.conftest import LogWriter, env

UTC = dt.UTC


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three topics: ``orders`` (2 partitions, envelopes), ``orders-eu``, ``audit``."""
    w = LogWriter(tmp_path_factory.mktemp("batch") / "data")
    w.topic("orders", partitions=2)
    w.topic("orders-eu")
    w.topic("audit", segment_bytes=2048, retention_bytes=4096)
    for p in (0, 1):
        for b in range(3):
            w.append("orders", p, [
                Message(b"k%d" % (i % 3), b"p%d-%d" % (p, b * 10 + i), 1_000_000 + b * 10 + i,
                        [("n", b"%d" % i)], env(protocol=1, tag="tag%d" % (i % 2), routing_key="rk.%d" % i))
                for i in range(10)
            ])
    w.append("orders-eu", 0, [Record(b"eu", b"x%d" % i, 5_000 + i) for i in range(5)])
    for i in range(60):
        w.append("audit", 0, [Record(b"a", b"y" * 100, 9_000 + i)])
    part = w.lm.partition("audit", 0)
    assert part.apply_retention(10**13) > 0 and part.log_start_offset > 0  # real retention
    w.close()
    return w.data_dir


def load(spark: Any, data: Path, **options: str) -> Any:
    reader = spark.read.format("logbus").option("path", str(data))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_schema_and_values_are_what_was_appended(spark: Any, data: Path) -> None:
    df = load(spark, data, subscribe="orders", includeHeaders="true")
    assert df.schema.simpleString() == "struct<" + ",".join(
        f"{n}:{S.DDL[n].replace(' ', '')}" for n in S.columns(True)).replace("bigint", "bigint") + ">"
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    assert len(rows) == 60
    r = rows[13]  # partition 0, offset 13: batch 1, record 3
    assert (r.key, r.value, r.topic, r.partition, r.offset) == (b"k0", b"p0-13", "orders", 0, 13)
    assert r.timestamp == dt.datetime(1970, 1, 1, 0, 16, 40, 13_000)  # session time zone: UTC
    assert r.timestampType == 0
    assert [(h.key, h.value) for h in r.headers] == [("n", b"3")]
    assert (r.tag, r.protocol, r.properties) == ("tag1", "AMQP", {"routing_key": "rk.3"})
    assert [x.offset for x in rows if x.partition == 1] == list(range(30))
    # without includeHeaders there is no headers column (as the Kafka source)
    assert "headers" not in load(spark, data, subscribe="orders").columns


def test_auto_registration_through_pyspark_logbus(spark: Any) -> None:
    import pyspark_logbus

    assert pyspark_logbus.DefaultSource.name() == "logbus"
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    ddl_schema = spark.createDataFrame([], S.ddl(True)).schema
    assert isinstance(ddl_schema, StructType)
    assert to_arrow_schema(ddl_schema, timezone="UTC").equals(S.arrow_schema(S.columns(True)))


def test_offset_ranges(spark: Any, data: Path) -> None:
    df = load(spark, data, subscribe="orders",
              startingOffsets=json.dumps({"orders": {"0": 5, "1": -2}}),
              endingOffsets=json.dumps({"orders": {"0": 12, "1": -1}}))
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(5, 12)] + [(1, o) for o in range(30)]
    one = load(spark, data, assign=json.dumps({"orders": [1]}), startingOffsets="earliest",
               endingOffsets=json.dumps({"orders": {"1": 3}}))
    assert [(r.partition, r.offset) for r in one.collect()] == [(1, 0), (1, 1), (1, 2)]


def test_timestamp_ranges(spark: Any, data: Path) -> None:
    df = load(spark, data, subscribe="orders", startingTimestamp="1000015", endingTimestamp="1000021")
    assert sorted(r.offset for r in df.collect()) == [15, 15, 16, 16, 17, 17, 18, 18, 19, 19, 20, 20]
    per = load(spark, data, subscribe="orders",
               startingOffsetsByTimestamp=json.dumps({"orders": {"0": 1000028}}))
    got = sorted((r.partition, r.offset) for r in per.collect())
    assert got == [(0, 28), (0, 29)] + [(1, o) for o in range(30)]
    with pytest.raises(Exception, match="no record of orders/0 has a timestamp"):
        load(spark, data, subscribe="orders", startingTimestamp="99999999999").collect()
    late = load(spark, data, subscribe="orders", startingTimestamp="99999999999",
                startingOffsetsByTimestampStrategy="latest")
    assert late.count() == 0


def test_several_topics_and_patterns(spark: Any, data: Path) -> None:
    both = load(spark, data, subscribe="orders,orders-eu")
    counts = {r.topic: r["count"] for r in both.groupBy("topic").count().collect()}
    assert counts == {"orders": 60, "orders-eu": 5}
    pattern = load(spark, data, subscribePattern="orders.*")
    assert {r.topic for r in pattern.select("topic").distinct().collect()} == {"orders", "orders-eu"}
    assert load(spark, data, subscribePattern="order").count() == 0  # a whole-name match, like Java's


def test_retention_gap_and_fail_on_data_loss(spark: Any, data: Path) -> None:
    first = load(spark, data, subscribe="audit").agg({"offset": "min"}).collect()[0][0]
    assert first > 0  # earliest is the log start after retention
    asked = json.dumps({"audit": {"0": 0}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        load(spark, data, subscribe="audit", startingOffsets=asked).collect()
    rows = load(spark, data, subscribe="audit", startingOffsets=asked, failOnDataLoss="false").collect()
    assert sorted(r.offset for r in rows) == list(range(first, 60))


def test_splitting_into_input_partitions(spark: Any, data: Path) -> None:
    assert load(spark, data, subscribe="orders").rdd.getNumPartitions() == 2
    split = load(spark, data, subscribe="orders", maxRecordsPerPartition="7")
    assert split.rdd.getNumPartitions() == 10  # ceil(30 / 7) = 5 per partition
    assert sorted(r.offset for r in split.collect()) == sorted(list(range(30)) * 2)
    assert load(spark, data, subscribe="orders", minPartitions="6").rdd.getNumPartitions() == 6


def test_pushdown_of_partition_offset_and_timestamp(spark: Any, data: Path) -> None:
    df = load(spark, data, subscribe="orders", pushdown="true")
    q = df.where("partition = 1 AND offset >= 20 AND offset < 25")
    assert sorted((r.partition, r.offset) for r in q.collect()) == [(1, o) for o in range(20, 25)]
    assert q.rdd.getNumPartitions() == 1
    t = df.where(df.timestamp >= dt.datetime(1970, 1, 1, 0, 16, 40, 27_000, tzinfo=UTC))
    assert sorted(r.offset for r in t.collect()) == [27, 27, 28, 28, 29, 29]
    inlist = df.where("offset IN (3, 9) AND partition = 0")
    assert sorted(r.offset for r in inlist.collect()) == [3, 9]


def test_a_subset_schema_reads_only_those_columns(spark: Any, data: Path) -> None:
    df = spark.read.format("logbus").schema("offset bigint, key binary").option("path", str(data)) \
        .option("subscribe", "orders-eu").load()
    assert df.columns == ["offset", "key"]
    assert [tuple(r) for r in df.collect()] == [(i, b"eu") for i in range(5)]


@pytest.mark.parametrize("options, message", [
    ({}, "exactly one of 'subscribe'"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "exactly one of"),
    ({"subscribe": "orders", "startingOffsets": "latest"}, "not valid in a batch query"),
    ({"subscribe": "orders", "endingOffsets": "earliest"}, "may not be 'earliest'"),
    ({"subscribe": "orders", "kafka.bootstrap.servers": "h:9092"}, "reads the log files directly"),
    ({"subscribe": "orders", "minOffsetsPerTrigger": "5"}, "not supported"),
    ({"subscribe": "orders", "startingOffsets": "{bad"}, "not valid JSON"),
    ({"subscribe": "orders", "maxRecordsPerPartition": "0"}, "positive integer"),
])
def test_unsupported_combinations_are_refused_clearly(spark: Any, data: Path, options: dict[str, str],
                                                      message: str) -> None:
    with pytest.raises(Exception, match=message):
        load(spark, data, **options).collect()


def test_filter_sql_and_tag_return_what_df_filter_on_properties_returns(spark: Any, tmp_path: Path) -> None:
    """filterSql / filterTag, pushed into the reader, against Spark's own filter on the
    properties and tag columns of the unfiltered read."""
    w = LogWriter(tmp_path / "data")
    w.topic("sensors", partitions=2)
    for p in (0, 1):
        msgs = []
        for i in range(40):
            e = env(protocol=2, tag=("red", "blue", "")[i % 3], mqtt_topic=f"s/{i}")
            e.user_properties.add(key="temp", value=str(i))
            if i % 4:
                e.user_properties.add(key="region", value=("eu", "us")[i % 2])
            msgs.append(Message(b"s/%d" % i, b"%d-%d" % (p, i), 1_000 + i, [], e))
        w.append("sensors", p, msgs)
    w.close()
    from pyspark.sql import functions as F

    every = load(spark, w.data_dir, subscribe="sensors")
    cases = [
        ({"filterSql": "temp > 30 AND region = 'eu'"},
         (F.col("properties")["temp"].cast("int") > 30) & (F.col("properties")["region"] == "eu")),
        ({"filterSql": "region IS NULL OR temp < 3"},
         F.col("properties")["region"].isNull() | (F.col("properties")["temp"].cast("int") < 3)),
        ({"filterTag": "red || blue", "filterSql": "mqtt_topic LIKE 's/1%'"},
         F.col("tag").isin("red", "blue") & F.col("properties")["mqtt_topic"].like("s/1%")),
    ]
    for options, condition in cases:
        pushed = sorted(r.value for r in load(spark, w.data_dir, subscribe="sensors", **options).collect())
        theirs = sorted(r.value for r in every.filter(condition).collect())
        assert pushed == theirs and 0 < len(pushed) < 80, options
    with pytest.raises(Exception, match="filterSql"):
        load(spark, w.data_dir, subscribe="sensors", filterSql="temp >").collect()
