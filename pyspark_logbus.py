"""Auto-registration of the ``logbus`` Spark data source: PySpark (>= 4.0) imports every
top-level module named ``pyspark_*`` on its path and registers its ``DefaultSource``."""

from logbus.spark.source import LogbusDataSource as DefaultSource

__all__ = ["DefaultSource"]
