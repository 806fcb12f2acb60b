"""The log's on-disk format: the one module that knows its byte layout and its names.

It imports neither Twisted nor aiokafka (only the standard library and ``crc32c``), so
readers outside the broker (``logbus.spark``) import it alone. docs/format.md is the
same description in prose; ``tests/unit/test_format_doc.py`` checks the two agree
with a reader written from that page alone (``tests/unit/format_reader.py``).

Names::

    <data>/log/                              LOG_DIR
      .clean_shutdown                        CLEAN_MARKER
      .trash/                                TRASH
      .creating/                             CREATING: topic directories being built
      <topic dir>/                           topic_dirname(name)
        <partition>/                         partition_dirname(index): "0", "1", ...
          {base:020d}.log                    segment_name(base) + LOG_SUFFIX
          {base:020d}.index                  + INDEX_SUFFIX
          {base:020d}.timeindex              + TIMEINDEX_SUFFIX
          {base:020d}.keyindex               + KEYINDEX_SUFFIX (sealed segments only)

A topic directory is the topic name's UTF-8 bytes with every byte outside
``[A-Za-z0-9_.~-]`` written as ``%XX`` (uppercase hex) and a leading ``.`` as ``%2E``, so
no topic directory starts with ``.`` (the log's own entries do). Index files are
written to ``<name>.tmp`` and renamed; recovery removes ``*.tmp`` and ``*.deleted``.

A ``.log`` file is whole Kafka RecordBatch v2 batches back to back, no file header, no
padding. Batch header (HEADER, 61 bytes, all integers big-endian)::

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

``.index`` entry (OFFSET_ENTRY, 8 bytes): ``(relative_offset: uint32, position: uint32)``,
the batch whose base offset is ``segment base + relative_offset`` starts at byte
``position`` of the ``.log``. ``.timeindex`` entry (TIME_ENTRY, 12 bytes):
``(timestamp: int64, relative_offset: uint32)``, every record up to and including the
batch at ``segment base + relative_offset`` has a timestamp at or below ``timestamp``.
Which batches get entries is ``segment.py``'s rule; checking loaded entries is
``index.py``'s.

``.keyindex`` (a sealed segment's record keys and message ids): KEY_HEADER, 24 bytes,
then ``count`` KEY_ENTRY entries sorted ascending::

    offset size field
    0      4    magic                 b"LBKX"
    4      2    version               uint16  1
    6      2    flags                 uint16  0
    8      8    log_size              uint64  bytes of the .log this index covers (all of it)
    16     4    count                 uint32  entries
    20     4    crc                   uint32  CRC-32C of the entries
    24     ...  entries               uint64  (hash << 32) | relative_offset

An entry says the record at ``segment base + relative_offset`` MAY have a key with CRC-32
``hash`` (``key_hash``) or an envelope message id with that ``message_id_hash``: a reader
reads the record and compares, because different keys share hashes. Building and
checking the file is ``keyindex.py``'s.

A valid batch has a whole header, magic 2, ``batch_length >= 49``, non-negative
``last_offset_delta`` and ``records_count``, all its bytes present and a matching
CRC-32C. The readable log is the longest prefix of valid batches whose base offsets
continue (each ``base_offset + last_offset_delta + 1`` of the one before):
``scan_valid`` walks it and stops at the first batch that breaks a rule, which is where
recovery cuts a torn tail and where a reader stops.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from typing import NamedTuple
from urllib.parse import quote, unquote_to_bytes

from crc32c import crc32c as calc_crc32c  # SSE4.2: ~13x aiokafka's table CRC here

# -- the batch header ----------------------------------------------------------------

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # base_offset + batch_length: bytes not counted by batch_length
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
MAGIC = 2
INT64 = struct.Struct(">q")  # base_offset (at 0), first and max timestamps
INT32 = struct.Struct(">i")  # batch_length (at BATCH_LENGTH_AT), records_count
UINT32 = struct.Struct(">I")  # crc (at CRC_AT)
BATCH_LENGTH_AT = 8
CRC_AT = 17
CRC_START = 21  # the CRC covers bytes CRC_START .. end of batch
LAST_OFFSET_DELTA_AT = 23
MAX_TIMESTAMP_AT = 35
RECORDS_COUNT_AT = 57

# -- attributes ----------------------------------------------------------------------

COMPRESSION_MASK = 0x07
CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
MAX_CODEC = CODEC_ZSTD
ATTR_TIMESTAMP_TYPE = 0x08  # set: LogAppendTime (every record has max_timestamp)
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
MIN_RECORD_SIZE = 7  # length, attributes, timestamp delta, offset delta, key, value, header count

# -- index entries -------------------------------------------------------------------

OFFSET_ENTRY = struct.Struct(">II")  # relative_offset, position
TIME_ENTRY = struct.Struct(">qI")  # timestamp, relative_offset
KEY_HEADER = struct.Struct(">4sHHQII")  # magic, version, flags, log_size, count, crc
KEY_ENTRY = struct.Struct(">Q")  # (hash << 32) | relative_offset
KEYINDEX_MAGIC = b"LBKX"
KEYINDEX_VERSION = 1
# A record key's hash in ``.keyindex``: its CRC-32 (zlib's, ISO-HDLC), ``key_hash(key)``.
# An envelope message id's: the CRC-32 of ``b"logbus.message_id:"`` followed by the id's
# UTF-8 bytes, ``message_id_hash(id)`` (so a key equal to an id hashes apart from it).
key_hash = zlib.crc32
MESSAGE_ID_SEED = zlib.crc32(b"logbus.message_id:")


def message_id_hash(message_id: str) -> int:
    return zlib.crc32(message_id.encode("utf-8", "surrogatepass"), MESSAGE_ID_SEED)

# -- names ---------------------------------------------------------------------------

LOG_DIR = "log"
CLEAN_MARKER = ".clean_shutdown"
TRASH = ".trash"
CREATING = ".creating"
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
KEYINDEX_SUFFIX = ".keyindex"
TXNINDEX_NAME = "aborted.txnindex"  # in a partition's directory: its aborted transactions
TMP_SUFFIX = ".tmp"
DELETED_SUFFIX = ".deleted"
_SEGMENT_DIGITS = 20
_SEGMENT_LOG_NAME = _SEGMENT_DIGITS + len(LOG_SUFFIX)


def segment_name(base_offset: int) -> str:
    """A segment's file name without its suffix: the base offset as 20 digits."""
    return f"{base_offset:020d}"


