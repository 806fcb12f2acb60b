"""An independent reader of a logbus data directory, written from docs/format.md with
the standard library only: no ``logbus`` import, no aiokafka (its own CRC-32C, varints,
gzip through ``gzip``, a minimal protobuf field decoder). tests/unit/test_format_doc.py
checks it against what logbus wrote; it is the proof that the document is enough.
"""

from __future__ import annotations

import bisect
import gzip
import os
import struct
from pathlib import Path
from typing import Any, Iterator, NamedTuple

def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as Kafka uses it."""
    crc = 0xFFFFFFFF
    t = _CRC32C
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


R_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte RecordBatch v2 header
R_HEADER_SIZE = 61
R_LOG_OVERHEAD = 12  # base_offset + batch_length
R_OFFSET_ENTRY = struct.Struct(">II")  # .index: relative offset, position
INDEX_ON_CLOSE_MIN = 4 * 1024 * 1024  # active segments this large keep index files (section 8)
R_TIME_ENTRY = struct.Struct(">qI")  # .timeindex: timestamp, relative offset


class RBatch(NamedTuple):
    position: int  # byte position in the .log file
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    payload: bytes  # bytes 61..end of the batch (records, maybe compressed)

    @property
    def size(self) -> int:
        return self.batch_length + R_LOG_OVERHEAD

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


class RRecord(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def r_batch_at(data: bytes, pos: int) -> RBatch | None:
    """The batch at ``pos`` if it is complete and valid, else None (end of readable log)."""
    if len(data) - pos < R_HEADER_SIZE:
        return None
    fields = R_HEADER.unpack_from(data, pos)
    base, length, epoch, magic, crc, attrs, lod, first_ts, max_ts, pid, pepoch, bseq, count = fields
    if magic != 2 or length < R_HEADER_SIZE - R_LOG_OVERHEAD or lod < 0 or count < 0:
        return None
    end = pos + length + R_LOG_OVERHEAD
    if end > len(data):
        return None
    if crc32c(data[pos + 21 : end]) != crc:
        return None
    return RBatch(pos, *fields, data[pos + R_HEADER_SIZE : end])


def r_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint (Kafka's varint and varlong): (value, next position)."""
    shift = raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def r_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = r_varint(buf, pos)
    if n < 0:
        return None, pos
    return buf[pos : pos + n], pos + n


def r_records(batch: RBatch) -> list[RRecord]:
    if batch.attributes & 0x20:  # control batch: transaction markers, no user records
        return []
    codec = batch.attributes & 0x07
    if codec == 0:
        body = batch.payload
    elif codec == 1:
        body = gzip.decompress(batch.payload)
    else:
        raise NotImplementedError(f"codec {codec} (snappy/lz4/zstd) not in the stdlib")
    log_append_time = bool(batch.attributes & 0x08)
    out: list[RRecord] = []
    pos = 0
    for _ in range(batch.records_count):
        length, pos = r_varint(body, pos)
        end = pos + length
        pos += 1  # record attributes (unused, 0)
        ts_delta, pos = r_varint(body, pos)
        off_delta, pos = r_varint(body, pos)
        key, pos = r_bytes(body, pos)
        value, pos = r_bytes(body, pos)
        nheaders, pos = r_varint(body, pos)
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(nheaders):
            hkey, pos = r_bytes(body, pos)
            hval, pos = r_bytes(body, pos)
            assert hkey is not None
            headers.append((hkey.decode("utf-8"), hval))
        assert pos == end, "record length disagrees with its fields"
        ts = batch.max_timestamp if log_append_time else batch.first_timestamp + ts_delta
        out.append(RRecord(batch.base_offset + off_delta, ts, key, value, headers))
    assert pos == len(body), "bytes left after records_count records"
    return out


def r_unescape(dirname: str) -> str:
    """Topic directory name -> topic name: %XX are bytes, the whole is UTF-8."""
    out = bytearray()
    i = 0
    while i < len(dirname):
        if dirname[i] == "%":
            out.append(int(dirname[i + 1 : i + 3], 16))
            i += 3
        else:
            out += dirname[i].encode("ascii")
            i += 1
    return out.decode("utf-8")


