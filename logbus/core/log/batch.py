"""Kafka RecordBatch v2: the only module that knows the byte layout of segment data.

A segment file is a plain concatenation of record batches, exactly as the Kafka
protocol carries them (so a fetch is a file range and a produce is validate + append):

    offset size field
    0      8    base_offset           int64   first offset in the batch (rewritten on append)
    8      4    batch_length          int32   bytes after this field (total = batch_length + 12)
    12     4    partition_leader_epoch int32  (not covered by the CRC)
    16     1    magic                 int8    always 2
    17     4    crc                   uint32  CRC-32C of bytes 21..end
    21     2    attributes            int16   bits 0-2 compression (0 none, 1 gzip, 2 snappy,
                                              3 lz4, 4 zstd), 3 timestamp type, 4 transactional,
                                              5 control
    23     4    last_offset_delta     int32   last offset = base_offset + last_offset_delta
    27     8    first_timestamp       int64   epoch ms
    35     8    max_timestamp         int64   epoch ms
    43     8    producer_id           int64
    51     2    producer_epoch        int16
    53     4    base_sequence         int32
    57     4    records_count         int32
    61     ...  records (compressed as a whole when attributes say so)

All integers are big-endian. Records are encoded and decoded with ``aiokafka.record``'s
C implementation; this module adds header parsing, validation and base-offset rewriting.
"""

from __future__ import annotations

import mmap
import struct
import time
from typing import Iterator, NamedTuple, Sequence

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from crc32c import crc32c as calc_crc32c  # SSE4.2: ~13x aiokafka's table CRC here

from ..errors import CorruptBatch, RecordTooLarge

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # base_offset + batch_length: bytes not counted by batch_length
_LENGTH = struct.Struct(">qi")  # base_offset, batch_length
_BASE_OFFSET = struct.Struct(">q")
_MAX_TS = struct.Struct(">q")
CRC_START = 21
MAGIC = 2
COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
MAX_CODEC = 4  # zstd
MIN_RECORD_SIZE = 7  # length, attributes, timestamp delta, offset delta, key, value, header count
Buffer = bytes | bytearray | memoryview | mmap.mmap


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


class BatchInfo(NamedTuple):
    """The header fields the log needs to index and serve a batch."""

    base_offset: int
    size: int  # total bytes on disk, header included
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    attributes: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


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


def max_timestamp(buf: bytes | bytearray, pos: int = 0) -> int:
    return int(_MAX_TS.unpack_from(buf, pos + 35)[0])


def parse_header(buf: Buffer, pos: int = 0) -> BatchInfo:
    """Header fields of the batch at ``pos`` (no CRC check). The caller ensures that at
    least HEADER_SIZE bytes are there."""
    (base, length, _epoch, magic, _crc, attrs, lod, first_ts, max_ts, pid, pepoch, bseq, count) = (
        HEADER.unpack_from(buf, pos)
    )
    if magic != MAGIC:
        raise CorruptBatch(f"record batch magic is {magic}, only magic 2 is supported")
    if length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptBatch(f"record batch length {length} is shorter than its header")
    if lod < 0 or count < 0:
        raise CorruptBatch(f"record batch has negative last_offset_delta {lod} or count {count}")
    return BatchInfo(base, length + LOG_OVERHEAD, lod, first_ts, max_ts, attrs, pid, pepoch, bseq, count)


def peek_size(buf: Buffer, pos: int = 0) -> int:
    """Total size of the batch at ``pos`` from its length field (needs 12 bytes)."""
    return int(_LENGTH.unpack_from(buf, pos)[1]) + LOG_OVERHEAD


def validate(buf: Buffer, pos: int = 0, end: int | None = None) -> BatchInfo:
    """Parse and CRC-check the batch at ``pos``; it must end at or before ``end``."""
    end = len(buf) if end is None else end
    if end - pos < HEADER_SIZE:
        raise CorruptBatch(f"truncated record batch: {end - pos} bytes, header needs {HEADER_SIZE}")
    info = parse_header(buf, pos)
    if pos + info.size > end:
        raise CorruptBatch(f"truncated record batch: declares {info.size} bytes, {end - pos} present")
    stored_crc = struct.unpack_from(">I", buf, pos + 17)[0]
    view = memoryview(buf)[pos + CRC_START : pos + info.size]
    try:
        actual = calc_crc32c(view)
    finally:
        view.release()
    if stored_crc != actual:
        raise CorruptBatch(f"record batch CRC mismatch: stored {stored_crc:#010x}, computed {actual:#010x}")
    return info


def split_validate(buf: bytes | bytearray | memoryview, max_batch_bytes: int) -> list[BatchInfo]:
    """Validate every batch a client sent in ``buf`` (one or more, back to back, nothing
    left over): CRC, magic, a known codec, a record count that matches the offsets and
    fits the bytes, and no control batch (only the broker writes those)."""
    infos = []
    pos, end = 0, len(buf)
    if end == 0:
        raise CorruptBatch("empty record set")
    while pos < end:
        if end - pos >= LOG_OVERHEAD:
            size = peek_size(buf, pos)
            if size > max_batch_bytes:
                raise RecordTooLarge(f"record batch of {size} bytes exceeds the limit of {max_batch_bytes}")
        info = validate(buf, pos, end)
        if info.attributes & ATTR_CONTROL:
            raise CorruptBatch("control batches are written by the broker, not sent by clients")
        if info.attributes & COMPRESSION_MASK > MAX_CODEC:
            raise CorruptBatch(f"unknown compression codec {info.attributes & COMPRESSION_MASK}")
        if info.records_count != info.last_offset_delta + 1:
            raise CorruptBatch(
                f"record batch count {info.records_count} does not match last_offset_delta "
                f"{info.last_offset_delta}"
            )
        if not info.attributes & COMPRESSION_MASK and info.records_count * MIN_RECORD_SIZE > info.size - HEADER_SIZE:
            raise CorruptBatch(f"record batch claims {info.records_count} records in {info.size} bytes")
        infos.append(info)
        pos += info.size
    return infos


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Rewrite a batch's base offset in place (outside the CRC, so the CRC stays valid)."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


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