def segment_base(filename: str) -> int | None:
    """The base offset of a segment's ``.log`` file name, None for any other name."""
    if len(filename) == _SEGMENT_LOG_NAME and filename.endswith(LOG_SUFFIX) and filename[:_SEGMENT_DIGITS].isdigit():
        return int(filename[:_SEGMENT_DIGITS])
    return None


def topic_dirname(name: str) -> str:
    """Topic name -> directory name: UTF-8 bytes outside ``[A-Za-z0-9_.~-]`` as %XX,
    and a leading ``.`` as %2E, so no topic directory can be one of the log's own
    dot-names (``.trash``, ``.creating``, ``.clean_shutdown``)."""
    d = quote(name, safe="")
    return "%2E" + d[1:] if d.startswith(".") else d


def topic_name(dirname: str) -> str:
    """Directory name -> topic name (the inverse of ``topic_dirname``)."""
    return unquote_to_bytes(dirname).decode("utf-8")


def partition_dirname(index: int) -> str:
    return str(index)


def partition_index(dirname: str) -> int | None:
    """The partition a directory name stands for, None when it is not one."""
    return int(dirname) if dirname.isdigit() else None


# -- reading batches -----------------------------------------------------------------

Buffer = bytes | bytearray | memoryview | mmap.mmap


class InvalidBatch(Exception):
    """The bytes at a position are not a whole, valid batch; the message says why."""


class BatchInfo(NamedTuple):
    """A batch's header fields, and where it starts in the buffer it was read from."""

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
    position: int = 0

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


def parse_header(buf: Buffer, pos: int = 0) -> BatchInfo:
    """The header of the batch at ``pos``; the batch's other bytes are neither needed nor
    checked. The caller ensures that HEADER_SIZE bytes are there. InvalidBatch when the
    header is invalid."""
    (base, length, _epoch, magic, _crc, attrs, lod, first_ts, max_ts, pid, pepoch, bseq, count) = (
        HEADER.unpack_from(buf, pos)
    )
    if magic != MAGIC:
        raise InvalidBatch(f"record batch magic is {magic}, only magic 2 is supported")
    if length < MIN_BATCH_LENGTH:
        raise InvalidBatch(f"record batch length {length} is shorter than its header")
    if lod < 0 or count < 0:
        raise InvalidBatch(f"record batch has negative last_offset_delta {lod} or count {count}")
    return BatchInfo(base, length + LOG_OVERHEAD, lod, first_ts, max_ts, attrs, pid, pepoch, bseq, count, pos)


def validate(buf: Buffer, pos: int, end: int) -> BatchInfo:
    """The batch at ``pos``, whole before ``end`` and CRC-checked; else InvalidBatch."""
    if end - pos < HEADER_SIZE:
        raise InvalidBatch(f"truncated record batch: {end - pos} bytes, header needs {HEADER_SIZE}")
    info = parse_header(buf, pos)
    size = info.size
    if pos + size > end:
        raise InvalidBatch(f"truncated record batch: declares {size} bytes, {end - pos} present")
    stored = UINT32.unpack_from(buf, pos + CRC_AT)[0]
    view = memoryview(buf)[pos + CRC_START : pos + size]
    try:
        actual = calc_crc32c(view)
    finally:
        view.release()
    if stored != actual:
        raise InvalidBatch(f"record batch CRC mismatch: stored {stored:#010x}, computed {actual:#010x}")
    return info


