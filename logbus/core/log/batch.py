"""Kafka RecordBatch v2 batches: building, checking and decoding them.

The byte layout (header fields, attribute bits) is ``format.py``'s. Records are encoded
and decoded with ``aiokafka.record``'s C implementation; this module adds the checks a
batch from a client must pass and base-offset rewriting.
"""

from __future__ import annotations

import time
from typing import Iterator, NamedTuple, Sequence

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from ..errors import CorruptBatch, RecordTooLarge
from . import format as F
from .format import (
    ATTR_CONTROL,
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAX_CODEC,
    MIN_RECORD_SIZE,
    BatchInfo,
    Buffer,
)

_BASE_OFFSET = F.INT64
_validate = F.validate


class Record(NamedTuple):
    """One record as the log stores it: Kafka record fields, nothing else."""

    key: bytes | None
    value: bytes | None
    timestamp: int | None = None  # epoch milliseconds; None: the append time
    headers: list[tuple[str, bytes | None]] = []


class StoredRecord(NamedTuple):
    """A record read back from the log, with its position."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def now_ms() -> int:
    return int(time.time() * 1000)


def build(records: Sequence[Record], base_offset: int, timestamp_ms: int | None = None) -> bytearray:
    """Encode ``records`` as one uncompressed batch starting at ``base_offset``."""
    if not records:
        raise ValueError("a batch needs at least one record")
    ts_default = now_ms() if timestamp_ms is None else timestamp_ms
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 2**31 - 1)
    for i, r in enumerate(records):
        builder.append(i, ts_default if r.timestamp is None else r.timestamp, r.key, r.value, r.headers)
    buf = builder.build()
    _BASE_OFFSET.pack_into(buf, 0, base_offset)
    return buf


max_timestamp = F.max_timestamp


peek_size = F.declared_size


def validate(buf: Buffer, pos: int = 0, end: int | None = None) -> BatchInfo:
    """Parse and CRC-check the batch at ``pos``; it must end at or before ``end``."""
    try:
        return F.validate(buf, pos, len(buf) if end is None else end)
    except F.InvalidBatch as e:
        raise CorruptBatch(str(e)) from None


def split_validate(buf: bytes | bytearray | memoryview, max_batch_bytes: int) -> list[BatchInfo]:
    """Validate every batch a client sent in ``buf`` (one or more, back to back, nothing
    left over): CRC, magic, a known codec, a record count that matches the offsets and
    fits the bytes, and no control batch (only the broker writes those)."""
    infos = []
    pos, end = 0, len(buf)
    if end == 0:
        raise CorruptBatch("empty record set")
    try:
        while pos < end:
            if end - pos >= LOG_OVERHEAD:
                size = peek_size(buf, pos)
                if size > max_batch_bytes:
                    raise RecordTooLarge(f"record batch of {size} bytes exceeds the limit of {max_batch_bytes}")
            info = _validate(buf, pos, end)
            if info.attributes & ATTR_CONTROL:
                raise CorruptBatch("control batches are written by the broker, not sent by clients")
            if info.attributes & COMPRESSION_MASK > MAX_CODEC:
                raise CorruptBatch(f"unknown compression codec {info.attributes & COMPRESSION_MASK}")
            if info.records_count != info.last_offset_delta + 1:
                raise CorruptBatch(
                    f"record batch count {info.records_count} does not match last_offset_delta "
                    f"{info.last_offset_delta}"
                )
            if (not info.attributes & COMPRESSION_MASK
                    and info.records_count * MIN_RECORD_SIZE > info.size - HEADER_SIZE):
                raise CorruptBatch(f"record batch claims {info.records_count} records in {info.size} bytes")
            infos.append(info)
            pos += info.size
    except F.InvalidBatch as e:
        raise CorruptBatch(str(e)) from None
    return infos


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Rewrite a batch's base offset in place (outside the CRC, so the CRC stays valid)."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def record_at(buf: bytes | bytearray | memoryview, offset: int) -> StoredRecord | None:
    """The record at ``offset`` in the whole batches of ``buf``, decoding no record after
    it; None when they do not hold it (or it is in a control batch)."""
    pos, end = 0, len(buf)
    data = bytes(buf)
    while end - pos >= HEADER_SIZE:
        size = peek_size(data, pos)
        if pos + size > end:
            break
        last = _BASE_OFFSET.unpack_from(data, pos)[0] + F.INT32.unpack_from(data, pos + F.LAST_OFFSET_DELTA_AT)[0]
        if last >= offset:
            batch = DefaultRecordBatch(data[pos : pos + size])
            if batch.is_control_batch:
                return None
            for r in batch:
                if r.offset == offset:
                    return StoredRecord(r.offset, r.timestamp, r.key, r.value, list(r.headers))
            return None
        pos += size
    return None


def decode(buf: bytes | bytearray | memoryview) -> Iterator[StoredRecord]:
    """Every record of every batch in ``buf`` (whole batches only), decompressing as needed."""
    pos, end = 0, len(buf)
    data = bytes(buf)
    while end - pos >= HEADER_SIZE:
        size = peek_size(data, pos)
        if pos + size > end:
            break
        batch = DefaultRecordBatch(data[pos : pos + size])
        if not batch.is_control_batch:
            for r in batch:
                yield StoredRecord(r.offset, r.timestamp, r.key, r.value, list(r.headers))
        pos += size
