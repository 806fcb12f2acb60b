"""The PySpark data source ``logbus``: batch reads (``spark.read.format("logbus")``).

Theory of operation. Planning runs on the driver's Python worker: the options are
checked (``options.py``), the partitions to read are listed from the data directory,
each one's readable end is found (``logfiles.PartitionFiles.end``: the last complete,
CRC-valid batch) and the start and end specs are resolved to offsets; the ranges are
split into input partitions (``plan.split``). Each Spark task then reads one range
from the segment files (``plan.read_range``) and yields Arrow batches built against
``schema.ARROW``, so Spark takes them without a row-by-row conversion.

Filter pushdown (``pushdown=true``, and Spark's
``spark.sql.python.filterPushdown.enabled=true``, pyspark >= 4.1): comparisons of
``partition`` and ``offset`` with literals narrow the ranges before any file is read;
``timestamp`` lower bounds skip batches whose largest timestamp is older; the source
then applies each pushed filter to the rows itself, so Spark need not.

A user-given schema may name a subset of the columns (same names and types): only
those are decoded (column pruning by hand; Spark's Python sources have no API for it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from . import schema as S
from .options import OptionError, Options, resolve_end, resolve_start
from .plan import OffsetRange, RowFilter, prune, read_range, split


class RangePartition(InputPartition):
    """One Spark task: offsets ``[lo, hi)`` of one topic partition."""

    def __init__(self, r: OffsetRange, earliest: bool = False) -> None:
        super().__init__((r.topic, r.partition, r.lo, r.hi))
        self.range = r
        self.earliest = earliest


class LogbusDataSource(DataSource):
    """``spark.read.format("logbus").option("path", DIR).option("subscribe", T).load()``"""

    @classmethod
    def name(cls) -> str:
        return "logbus"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return S.ddl(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = Options.parse(self.options, streaming=False)
        names = _column_names(schema, opts)
        return PushdownReader(opts, names) if opts.pushdown else BatchReader(opts, names)

    def streamReader(self, schema: StructType) -> Any:
        from .stream import LogbusStreamReader

        opts = Options.parse(self.options, streaming=True)
        return LogbusStreamReader(opts, _column_names(schema, opts))


_SPARK_TYPES = {
    "key": BinaryType(),
    "value": BinaryType(),
    "topic": StringType(),
    "partition": IntegerType(),
    "offset": LongType(),
    "timestamp": TimestampType(),
    "timestampType": IntegerType(),
    "headers": ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
    "properties": MapType(StringType(), StringType()),
    "tag": StringType(),
    "protocol": StringType(),
}


def _column_names(schema: StructType, opts: Options) -> tuple[str, ...]:
    """The columns to produce: the schema's, which must be ours (all, or a subset)."""
    names = tuple(schema.fieldNames())
    allowed = S.columns(opts.include_headers)
    for field in schema.fields:
        if field.name not in allowed:
            raise OptionError(
                f"column {field.name!r} is not produced by the logbus source (columns: {', '.join(allowed)})"
            )
        if field.dataType != _SPARK_TYPES[field.name]:
            raise OptionError(f"column {field.name!r} has type {S.DDL[field.name]} in the logbus source")
    return names


class BatchReader(DataSourceReader):
    def __init__(self, opts: Options, names: tuple[str, ...]) -> None:
        self.opts = opts
        self.names = names
        self.filters: list[RowFilter] = []

    def ranges(self) -> list[OffsetRange]:
        opts = self.opts
        data = opts.location.open()
        out = []
        for tp in opts.topic_partitions(data):
            pf = data.partition(*tp)
            end = pf.end()
            if opts.committed:
                end = pf.stable_end(end)
            lo = resolve_start(opts.start, tp, pf, end, opts, "earliest")
            hi = resolve_end(opts.end, tp, pf, end)
            out.append(OffsetRange(tp[0], tp[1], lo, max(lo, hi)))
        return out

    def partitions(self) -> Sequence[InputPartition]:
        ranges = prune(self.ranges(), self.filters)
        parts = split(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        return [RangePartition(r) for r in parts]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, RangePartition):  # Spark's stand-in when there are none
            return
        yield from read_range(self.opts.location, partition.range, self.names, self.opts.fail_on_data_loss, self.filters,
                              keep=self.opts.message_filter(), committed=self.opts.committed)


class PushdownReader(BatchReader):
    """BatchReader with ``pushFilters`` (PySpark refuses a reader that has it unless
    ``spark.sql.python.filterPushdown.enabled`` is true, hence a class of its own)."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        for f in filters:
            translated = translate_filter(f)
            if translated is None:
                yield f
            else:
                self.filters.append(translated)


_OPS = {
    "EqualTo": "=", "GreaterThan": ">", "GreaterThanOrEqual": ">=",
    "LessThan": "<", "LessThanOrEqual": "<=", "In": "in",
}


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def translate_filter(f: Any) -> RowFilter | None:
    """A pyspark Filter on partition, offset or timestamp -> RowFilter; else None."""
    op = _OPS.get(type(f).__name__)
    attr = getattr(f, "attribute", None)
    if op is None or not attr or len(attr) != 1 or attr[0] not in ("partition", "offset", "timestamp"):
        return None
    column = attr[0]
    raw = f.value
    values = list(raw) if op == "in" else [raw]
    conv = []
    for v in values:
        if column == "timestamp":
            if not isinstance(v, dt.datetime):
                return None
            if v.tzinfo is None:
                v = v.astimezone()  # Spark hands naive local datetimes
            # exact integer milliseconds (a float product loses one for some values)
            conv.append((v - _EPOCH) // dt.timedelta(milliseconds=1) if v.microsecond % 1000 == 0 else None)
        elif isinstance(v, int) and not isinstance(v, bool):
            conv.append(v)
        else:
            return None
    if None in conv:
        return None  # sub-millisecond literal: leave it to Spark
    return RowFilter(column, op, tuple(conv) if op == "in" else conv[0])