def r_topics(data_dir: Path) -> dict[str, Path]:
    root = data_dir / "log"
    return {
        r_unescape(e.name): Path(e.path)
        for e in os.scandir(root)
        if e.is_dir() and e.name not in (".trash", ".creating", ".clean_shutdown")
    }


def r_partitions(topic_dir: Path) -> dict[int, Path]:
    return {int(e.name): Path(e.path) for e in os.scandir(topic_dir) if e.is_dir() and e.name.isdigit()}


def r_segments(pdir: Path) -> list[int]:
    bases = []
    for name in os.listdir(pdir):
        stem, dot, ext = name.partition(".")
        if ext == "log" and len(stem) == 20 and stem.isdigit():
            bases.append(int(stem))
    return sorted(bases)


def r_segment_of(pdir: Path, offset: int) -> int:
    """Base offset of the segment that holds ``offset`` (the last base at or below it)."""
    return max(b for b in r_segments(pdir) if b <= offset)


def r_seg_path(pdir: Path, base: int, ext: str) -> Path:
    return pdir / f"{base:020d}.{ext}"


def r_walk(data: bytes, pos: int, expected_base: int | None) -> Iterator[RBatch]:
    """Valid batches from ``pos`` on, each continuing the offsets of the one before."""
    while True:
        b = r_batch_at(data, pos)
        if b is None or (expected_base is not None and b.base_offset != expected_base):
            return
        yield b
        pos += b.size
        expected_base = b.next_offset


def r_partition_batches(pdir: Path) -> tuple[list[RBatch], int]:
    """Every readable batch of a partition, oldest first, and the end offset of the
    readable log (the first incomplete or invalid batch ends it, in any segment)."""
    out: list[RBatch] = []
    bases = r_segments(pdir)
    expected = bases[0] if bases else 0
    for i, base in enumerate(bases):
        if base != expected:  # a gap: the log ended in the previous segment
            break
        data = r_seg_path(pdir, base, "log").read_bytes()
        end = 0
        for b in r_walk(data, 0, base):
            out.append(b)
            end = b.position + b.size
            expected = b.next_offset
        if end != len(data):  # torn or corrupt: the readable log ends here
            break
    return out, expected


def r_read_index(path: Path) -> list[tuple[int, int]]:
    """(relative offset, position) entries; [] when absent or damaged (it is a hint)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    if len(raw) % 8:
        return []
    entries = list(R_OFFSET_ENTRY.iter_unpack(raw))
    if any(a >= b for (a, _), (b, _) in zip(entries, entries[1:])):
        return []
    return entries


def r_read_timeindex(path: Path) -> list[tuple[int, int]]:
    """(timestamp, relative offset) entries; [] when absent or damaged."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    if len(raw) % 12:
        return []
    return list(R_TIME_ENTRY.iter_unpack(raw))


def r_start_position(data: bytes, base: int, index: list[tuple[int, int]], rel: int) -> int:
    """Position of the floor index entry for relative offset ``rel``, checked: an entry
    that does not point at a valid batch with the right base offset is not used."""
    i = bisect.bisect_right([o for o, _ in index], rel) - 1
    while i >= 0:
        o, p = index[i]
        b = r_batch_at(data, p) if p < len(data) else None
        if b is not None and b.base_offset == base + o:
            return p
        i -= 1
    return 0


def r_find_batch(pdir: Path, offset: int) -> tuple[RBatch, int] | None:
    """The batch holding ``offset`` and the position the walk started from."""
    bases = r_segments(pdir)
    i = bisect.bisect_right(bases, offset) - 1
    if i < 0:
        return None
    base = bases[i]
    data = r_seg_path(pdir, base, "log").read_bytes()
    index = r_read_index(r_seg_path(pdir, base, "index"))
    start = r_start_position(data, base, index, offset - base)
    first = r_batch_at(data, start)
    for b in r_walk(data, start, first.base_offset if first else None):
        if b.next_offset > offset:
            return (b, start) if b.base_offset <= offset else None
    return None


