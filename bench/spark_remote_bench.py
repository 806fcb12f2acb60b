#!/usr/bin/env python3
"""Spark reading a topic from object storage against reading it from a data directory
(issue 48), and the first read's time in a new Python process.

Writes the same records (``--partitions`` x ``--records``, ~100-byte JSON values, keys of
``--keys`` devices) to two logs with the real log code: ``local`` (not tiered) and
``tiered`` (remote.storage.enable, 8 MiB segments, one segment kept locally), whose
sealed segments go up to a real S3-compatible store (SeaweedFS, ``weed mini``). Then in
one local Spark session, in ``--rounds`` rounds (order swapped each round), times
``count()`` and ``groupBy("key").count()`` through ``format("logbus")`` with
``path`` = the local log, and with ``remote`` = the bucket (plus ``path`` = the tiered
log's directory for its last segment). Rows/s per read; medians; ratios remote/local.

First read: a new Python process decodes one chunk of the log (``read_range``), timed
from the interpreter's start, twice with a fresh numba cache directory (the first
compiles the decoder and fills the cache, the second loads it) and once with the
package's own cache (``cache=True``: what every Spark worker after the first gets).

    python bench/spark_remote_bench.py --partitions 2 --records 500000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from tests.remote_store import RemoteStore  # noqa: E402

SEGMENT = 8 << 20


def write(data: Path, partitions: int, records: int, keys: int, remote: dict[str, str] | None) -> None:
    from logbus.core.log import LogManager, Record, TopicConfig
    from tests.loop import LoopReactor

    loop = LoopReactor()
    lm = LogManager(data, loop, **(remote or {}))
    cfg = TopicConfig(partitions=partitions, flush="none", segment_bytes=SEGMENT, retention_ms=-1,
                      remote_storage_enable=remote is not None, local_retention_bytes=SEGMENT if remote else -2)
    topic = lm.open_topic("telemetry", cfg, create=True)
    rnd = random.Random(7)
    now = int(time.time() * 1000)
    for p in topic.partitions:
        for i in range(0, records, 1000):
            batch = []
            for j in range(i, min(records, i + 1000)):
                dev = rnd.randrange(keys)
                value = b'{"device":"device-%04d","temp":%.3f,"seq":%d}' % (dev, rnd.uniform(-10, 40), j)
                batch.append(Record(b"device-%04d" % dev, value.ljust(100), now))
            p.append(batch)
            lm.drain()
    if remote:
        deadline = time.monotonic() + 900
        while not all(p.remote is not None and p.remote.end_offset == p.segments[-2].next_offset
                      and len(p.segments) <= 3 for p in topic.partitions):
            if time.monotonic() > deadline:
                raise SystemExit("uploads did not catch up in 900 s")
            lm.housekeeping()
            loop.run_once(block=0.05)
    lm.close()
    while loop.run_once():
        pass


FIRST_READ = """
import time; t0 = time.perf_counter()
from logbus.spark.plan import OffsetRange, read_range
rows = sum(rb.num_rows for rb in read_range({path!r}, OffsetRange("telemetry", 0, 0, 10000), ("key", "value"), True))
print(rows, round(time.perf_counter() - t0, 3))
"""


def first_read(path: str, cache_dir: str | None) -> float:
    env = {**os.environ, "PYTHONPATH": ROOT}
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", FIRST_READ.format(path=path)], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[0] == "10000", out
    return round(time.perf_counter() - t0, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--records", type=int, default=500_000, help="per partition")
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spark-remote-bench-"))
    (work / "s3").mkdir()
    store = RemoteStore(work / "s3")
    store.start()
    os.environ.update(store.env)
    remote = {"remote_storage": store.url("bench"), "remote_storage_endpoint": store.endpoint}
    try:
        write(work / "local", args.partitions, args.records, args.keys, None)
        write(work / "tiered", args.partitions, args.records, args.keys, remote)
        rows = args.partitions * args.records
        print(f"wrote {rows} records to each log", file=sys.stderr)
        first = {"cold_numba_cache_s": first_read(str(work / "local"), str(work / "numba")),
                 "warm_numba_cache_s": first_read(str(work / "local"), str(work / "numba")),
                 "package_cache_s": first_read(str(work / "local"), None)}
        print(f"first read: {first}", file=sys.stderr)

        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYTHONPATH"] = ROOT
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master("local[2]").appName("spark-remote-bench")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        from logbus.spark import register

        register(spark)
        sources = {"local": {"path": str(work / "local")},
                   "s3": {"path": str(work / "tiered"), "remote": remote["remote_storage"],
                          "remote.endpoint": remote["remote_storage_endpoint"]}}

        def timed(source: str, query: str) -> float:
            reader = spark.read.format("logbus").option("subscribe", "telemetry")
            for k, v in sources[source].items():
                reader = reader.option(k, v)
            df = reader.load()
            t0 = time.perf_counter()
            n = df.count() if query == "count" else sum(r["count"] for r in df.groupBy("key").count().collect())
            took = time.perf_counter() - t0
            assert n == rows, (source, query, n)
            return round(rows / took)

        timed("local", "count")  # the JVM and the workers warmed up
        runs: list[dict[str, int]] = []
        for r in range(args.rounds):
            order = ["local", "s3"] if r % 2 == 0 else ["s3", "local"]
            got = {f"{s}_{q}": timed(s, q) for s in order for q in ("count", "groupby")}
            print(f"round {r + 1}: {got}", file=sys.stderr)
            runs.append(got)
        spark.stop()
        med = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
        print(json.dumps({
            "rows": rows, "rounds": runs, "median_rows_s": med,
            "s3_over_local_count": round(med["s3_count"] / med["local_count"], 3),
            "s3_over_local_groupby": round(med["s3_groupby"] / med["local_groupby"], 3),
            "first_read": first,
        }, indent=2))
    finally:
        store.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
