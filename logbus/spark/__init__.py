"""Spark reads the log natively: the PySpark data source ``logbus``
(docs/architecture.md section 7, docs/spark.md).

    from logbus.spark import register
    register(spark)                     # or install logbus: pyspark_logbus registers it
    df = (spark.read.format("logbus").option("path", "/var/lib/logbus")
          .option("subscribe", "telemetry").load())

Modules: ``logfiles`` (read-only view of a data directory), ``decode`` (RecordBatch
bytes -> Arrow), ``schema``, ``options`` (Kafka-source options), ``plan`` (offset
ranges and tasks), ``source`` (batch), ``stream`` (micro-batches), ``export`` (Parquet
without Spark). Nothing here imports Twisted or the broker.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LogbusDataSource", "register"]


def __getattr__(name: str) -> Any:
    if name == "LogbusDataSource":  # imports pyspark: only when asked for
        from .source import LogbusDataSource

        return LogbusDataSource
    raise AttributeError(name)


def register(spark: Any) -> None:
    """Register the ``logbus`` format with a SparkSession."""
    from .source import LogbusDataSource

    spark.dataSource.register(LogbusDataSource)
