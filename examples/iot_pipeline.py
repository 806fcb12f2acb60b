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
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def write_demo(data_dir: str, records: int) -> None:
    """Sample readings appended with the real log (as the broker would store them)."""
    import json
    import random
    import zlib

    from logbus.core.envelope_pb2 import Envelope
    from logbus.core.log import LogManager, TopicConfig
    from logbus.core.message import Message
    from tests.loop import LoopReactor

    loop = LoopReactor()
    lm = LogManager(data_dir, loop)
    fresh = not os.path.isdir(os.path.join(data_dir, "log", "telemetry"))
    topic = lm.open_topic("telemetry", TopicConfig(partitions=2, flush="none"), create=fresh)
    rnd = random.Random(1)
    t0 = 1_700_000_000_000
    for i in range(records):
        dev = f"d-{rnd.randrange(20)}"
        body = json.dumps({"device": dev, "temp": round(rnd.gauss(21, 3), 2), "hum": round(rnd.uniform(30, 60), 1)})
        msg = Message(dev.encode(), body.encode(), t0 + i * 50, [],
                      Envelope(protocol=Envelope.MQTT, mqtt_topic=f"devices/{dev}/telemetry", tag="telemetry"))
        topic.partition(zlib.crc32(dev.encode()) % 2).append([msg.to_record()])
        if i % 1000 == 999:
            lm.drain()
    lm.close()


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
    ap.add_argument("--once", action="store_true", help="process what is in the log, then stop")
    args = ap.parse_args()
    if args.demo:
        write_demo(args.data_dir, args.demo)

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