def scan_valid(
    buf: Buffer, pos: int, end: int, expected: int | None, stop: int | None = None
) -> tuple[list[BatchInfo], int, str]:
    """The valid prefix of ``buf[pos:end]``: (its batches, where it ends, why it ended).
    Each batch's base offset must be ``expected`` (None: the first may have any), then
    continue from the one before. The reason is "" when the scan reached ``end`` or,
    with ``stop``, a batch whose next offset is at or past ``stop``."""
    found: list[BatchInfo] = []
    append = found.append
    while pos < end:
        try:
            info = validate(buf, pos, end)
        except InvalidBatch as e:
            return found, pos, str(e)
        if expected is not None and info.base_offset != expected:
            return found, pos, f"batch base offset {info.base_offset}, expected {expected}"
        append(info)
        pos += info.size
        expected = info.base_offset + info.last_offset_delta + 1
        if stop is not None and expected >= stop:
            break
    return found, pos, ""


def declared_size(buf: Buffer, pos: int = 0) -> int:
    """Total size of the batch at ``pos`` from its length field (needs 12 bytes)."""
    return int(INT32.unpack_from(buf, pos + BATCH_LENGTH_AT)[0]) + LOG_OVERHEAD


def stored_crc(buf: Buffer, pos: int) -> int:
    return int(UINT32.unpack_from(buf, pos + CRC_AT)[0])


def max_timestamp(buf: Buffer, pos: int = 0) -> int:
    return int(INT64.unpack_from(buf, pos + MAX_TIMESTAMP_AT)[0])


# -- transactions: control batches and the aborted-transaction index -------------------

CONTROL_ABORT, CONTROL_COMMIT = 0, 1  # a control record's type (its key's second int16)
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type
_CONTROL_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch
# one control record: length 16, attributes 0, timestamp delta 0, offset delta 0,
# key length 4, the key, value length 6, the value, no headers (lengths as zigzag varints)
_CONTROL_RECORD = b"\x20\x00\x00\x00\x08%s\x0c%s\x00"
ABORTED_ENTRY = struct.Struct(">qqqq")  # producer_id, first_offset, last_offset, last_stable_offset


def control_batch(producer_id: int, producer_epoch: int, commit: bool, timestamp_ms: int,
                  coordinator_epoch: int = 0) -> bytes:
    """A transaction marker as Kafka writes it: one control record in a transactional
    control batch of the producer, base offset 0 (given on append)."""
    record = _CONTROL_RECORD % (_CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT),
                                _CONTROL_VALUE.pack(0, coordinator_epoch))
    length = HEADER_SIZE - LOG_OVERHEAD + len(record)
    head = HEADER.pack(0, length, 0, MAGIC, 0, ATTR_TRANSACTIONAL | ATTR_CONTROL, 0, timestamp_ms, timestamp_ms,
                       producer_id, producer_epoch, -1, 1)
    buf = bytearray(head + record)
    UINT32.pack_into(buf, CRC_AT, calc_crc32c(bytes(buf[CRC_START:])))
    return bytes(buf)


def control_type(buf: Buffer, info: BatchInfo) -> int | None:
    """CONTROL_COMMIT or CONTROL_ABORT for a control batch (``info`` read from ``buf``),
    None for any other batch or a control record of a type not known here."""
    if not info.attributes & ATTR_CONTROL or info.attributes & COMPRESSION_MASK:
        return None
    at = info.position + HEADER_SIZE
    record = bytes(buf[at : info.position + CONTROL_READ])
    if len(record) < 9 or record[4] != 0x08:
        return None
    version, kind = _CONTROL_KEY.unpack_from(record, 5)
    return kind if version == 0 and kind in (CONTROL_ABORT, CONTROL_COMMIT) else None


CONTROL_READ = HEADER_SIZE + len(_CONTROL_RECORD) - 4 + _CONTROL_KEY.size + _CONTROL_VALUE.size  # bytes control_type reads


def follow_transactions(open_txns: dict[int, int], batch: BatchInfo, kind: int | None) -> tuple[int, int] | None:
    """One step of a walk over a partition's batches, oldest first, that finds its
    transactions (section 4.5). ``open_txns`` maps each producer with a transaction open
    to the offset of its first transactional batch; ``kind`` is ``control_type`` of a
    control batch (not read for others). Returns (producer, first offset) when ``batch``
    is an abort marker: the aborted transaction's records are that producer's
    transactional batches from the first offset to the marker (an abort with none of its
    records seen: the marker's own offset)."""
    pid = batch.producer_id
    if batch.attributes & ATTR_CONTROL:
        first = open_txns.pop(pid, None)
        if kind == CONTROL_ABORT:
            return pid, batch.base_offset if first is None else first
    elif batch.attributes & ATTR_TRANSACTIONAL:
        open_txns.setdefault(pid, batch.base_offset)
    return None


class AbortedTxn(NamedTuple):
    """An aborted transaction on one partition: its producer's records from
    ``first_offset`` to its abort marker at ``last_offset`` are not committed. A
    read_committed reader skips that producer's transactional batches in the range."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def pack_aborted(entry: AbortedTxn) -> bytes:
    return ABORTED_ENTRY.pack(*entry)


def unpack_aborted(data: bytes) -> list[AbortedTxn]:
    """The entries of an ``aborted.txnindex`` file (a torn last entry left out)."""
    size = ABORTED_ENTRY.size
    return [AbortedTxn(*ABORTED_ENTRY.unpack_from(data, at)) for at in range(0, len(data) - size + 1, size)]