def r_offset_for_time(pdir: Path, timestamp: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record, in offset order, whose timestamp is
    >= ``timestamp``; None when every record is older."""
    bases = r_segments(pdir)
    for i, base in enumerate(bases):
        tindex = r_read_timeindex(r_seg_path(pdir, base, "timeindex"))
        sealed = i < len(bases) - 1
        if sealed and tindex and tindex[-1][0] < timestamp:
            continue  # the last entry of a sealed segment holds its largest timestamp
        j = bisect.bisect_left([t for t, _ in tindex], timestamp) - 1
        rel = tindex[j][1] if j >= 0 else 0
        data = r_seg_path(pdir, base, "log").read_bytes()
        index = r_read_index(r_seg_path(pdir, base, "index"))
        start = r_start_position(data, base, index, rel)
        first = r_batch_at(data, start)
        for b in r_walk(data, start, first.base_offset if first else None):
            if b.max_timestamp < timestamp:
                continue
            for r in r_records(b):
                if r.timestamp >= timestamp:
                    return r.offset, r.timestamp
    return None


def r_protobuf_fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """Minimal protobuf wire-format decoder: (field number, wire type, value)."""

    def uvarint(pos: int) -> tuple[int, int]:
        shift = v = 0
        while True:
            b = buf[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                return v, pos
            shift += 7

    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(buf):
        tag, pos = uvarint(pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            v, pos = uvarint(pos)
        elif wire == 2:
            n, pos = uvarint(pos)
            v, pos = buf[pos : pos + n], pos + n
        elif wire == 1:
            v, pos = buf[pos : pos + 8], pos + 8
        elif wire == 5:
            v, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((field, wire, v))
    return out


# -- transactions (section 4.5) --------------------------------------------------------

R_ABORTED_ENTRY = struct.Struct(">qqqq")  # producer_id, first_offset, last_offset, last_stable_offset


def r_aborted(pdir: Path) -> list[tuple[int, int, int, int]]:
    """The entries of ``aborted.txnindex`` (none when absent; a torn last one left out)."""
    try:
        data = (pdir / "aborted.txnindex").read_bytes()
    except FileNotFoundError:
        return []
    n = len(data) // R_ABORTED_ENTRY.size
    return [R_ABORTED_ENTRY.unpack_from(data, i * R_ABORTED_ENTRY.size) for i in range(n)]


def r_marker(batch: RBatch) -> int | None:
    """0 (abort) or 1 (commit) for a transaction marker, None for any other batch."""
    if not batch.attributes & 0x20:
        return None
    pos = 0
    _length, pos = r_varint(batch.payload, pos)
    pos += 1  # attributes
    _, pos = r_varint(batch.payload, pos)  # timestamp delta
    _, pos = r_varint(batch.payload, pos)  # offset delta
    key, pos = r_bytes(batch.payload, pos)
    assert key is not None and len(key) == 4
    version, kind = struct.unpack(">hh", key)
    return kind if version == 0 else None


def r_committed_records(pdir: Path) -> list[RRecord]:
    """The records a read_committed reader gets: aborted transactions' records left out,
    and nothing from the first record of a transaction with no marker yet on."""
    batches, _ = r_partition_batches(pdir)
    aborted = r_aborted(pdir)
    ended = {b.producer_id: b.base_offset for b in batches if r_marker(b) is not None}
    out: list[RRecord] = []
    for b in batches:
        if b.attributes & 0x10 and not b.attributes & 0x20:
            if not any(b.producer_id == pid and b.base_offset < m for pid, m in ended.items()):
                break  # an open transaction: not stable from here on
            if any(pid == b.producer_id and first <= b.base_offset <= last for pid, first, last, _ in aborted):
                continue
        out.extend(r_records(b))
    return out
