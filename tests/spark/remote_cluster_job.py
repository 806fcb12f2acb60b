"""A Spark job, by default in local-cluster mode (two executor JVMs, one core each): the
``logbus`` source reads a topic from a bucket and a data directory; prints one JSON line
with the count, the rows per key, the executors that read and the count of the bucket
alone (no ``path``) (tests/spark/test_spark_remote.py,
tests/integration/test_tiering.py).

    python tests/spark/remote_cluster_job.py TOPIC PATH REMOTE ENDPOINT [MASTER]
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from pyspark.sql import SparkSession


def main(topic: str, path: str, remote: str, endpoint: str, master: str = "local-cluster[2,1,1024]") -> None:
    spark = (SparkSession.builder.master(master).appName("logbus-remote-cluster")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from logbus.spark import register

    register(spark)
    def load(**extra: str) -> Any:
        reader = (spark.read.format("logbus").option("subscribe", topic).option("remote", remote)
                  .option("remote.endpoint", endpoint).option("minPartitions", "8"))
        for k, v in extra.items():
            reader = reader.option(k, v)
        return reader.load()

    df = load(path=path)
    by_key = {r["key"].decode(): r["count"] for r in df.groupBy("key").count().collect()}
    readers = df.rdd.mapPartitions(lambda rows: [(os.getppid(), sum(1 for _ in rows))]).collect()
    print(json.dumps({"count": df.count(), "by_key": by_key, "read": sum(n for _, n in readers),
                      "worker_daemons": len({pid for pid, n in readers if n}),
                      "remote_only_count": load().count()}))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
