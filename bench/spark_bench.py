#!/usr/bin/env python3
"""Spark reading the log (``format("logbus")``) against Parquet and an Arrow IPC bound.

Writes ``--partitions`` x ``--records`` records (key ``device-NNNN`` of ``--keys``
distinct, a JSON telemetry value of about ``--value-bytes`` bytes, an AMQP-style envelope
on every ``--envelope-every``-th record) to a fresh log, exports the same records to
Parquet (``logbus export parquet``) and to Arrow IPC files, then in one local Spark
session (``local[2]``) times, ``--runs`` times each:

- ``count()`` and ``groupBy("key").count()`` through ``format("logbus")``;
- the same through ``format("logbus")`` with a user schema of only ``key binary`` (the
  source then decodes only the key: column pruning by hand);
- the same through ``spark.read.parquet`` of the exported files;
- the same through a minimal Python data source that only yields the IPC files' Arrow
  batches: the upper bound of any Python data source with this schema.

Prints one JSON document (rows/s per source and query, the best of the runs, all
runs, and the ratios the issue's targets use).

    python bench/spark_bench.py --partitions 4 --records 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)


def write_log(data_dir: str, partitions: int, records: int, value_bytes: int, keys: int, envelope_every: int) -> float:
    from logbus.core.envelope_pb2 import Envelope
    from logbus.core.log import LogManager, TopicConfig
    from logbus.core.message import Message
    from tests.loop import LoopReactor

    loop = LoopReactor()
    lm = LogManager(data_dir, loop)
    topic = lm.open_topic("telemetry", TopicConfig(partitions=partitions, flush="none"), create=True)
    rnd = random.Random(7)
    ts0 = 1_700_000_000_000
    t0 = time.perf_counter()
    for p in range(partitions):
        part = topic.partition(p)
        for i in range(0, records, 1000):
            batch = []
            for j in range(i, min(records, i + 1000)):
                dev = rnd.randrange(keys)
                value = b'{"device":"device-%04d","temp":%.3f,"hum":%.2f,"seq":%d,"fw":"1.%d"}' % (
                    dev, rnd.uniform(-10, 40), rnd.uniform(0, 100), j, rnd.randrange(20))
                value += b" " * max(0, value_bytes - len(value) + rnd.randrange(-8, 9))
                env = Envelope(protocol=Envelope.MQTT, tag="telemetry", mqtt_topic=f"devices/{dev}") if (
                    envelope_every and j % envelope_every == 0) else Envelope()
                batch.append(Message(b"device-%04d" % dev, value, ts0 + j * 10, [], env).to_record())
            part.append(batch)
            lm.drain()
    lm.close()
    return time.perf_counter() - t0


def write_copies(data_dir: str, out: str, partitions: int) -> None:
    import pyarrow as pa
    from pyarrow import ipc

    from logbus.spark import schema as S
    from logbus.spark.export import export_parquet
    from logbus.spark.logfiles import DataDir
    from logbus.spark.plan import OffsetRange, read_range

    export_parquet(data_dir, "telemetry", os.path.join(out, "parquet"), compression="snappy")
    names = S.columns(False)
    os.makedirs(os.path.join(out, "ipc"), exist_ok=True)
    for p in range(partitions):
        pf = DataDir(data_dir).partition("telemetry", p)
        with pa.OSFile(os.path.join(out, "ipc", f"{p}.arrow"), "wb") as sink:
            with ipc.new_file(sink, S.arrow_schema(names)) as w:
                for rb in read_range(data_dir, OffsetRange("telemetry", p, pf.start(), pf.end()), names, True):
                    w.write_batch(rb)


def ipc_source(directory: str) -> Any:
    """A Python data source yielding the Arrow IPC files' batches, nothing else."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from logbus.spark import schema as S

    class IPCReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(os.path.join(directory, n)) for n in sorted(os.listdir(directory))]

        def read(self, partition: InputPartition) -> Any:
            import pyarrow as pa
            from pyarrow import ipc

            with pa.memory_map(partition.value) as f:
                r = ipc.open_file(f)
                for i in range(r.num_record_batches):
                    yield r.get_batch(i)

    class IPCBound(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ipcbound"

        def schema(self) -> str:
            return S.ddl(False)

        def reader(self, schema: Any) -> DataSourceReader:
            return IPCReader()

    return IPCBound


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--records", type=int, default=1_000_000, help="per partition")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--envelope-every", type=int, default=10, help="0: no envelopes")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    args = ap.parse_args()

    work = args.dir or tempfile.mkdtemp(prefix="spark-bench-")
    data_dir = os.path.join(work, "data")
    result: dict[str, Any] = {"args": vars(args), "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}}
    try:
        if not os.path.isdir(os.path.join(data_dir, "log")):
            result["write_log_s"] = write_log(data_dir, args.partitions, args.records, args.value_bytes, args.keys,
                                              args.envelope_every)
            t0 = time.perf_counter()
            write_copies(data_dir, work, args.partitions)
            result["write_copies_s"] = time.perf_counter() - t0
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.abspath(ROOT), os.environ.get("PYTHONPATH")]))
        from pyspark import __version__ as pyspark_version
        from pyspark.sql import SparkSession

        from logbus.spark import register

        spark = (SparkSession.builder.master(args.master).appName("logbus-spark-bench")
                 .config("spark.driver.memory", args.driver_memory).config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "4").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        spark.dataSource.register(ipc_source(os.path.join(work, "ipc")))
        result["pyspark"] = pyspark_version
        total = args.partitions * args.records
        frames = {
            "logbus": lambda: spark.read.format("logbus").option("path", data_dir).option("subscribe", "telemetry").load(),
            # the same through a user schema naming only the column the query needs (the
            # source then decodes only that; Python sources have no column-pruning API)
            "logbus_key_only": lambda: spark.read.format("logbus").schema("key binary").option("path", data_dir)
            .option("subscribe", "telemetry").load(),
            "parquet": lambda: spark.read.parquet(os.path.join(work, "parquet")),
            "ipc_bound": lambda: spark.read.format("ipcbound").load(),
        }
        queries = {
            "count": lambda df: df.count(),
            "groupBy": lambda df: len(df.groupBy("key").count().collect()),
        }
        runs: dict[str, dict[str, list[float]]] = {s: {q: [] for q in queries} for s in frames}
        checks: dict[str, dict[str, int]] = {s: {} for s in frames}
        for q, query in queries.items():
            query(frames["logbus"]())  # warm up: JVM, Python workers, page cache
        for _ in range(args.runs):
            for s, frame in frames.items():
                for q, query in queries.items():
                    t0 = time.perf_counter()
                    checks[s][q] = query(frame())
                    runs[s][q].append(total / (time.perf_counter() - t0))
        spark.stop()
        for q in queries:
            if len({checks[s][q] for s in frames}) != 1:
                raise SystemExit(f"sources disagree on {q}: {checks}")
        best = {s: {q: max(v) for q, v in qs.items()} for s, qs in runs.items()}
        result.update({
            "rows": total,
            "rows_per_s_best": best,
            "rows_per_s_runs": runs,
            "answers": checks["logbus"],
            "ratios": {
                s: {q: {"vs_parquet": best[s][q] / best["parquet"][q],
                        "vs_ipc_bound": best[s][q] / best["ipc_bound"][q]} for q in queries}
                for s in ("logbus", "logbus_key_only")
            },
        })
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
