"""The rows a ``logbus`` read produces: Spark's Kafka source schema plus the envelope.

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int,
    headers array<struct<key: string, value: binary>>     (only with includeHeaders=true)
    properties map<string,string>, tag string, protocol string

``ARROW`` is the Arrow schema PySpark expects for it (``to_arrow_schema`` with UTC; a
test keeps the two equal): every Arrow batch a reader yields is built against it.
"""

from __future__ import annotations

import pyarrow as pa

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
ENVELOPE_COLUMNS = ("properties", "tag", "protocol")

HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())

ARROW = {
    "key": pa.binary(),
    "value": pa.binary(),
    "topic": pa.string(),
    "partition": pa.int32(),
    "offset": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestampType": pa.int32(),
    "headers": HEADERS_TYPE,
    "properties": PROPERTIES_TYPE,
    "tag": pa.string(),
    "protocol": pa.string(),
}

DDL = {
    "key": "binary",
    "value": "binary",
    "topic": "string",
    "partition": "int",
    "offset": "bigint",
    "timestamp": "timestamp",
    "timestampType": "int",
    "headers": "array<struct<key: string, value: binary>>",
    "properties": "map<string, string>",
    "tag": "string",
    "protocol": "string",
}


def columns(include_headers: bool) -> tuple[str, ...]:
    extra = ("headers",) if include_headers else ()
    return KAFKA_COLUMNS + extra + ENVELOPE_COLUMNS


def ddl(include_headers: bool) -> str:
    return ", ".join(f"{name} {DDL[name]}" for name in columns(include_headers))


def arrow_schema(names: tuple[str, ...] | list[str]) -> pa.Schema:
    return pa.schema([pa.field(n, ARROW[n]) for n in names])
