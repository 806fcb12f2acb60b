"""``logbus export parquet``: a topic's records as Parquet files, without Spark.

One file per partition, ``<out>/<topic dir>-<partition>.parquet``, with the ``logbus``
source's columns (schema.py), written as the files are read (a few MiB of batches at a
time), from the log start to the readable end at the moment the export starts. Like the
Spark source it only reads the segment files, so it runs beside a live broker; it reads
a tiered topic's remote segments from the bucket too (remotefiles.py), and ``out`` may be
``s3://BUCKET/PREFIX`` (written through pyarrow's S3 filesystem).
"""

from __future__ import annotations

from collections.abc import Callable

import os
from dataclasses import dataclass

import pyarrow.parquet as pq

from . import schema as S
from ..core.log.manifest import parse_remote
from .logfiles import LogReadError
from .plan import OffsetRange, read_range
from .remotefiles import Location, filesystem


@dataclass
class Exported:
    partition: int
    path: str
    records: int
    first_offset: int
    end_offset: int


def export_parquet(where: str | Location, topic: str, out_dir: str, *, include_headers: bool = False,
                   compression: str = "zstd",
                   progress: Callable[[int, int], object] | None = None) -> list[Exported]:
    """``progress(records written, records in all)``, after each batch written. ``where``:
    a data directory, or a Location (with the bucket a broker tiers to); an ``out_dir``
    of ``s3://BUCKET/PREFIX`` is written at the Location's endpoint."""
    where = Location(where) if isinstance(where, str) else where
    data = where.open()
    parts = data.partitions(topic)
    if not parts:
        raise LogReadError(f"no topic {topic!r} in {where}")
    fs = None
    if out_dir.startswith("s3://"):
        bucket, prefix = parse_remote(out_dir)
        fs, out_dir = filesystem(where.endpoint), f"{bucket}/{prefix}".rstrip("/")
    else:
        os.makedirs(out_dir, exist_ok=True)
    names = S.columns(include_headers)
    arrow = S.arrow_schema(names)
    from urllib.parse import quote

    stem = quote(topic, safe="")
    ranges = []
    for p in parts:
        pf = data.partition(topic, p)
        ranges.append((p, pf.start(), pf.end()))
    total = sum(end - start for _, start, end in ranges)
    written = 0
    done = []
    for p, start, end in ranges:
        path = f"{out_dir}/{stem}-{p}.parquet" if fs is not None else os.path.join(out_dir, f"{stem}-{p}.parquet")
        tmp = path if fs is not None else path + ".tmp"  # an object appears whole when written
        count = 0
        with pq.ParquetWriter(tmp, arrow, compression=compression, filesystem=fs) as writer:
            for rb in read_range(where, OffsetRange(topic, p, start, end), names, False, earliest=True):
                writer.write_batch(rb)
                count += rb.num_rows
                written += rb.num_rows
                if progress is not None:
                    progress(written, total)
        if fs is None:
            os.replace(tmp, path)
        done.append(Exported(p, f"s3://{path}" if fs is not None else path, count, start, end))
    return done
