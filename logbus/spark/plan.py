"""Offset ranges: how a read is cut into Spark tasks, and how one task reads its range.

A query reads, for each (topic, partition), the offsets ``[lo, hi)``. ``split`` cuts
ranges as the Kafka source does: no range above ``maxRecordsPerPartition`` records,
and, when ``minPartitions`` asks for more tasks than ranges, large ranges are cut in
proportion to their size. ``read_range`` runs in a Spark task: it seeks through the
sparse index, decodes a few MiB of batches at a time and yields Arrow batches of at
most ``ROWS_PER_BATCH`` rows, applying pushed-down row filters.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..core.log import format as F
from .logfiles import DataLoss
from .remotefiles import Location

log = logging.getLogger(__name__)

ROWS_PER_BATCH = 64 * 1024


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    lo: int  # first offset
    hi: int  # offset after the last

    @property
    def size(self) -> int:
        return self.hi - self.lo


@dataclass(frozen=True)
class RowFilter:
    """A pushed-down comparison on ``partition``, ``offset`` or ``timestamp`` (epoch ms
    for timestamps): ``op`` is one of = < <= > >= in."""

    column: str
    op: str
    value: Any


def split(ranges: Sequence[OffsetRange], min_partitions: int | None, max_records: int | None) -> list[OffsetRange]:
    out: list[OffsetRange] = []
    for r in ranges:
        if r.size <= 0:
            continue
        parts = math.ceil(r.size / max_records) if max_records else 1
        out.extend(_cut(r, parts))
    if min_partitions and len(out) < min_partitions:
        total = sum(r.size for r in out)
        again: list[OffsetRange] = []
        for r in out:
            parts = max(1, math.ceil(r.size * min_partitions / total)) if total else 1
            again.extend(_cut(r, parts))
        out = again
    return out


def _cut(r: OffsetRange, parts: int) -> list[OffsetRange]:
    parts = max(1, min(parts, r.size))
    step, extra = divmod(r.size, parts)
    out, lo = [], r.lo
    for i in range(parts):
        hi = lo + step + (1 if i < extra else 0)
        out.append(OffsetRange(r.topic, r.partition, lo, hi))
        lo = hi
    return out


def prune(ranges: list[OffsetRange], filters: Sequence[RowFilter]) -> list[OffsetRange]:
    """Narrow offset ranges with partition and offset filters (others only filter rows)."""
    out = []
    for r in ranges:
        lo, hi, keep = r.lo, r.hi, True
        for f in filters:
            if f.column == "partition":
                keep = keep and _holds(f, r.partition)
            elif f.column == "offset":
                v = f.value
                if f.op == "=":
                    lo, hi = max(lo, v), min(hi, v + 1)
                elif f.op == ">":
                    lo = max(lo, v + 1)
                elif f.op == ">=":
                    lo = max(lo, v)
                elif f.op == "<":
                    hi = min(hi, v)
                elif f.op == "<=":
                    hi = min(hi, v + 1)
                elif f.op == "in":
                    inside = [x for x in v if lo <= x < hi]
                    lo, hi = (min(inside), max(inside) + 1) if inside else (lo, lo)
        if keep and lo < hi:
            out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out


def _holds(f: RowFilter, x: Any) -> bool:
    v = f.value
    return {
        "=": lambda: x == v, "<": lambda: x < v, "<=": lambda: x <= v,
        ">": lambda: x > v, ">=": lambda: x >= v, "in": lambda: x in v,
    }[f.op]()


def read_range(
    where: str | Location,
    r: OffsetRange,
    names: Sequence[str],
    fail_on_data_loss: bool,
    filters: Sequence[RowFilter] = (),
    earliest: bool = False,
    keep: Any = None,
    committed: bool = False,
) -> Iterator[pa.RecordBatch]:
    """The records of ``r`` as Arrow batches with columns ``names``. ``earliest``: the
    range starts at whatever the log start is now (a partition new to a stream).
    ``committed``: aborted transactions' batches left out (the range ends at or below the
    stable end, so every transaction in it has ended)."""
    from .decode import decode_chunk  # here: planning (on the driver) never loads numba

    pf = (Location(where) if isinstance(where, str) else where).open().partition(r.topic, r.partition)
    lo = max(r.lo, pf.start()) if earliest else r.lo
    row_filters = [f for f in filters if f.column in ("offset", "timestamp")]
    min_ts = max((f.value + (f.op == ">") for f in filters if f.column == "timestamp" and f.op in (">", ">=")),
                  default=None)
    aborted = pf.aborted() if committed else []
    while lo < r.hi:
        try:
            for data, batches in pf.chunks(lo, r.hi):
                lo = batches[-1].next_offset
                if aborted:
                    batches = [b for b in batches if not _aborted(b, aborted)]
                    if not batches:
                        continue
                if min_ts is not None:
                    batches = [b for b in batches if b.max_timestamp >= min_ts]
                    if not batches:
                        continue
                rb = decode_chunk(data, batches, r.lo, r.hi, r.topic, r.partition, names, keep)
                if rb is None:
                    continue
                if row_filters:
                    rb = _apply(rb, row_filters)
                for i in range(0, rb.num_rows, ROWS_PER_BATCH):
                    yield rb.slice(i, ROWS_PER_BATCH)
            return
        except DataLoss as e:
            if fail_on_data_loss:
                raise DataLoss(f"{e}. Set failOnDataLoss=false to skip the missing records.") from None
            start = pf.start()
            if start <= lo:
                raise
            log.warning("%s; continuing at offset %d", e, start)
            lo = start


def _aborted(b: Any, aborted: Sequence[Any]) -> bool:
    """Whether batch ``b`` holds records of an aborted transaction."""
    return bool(b.attributes & F.ATTR_TRANSACTIONAL) and any(
        a.producer_id == b.producer_id and a.first_offset <= b.base_offset <= a.last_offset for a in aborted)


_PC_OPS = {"=": pc.equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}


def _apply(rb: pa.RecordBatch, filters: Sequence[RowFilter]) -> pa.RecordBatch:
    """Apply filters the source told Spark it handles. Timestamp values are epoch ms."""
    if not filters or not rb.num_rows:
        return rb
    mask = None
    for f in filters:
        col = rb.column(rb.schema.get_field_index(f.column)) if f.column in rb.schema.names else None
        if col is None:  # Spark pushes filters only on columns it reads
            continue
        if f.column == "timestamp":
            col = col.cast(pa.int64())  # microseconds
            value = f.value * 1000 if f.op != "in" else [v * 1000 for v in f.value]
        else:
            value = f.value
        if f.op == "in":
            m = pc.is_in(col, value_set=pa.array(value, col.type))
        else:
            m = _PC_OPS[f.op](col, value)
        mask = m if mask is None else pc.and_(mask, m)
    return rb if mask is None else rb.filter(mask)
