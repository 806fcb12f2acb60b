"""``logbus export parquet``: a topic's records as Parquet files, without Spark.

One file per partition, ``<out>/<topic dir>-<partition>.parquet``, with the ``logbus``
source's columns (schema.py), written as the files are read (a few MiB of batches at a
time), from the log start to the readable end at the moment the export starts. Like the
Spark source it only reads the segment files, so it runs beside a live broker.
"""

from __future__ import annotations

from collections.abc import Callable

import os
from dataclasses import dataclass

import pyarrow.parquet as pq

from . import schema as S
from .logfiles import DataDir, LogReadError
from .plan import OffsetRange, read_range


@dataclass
class Exported:
    partition: int
    path: str
    records: int
    first_offset: int
    end_offset: int


def export_parquet(data_dir: str, topic: str, out_dir: str, *, include_headers: bool = False,
                   compression: str = "zstd",
                   progress: Callable[[int, int], object] | None = None) -> list[Exported]:
    """``progress(records written, records in all)``, after each batch written."""
    data = DataDir(data_dir)
    parts = data.partitions(topic)
    if not parts:
        raise LogReadError(f"no topic {topic!r} in {data_dir}")
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
        path = os.path.join(out_dir, f"{stem}-{p}.parquet")
        tmp = path + ".tmp"
        count = 0
        with pq.ParquetWriter(tmp, arrow, compression=compression) as writer:
            for rb in read_range(data_dir, OffsetRange(topic, p, start, end), names, False, earliest=True):
                writer.write_batch(rb)
                count += rb.num_rows
                written += rb.num_rows
                if progress is not None:
                    progress(written, total)
        os.replace(tmp, path)
        done.append(Exported(p, path, count, start, end))
    return done
