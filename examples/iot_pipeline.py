#!/usr/bin/env python3
"""IoT telemetry -> per-device, per-minute aggregates -> Parquet, with Spark reading the
logbus log directly (no broker round-trip).

Devices publish JSON readings (``{"device": "d-7", "temp": 21.5, "hum": 40.1}``) to the
topic ``telemetry`` through any protocol (MQTT, AMQP, Kafka). This job streams the log,
groups readings by device and one-minute event-time window (late data: 2 minutes of
watermark) and appends each closed window to Parquet: count, mean/min/max temperature,
mean humidity. A checkpoint makes restarts exactly-once.

    python examples/iot_pipeline.py --data-dir ./data --out ./aggregates
    python examples/iot_pipeline.py --data-dir ./data --out ./aggregates --demo 20000   # writes sample data first
    python examples/iot_pipeline.py ... --once      # process what is there, then stop (availableNow)

``--demo`` writes its sample readings the way a user's devices would reach them: when a
broker holds the data directory (``make run`` serves ``./data``), they are produced
through that broker's Kafka listener (``--bootstrap``, ``make run``'s 127.0.0.1:9092),
because only the process holding a data directory may write it; otherwise the example
opens the directory itself as a broker would (taking its lock, recording the topic), so
a broker started there later knows the topic. Through a broker, the topic is created as
``LOGBUS_USER`` / ``LOGBUS_PASSWORD`` (SASL PLAIN; default guest/guest, ``make run``'s
administrator: a client without credentials may not create topics), and the readings are
produced without credentials (publish is what such a client is given).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import zlib
from collections.abc import Iterator
from typing import Any

TOPIC = "telemetry"
PARTITIONS = 2


class DemoError(Exception):
    """The sample data cannot be written; the message says why and what to do."""


def readings(records: int) -> Iterator[tuple[bytes, bytes, int]]:
    """(device, JSON reading, timestamp ms): 20 devices, one reading every 50 ms."""
    rnd = random.Random(1)
    t0 = 1_700_000_000_000
    for i in range(records):
        dev = f"d-{rnd.randrange(20)}"
        body = json.dumps({"device": dev, "temp": round(rnd.gauss(21, 3), 2), "hum": round(rnd.uniform(30, 60), 1)})
        yield dev.encode(), body.encode(), t0 + i * 50


def write_demo(data_dir: str, records: int, bootstrap: str) -> str:
    """Append ``records`` sample readings to topic telemetry; returns how it was done."""
    from logbus.core.broker import Broker, DataDirLocked

    broker = Broker(data_dir)
    try:
        broker.start()  # the data directory's lock, as `logbus serve` takes it
    except DataDirLocked as e:
        produce_over_kafka(bootstrap, records, str(e))
        return f"produced through the broker at {bootstrap}"
    append_locally(broker, records)
    return f"appended to {data_dir}"


def append_locally(broker: Any, records: int) -> None:
    """Through the broker facade on the reactor, as `logbus serve` stores MQTT publishes;
    the lock is released when the broker stops."""
    from twisted.internet import defer
    from twisted.internet import reactor as _reactor

    reactor: Any = _reactor

    from logbus.core.envelope_pb2 import Envelope
    from logbus.core.message import Message

    failure: list[Any] = []

    @defer.inlineCallbacks
    def run() -> Any:
        try:
            if TOPIC not in {t.name for t in broker.topics.list_topics()}:
                broker.topics.create_topic(TOPIC, {"partitions": PARTITIONS})
            parts = len(broker.topics.describe_topic(TOPIC).partitions)
            chunk: dict[int, list[Any]] = {}
            for i, (dev, body, ts) in enumerate(readings(records), 1):
                msg = Message(dev, body, ts, [], Envelope(protocol=Envelope.MQTT, tag=TOPIC,
                                                          mqtt_topic=f"devices/{dev.decode()}/telemetry"))
                chunk.setdefault(zlib.crc32(dev) % parts, []).append(msg.to_record())
                if i % 1000 == 0 or i == records:
                    yield defer.gatherResults([broker.append(TOPIC, p, recs) for p, recs in chunk.items()],
                                              consumeErrors=True)
                    chunk = {}
        except BaseException:
            failure.append(sys.exc_info()[1])
        finally:
            yield broker.stop()
            reactor.stop()

    reactor.callWhenRunning(run)
    reactor.run(installSignalHandlers=False)
    if failure:
        raise failure[0]


def produce_over_kafka(bootstrap: str, records: int, locked: str) -> None:
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000,
                                 security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                 sasl_plain_username=os.environ.get("LOGBUS_USER") or "guest",
                                 sasl_plain_password=os.environ.get("LOGBUS_PASSWORD") or "guest")
    except KafkaError as e:
        raise DemoError(f"{locked}, and no broker answered Kafka requests at {bootstrap} ({e!r}). "
                        "Give its Kafka address with --bootstrap, or stop it, or choose another --data-dir "
                        "(nothing was written).") from None
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    try:
        parts = len(producer.partitions_for(TOPIC) or ()) or 1
        for dev, body, ts in readings(records):
            producer.send(TOPIC, value=body, key=dev, partition=zlib.crc32(dev) % parts, timestamp_ms=ts)
        producer.flush(60)
    finally:
        producer.close(10)


def build(spark, data_dir: str):  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    schema = "device string, temp double, hum double"
    readings = (
        spark.readStream.format("logbus")
        .option("path", data_dir)
        .option("subscribe", "telemetry")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "200000")
        .load()
        .select(F.from_json(F.col("value").cast("string"), schema).alias("r"), "timestamp")
        .select("r.*", "timestamp")
        .where(F.col("device").isNotNull())
    )
    return (
        readings.withWatermark("timestamp", "2 minutes")
        .groupBy(F.window("timestamp", "1 minute").alias("minute"), "device")
        .agg(
            F.count("*").alias("readings"),
            F.avg("temp").alias("temp_avg"),
            F.min("temp").alias("temp_min"),
            F.max("temp").alias("temp_max"),
            F.avg("hum").alias("hum_avg"),
        )
        .select(F.col("minute.start").alias("minute"), "device", "readings", "temp_avg", "temp_min", "temp_max",
                "hum_avg")
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="./data")
    ap.add_argument("--out", default="./aggregates")
    ap.add_argument("--checkpoint", help="default: <out>/_checkpoint")
    ap.add_argument("--demo", type=int, default=0, help="append this many sample readings first")
    ap.add_argument("--bootstrap", default="127.0.0.1:9092",
                    help="Kafka address of the broker holding --data-dir, for --demo (default: make run's)")
    ap.add_argument("--once", action="store_true", help="process what is in the log, then stop")
    args = ap.parse_args()
    if args.demo:
        try:
            how = write_demo(args.data_dir, args.demo, args.bootstrap)
        except DemoError as e:
            sys.exit(f"iot_pipeline: {e}")
        print(f"iot_pipeline: {args.demo} sample readings {how}", flush=True)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from logbus.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("logbus-iot-pipeline")
             .config("spark.sql.session.timeZone", "UTC").config("spark.sql.shuffle.partitions", "4")
             .getOrCreate())
    register(spark)
    writer = (build(spark, args.data_dir).writeStream.outputMode("append").format("parquet")
              .option("path", args.out)
              .option("checkpointLocation", args.checkpoint or os.path.join(args.out, "_checkpoint")))
    query = (writer.trigger(availableNow=True) if args.once else writer.trigger(processingTime="10 seconds")).start()
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
