"""docs/format.md is enough to read a logbus data directory without logbus.

logbus writes a log (several topics, one with a name that needs escaping, several
segments per partition, keys, headers, explicit and append-time timestamps, an
envelope header, a gzip batch appended as a Kafka producer sends it) and shuts down
cleanly. Then an independent reader, written below from docs/format.md with the
standard library only (no ``logbus`` import, no aiokafka: its own CRC-32C, varints,
gzip through ``gzip``), lists the topics from the directory tree, decodes every batch
and record and must get back exactly what was written; it seeks by offset with the
``.index`` files and by timestamp with the ``.timeindex`` files, and it stops at a
torn or corrupt tail exactly where logbus's own recovery stops.
"""

from __future__ import annotations

import bisect
import gzip
import os
import random
import shutil
import struct
import time
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import pytest

# =====================================================================================
# The independent reader: standard library only, written from docs/format.md.
# =====================================================================================


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
        if e.is_dir() and e.name not in (".trash", ".clean_shutdown")
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


# =====================================================================================
# The writing side: logbus itself.
# =====================================================================================

ESCAPED = "orders eu ü%:1"
ESCAPED_DIR = "orders%20eu%20%C3%BC%25%3A1"
TOPICS = {
    # name: (partitions, settings)
    "plain": (2, {"segment_bytes": 1024, "index_interval_bytes": 200, "flush": "none"}),
    ESCAPED: (1, {"segment_bytes": 1500, "index_interval_bytes": 300, "flush": "sync"}),
    "empty": (1, {"flush": "none"}),
}
ENVELOPE_HEADER = "logbus.envelope"


class Written(NamedTuple):
    dir: Path
    expected: dict[tuple[str, int], list[RRecord]]
    intervals: dict[str, int]
    gzip_offsets: dict[tuple[str, int], int]  # base offset of the gzip batch
    envelopes: dict[tuple[str, int, int], dict[str, Any]]  # what each envelope held


def _records(rng: random.Random, n: int, now: int) -> list[Any]:
    from logbus.core.log import Record

    out = []
    for _ in range(n):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 12))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 90))
        headers = [
            (f"h{j}-ü", None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 6)))
            for j in range(rng.choice([0, 0, 1, 3]))
        ]
        ts = None if rng.random() < 0.2 else now - 100_000 + rng.randint(-5_000, 5_000)
        out.append(Record(key, value, ts, headers))
    return out


def _write(data_dir: Path) -> Written:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    from logbus.core.envelope_pb2 import Envelope
    from logbus.core.log import LogManager, TopicConfig
    from logbus.core.message import Message
    from tests.loop import LoopReactor

    loop = LoopReactor()
    lm = LogManager(data_dir, loop)
    rng = random.Random(20240601)
    now0 = int(time.time() * 1000)
    expected: dict[tuple[str, int], list[RRecord]] = {}
    gzip_offsets: dict[tuple[str, int], int] = {}
    envelopes: dict[tuple[str, int, int], dict[str, Any]] = {}

    def add(topic: str, part: int, base: int, records: list[Any], now: int) -> None:
        got = expected.setdefault((topic, part), [])
        for i, r in enumerate(records):
            got.append(RRecord(base + i, now if r.timestamp is None else r.timestamp, r.key, r.value, list(r.headers)))

    for name, (nparts, settings) in TOPICS.items():
        topic = lm.open_topic(name, TopicConfig(partitions=nparts, **settings), create=True)
        if name == "empty":
            continue
        for part in topic.partitions:
            for k in range(60):
                now = now0 + k
                if k == 25:
                    # a batch as a Kafka producer sends it: gzip, offsets from 0
                    builder = DefaultRecordBatchBuilder(2, 1, 0, -1, -1, -1, 1 << 20)
                    sent = []
                    for i in range(4):
                        ts = now - 50_000 + i
                        hdrs = [("gz", b"%d" % i)]
                        builder.append(i, ts, b"gk%d" % i, b"compress me " * 30, hdrs)
                        sent.append((ts, b"gk%d" % i, b"compress me " * 30, hdrs))
                    res = loop.wait(part.append_raw(bytes(builder.build())))
                    gzip_offsets[(name, part.index)] = res.base_offset
                    got = expected.setdefault((name, part.index), [])
                    for i, (ts, key, value, hdrs) in enumerate(sent):
                        got.append(RRecord(res.base_offset + i, ts, key, value, list(hdrs)))
                    continue
                records = _records(rng, rng.randint(1, 5), now0)
                if k % 10 == 3:
                    env = Envelope(
                        protocol=Envelope.AMQP,
                        exchange="ex",
                        routing_key=f"rk.{k}",
                        keys=["a", "b"],
                        delivery_mode=2,
                        deliver_at_ms=now + 1000,
                    )
                    msg = Message(b"mk", b"mv", now - 1, [("user", b"u")], env)
                    records.append(msg.to_record())
                res = loop.wait(part.append(records, now_ms=now))
                assert res.last_offset - res.base_offset + 1 == len(records)
                add(name, part.index, res.base_offset, records, now)
                if k % 10 == 3:
                    envelopes[(name, part.index, res.last_offset)] = {
                        "protocol": 1,
                        "exchange": b"ex",
                        "routing_key": f"rk.{k}".encode(),
                        "keys": [b"a", b"b"],
                        "delivery_mode": 2,
                        "deliver_at_ms": now + 1000,
                    }
            assert len(part.segments) >= 3, "the test wants several segments per partition"
    lm.close()
    while loop.run_once():
        pass
    intervals = {n: s.get("index_interval_bytes", 4096) for n, (_, s) in TOPICS.items()}
    return Written(data_dir, expected, intervals, gzip_offsets, envelopes)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    return _write(tmp_path_factory.mktemp("data"))


# =====================================================================================
# Tests
# =====================================================================================


def test_crc32c_known_answer() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert R_HEADER.size == R_HEADER_SIZE


def test_directory_tree(written: Written) -> None:
    root = written.dir / "log"
    assert (root / ".clean_shutdown").read_text() == "clean\n"
    assert sorted(os.listdir(root)) == sorted([".clean_shutdown", "plain", ESCAPED_DIR, "empty"])
    topics = r_topics(written.dir)
    assert set(topics) == set(TOPICS)
    assert topics[ESCAPED].name == ESCAPED_DIR
    for name, (nparts, _) in TOPICS.items():
        parts = r_partitions(topics[name])
        assert sorted(parts) == list(range(nparts))
        for pdir in parts.values():
            bases = r_segments(pdir)
            assert bases and bases[0] == 0
            names = set(os.listdir(pdir))
            # after a clean shutdown every sealed segment has both indexes; the active
            # one only when it reached INDEX_ON_CLOSE_MIN (none does here)
            assert names == {f"{b:020d}.{ext}" for b in bases[:-1] for ext in ("log", "index", "timeindex")} | {
                f"{bases[-1]:020d}.log"
            }
    empty = r_partitions(topics["empty"])[0]
    assert r_seg_path(empty, 0, "log").stat().st_size == 0
    assert not r_seg_path(empty, 0, "index").exists()


def test_every_batch_and_record_reads_back(written: Written) -> None:
    topics = r_topics(written.dir)
    seen_gzip = 0
    for name, tdir in topics.items():
        for part, pdir in r_partitions(tdir).items():
            batches, end = r_partition_batches(pdir)
            records = [r for b in batches for r in r_records(b)]
            want = written.expected.get((name, part), [])
            assert records == want
            assert end == len(want)
            for b in batches:
                assert b.magic == 2 and b.leader_epoch == -1
                assert b.records_count == b.last_offset_delta + 1
                assert b.attributes & ~0x07 == 0  # CreateTime, not transactional, not control
                assert b.max_timestamp == max(r.timestamp for r in r_records(b))
                assert (b.producer_id, b.producer_epoch, b.base_sequence) == (-1, -1, -1)
                if b.attributes & 0x07 == 1:
                    seen_gzip += 1
                    assert b.base_offset == written.gzip_offsets[(name, part)]
                else:
                    assert b.first_timestamp == r_records(b)[0].timestamp
            # segment files hold whole batches and chain their offsets
            bases = r_segments(pdir)
            for base, nxt in zip(bases, bases[1:] + [end]):
                seg = [b for b in batches if base <= b.base_offset < nxt]
                if not seg:  # an empty partition: one empty segment
                    assert (base, end) == (0, 0) and not r_seg_path(pdir, base, "log").stat().st_size
                    continue
                assert seg[0].base_offset == base and seg[0].position == 0
                assert seg[-1].next_offset == nxt
                size = r_seg_path(pdir, base, "log").stat().st_size
                assert seg[-1].position + seg[-1].size == size
    assert seen_gzip == 3


def test_envelope_header(written: Written) -> None:
    topics = r_topics(written.dir)
    assert written.envelopes
    for (name, part, offset), want in written.envelopes.items():
        found = r_find_batch(r_partitions(topics[name])[part], offset)
        assert found is not None
        rec = next(r for r in r_records(found[0]) if r.offset == offset)
        assert rec.headers[:-1] == [("user", b"u")]
        hname, hvalue = rec.headers[-1]
        assert hname == ENVELOPE_HEADER and hvalue is not None
        fields = r_protobuf_fields(hvalue)
        got: dict[str, Any] = {"keys": []}
        numbers = {1: "protocol", 2: "exchange", 3: "routing_key", 8: "delivery_mode", 22: "deliver_at_ms"}
        for number, _wire, v in fields:
            if number == 6:
                got["keys"].append(v)
            else:
                got[numbers[number]] = v
        assert got == want
    # a record without an envelope carries no reserved header
    for recs in written.expected.values():
        for r in recs:
            if r.key != b"mk":
                assert all(h != ENVELOPE_HEADER for h, _ in r.headers)


def _documented_indexes(batches: list[RBatch], base: int, interval: int, sealed: bool) -> tuple[list, list]:
    """.index and .timeindex entries by the rule docs/format.md states."""
    offsets: list[tuple[int, int]] = []
    times: list[tuple[int, int]] = []
    max_ts = -1
    last_pos = None
    for b in batches:
        max_ts = max(max_ts, b.max_timestamp)
        if last_pos is None or b.position - last_pos >= interval:
            offsets.append((b.base_offset - base, b.position))
            last_pos = b.position
            if max_ts > (times[-1][0] if times else -1):
                times.append((max_ts, b.base_offset - base))
    if sealed and offsets and max_ts > (times[-1][0] if times else -1):
        times.append((max_ts, offsets[-1][0]))
    return offsets, times


def test_index_files_follow_the_documented_rule(written: Written) -> None:
    topics = r_topics(written.dir)
    for name, tdir in topics.items():
        for pdir in r_partitions(tdir).values():
            batches, _ = r_partition_batches(pdir)
            bases = r_segments(pdir)
            for i, base in enumerate(bases):
                nxt = bases[i + 1] if i + 1 < len(bases) else None
                seg = [b for b in batches if b.base_offset >= base and (nxt is None or b.base_offset < nxt)]
                offsets, times = _documented_indexes(seg, base, written.intervals[name], nxt is not None)
                if not _has_index_files(pdir, base, nxt):
                    offsets, times = [], []
                assert r_read_index(r_seg_path(pdir, base, "index")) == offsets
                assert r_read_timeindex(r_seg_path(pdir, base, "timeindex")) == times
                if seg and offsets:
                    assert offsets[0] == (0, 0)
                    if nxt is not None:  # sealed: the last time entry holds the segment's max
                        assert times[-1][0] == max(b.max_timestamp for b in seg)


@pytest.mark.parametrize("clean", [True, False])
def test_index_rule_holds_across_restarts(written: Written, tmp_path: Path, clean: bool) -> None:
    """After a clean or an unclean (kill -9) restart and more appends, the index files
    written at seal and at clean shutdown still follow the same documented rule."""
    from logbus.core.log import LogManager, TopicConfig
    from tests.loop import LoopReactor

    data = tmp_path / "copy"
    shutil.copytree(written.dir, data)
    if not clean:
        (data / "log" / ".clean_shutdown").unlink()
    loop = LoopReactor()
    lm = LogManager(data, loop)
    rng = random.Random(7)
    for name, (nparts, settings) in TOPICS.items():
        for p in lm.open_topic(name, TopicConfig(partitions=nparts, **settings)).partitions:
            for _ in range(30):
                loop.wait(p.append(_records(rng, rng.randint(1, 4), int(time.time() * 1000))))
    lm.close()
    while loop.run_once():
        pass
    for name, tdir in r_topics(data).items():
        for pdir in r_partitions(tdir).values():
            batches, _ = r_partition_batches(pdir)
            bases = r_segments(pdir)
            for i, base in enumerate(bases):
                nxt = bases[i + 1] if i + 1 < len(bases) else None
                seg = [b for b in batches if b.base_offset >= base and (nxt is None or b.base_offset < nxt)]
                offsets, times = _documented_indexes(seg, base, written.intervals[name], nxt is not None)
                if not _has_index_files(pdir, base, nxt):
                    offsets, times = [], []
                assert r_read_index(r_seg_path(pdir, base, "index")) == offsets
                assert r_read_timeindex(r_seg_path(pdir, base, "timeindex")) == times


def _has_index_files(pdir: Path, base: int, next_base: int | None) -> bool:
    """After a clean shutdown (docs/format.md section 8): sealed segments always, the
    active segment only from 4 MiB on."""
    return next_base is not None or r_seg_path(pdir, base, "log").stat().st_size >= INDEX_ON_CLOSE_MIN


def test_seek_by_offset_with_the_index(written: Written) -> None:
    topics = r_topics(written.dir)
    for (name, part), want in written.expected.items():
        pdir = r_partitions(topics[name])[part]
        interval = written.intervals[name]
        for rec in want:
            found = r_find_batch(pdir, rec.offset)
            assert found is not None
            batch, start = found
            if r_read_index(r_seg_path(pdir, r_segment_of(pdir, rec.offset), "index")):
                assert 0 <= batch.position - start < interval  # the index kept the walk short
            else:
                assert start == 0  # no index (a small active segment): walked from the start
            assert [r for r in r_records(batch) if r.offset == rec.offset] == [rec]
        assert r_find_batch(pdir, len(want)) is None  # the log end


def test_seek_by_timestamp_with_the_timeindex(written: Written) -> None:
    topics = r_topics(written.dir)
    for (name, part), want in written.expected.items():
        pdir = r_partitions(topics[name])[part]
        stamps = sorted({r.timestamp for r in want})
        probes = [stamps[0] - 1, stamps[-1], stamps[-1] + 1] + stamps[:: max(1, len(stamps) // 40)]
        probes += [t + 1 for t in stamps[:: max(1, len(stamps) // 40)]]
        for t in probes:
            first = next(((r.offset, r.timestamp) for r in want if r.timestamp >= t), None)
            assert r_offset_for_time(pdir, t) == first, t


def _recover(data_dir: Path) -> dict[tuple[str, int], tuple[int, list[Any]]]:
    """What logbus itself serves from ``data_dir`` after recovery."""
    from logbus.core.log import LogManager, TopicConfig
    from tests.loop import LoopReactor

    loop = LoopReactor()
    lm = LogManager(data_dir, loop)
    out = {}
    try:
        for name, (nparts, settings) in TOPICS.items():
            topic = lm.open_topic(name, TopicConfig(partitions=nparts, **settings))
            for p in topic.partitions:
                out[(name, p.index)] = (p.log_end_offset, p.read_records(0, 1 << 24))
    finally:
        lm.flusher.stop()
        lm.cache.close_all()
        while loop.run_once():
            pass
    return out


@pytest.mark.parametrize("clean_marker", [False, True])
def test_reader_stops_at_a_torn_tail_where_recovery_does(
    written: Written, tmp_path: Path, clean_marker: bool
) -> None:
    data = tmp_path / "copy"
    shutil.copytree(written.dir, data)
    if not clean_marker:
        (data / "log" / ".clean_shutdown").unlink()  # as after kill -9
    topics = r_topics(data)
    damage = {
        ("plain", 0): "truncate mid-batch",
        ("plain", 1): "garbage appended",
        (ESCAPED, 0): "bit flip in the last batch",
    }
    keep: dict[tuple[str, int], int] = {}
    for (name, part), how in damage.items():
        pdir = r_partitions(topics[name])[part]
        base = r_segments(pdir)[-1]
        path = r_seg_path(pdir, base, "log")
        batches, end = r_partition_batches(pdir)
        last = batches[-1]
        assert last.base_offset >= base
        size = path.stat().st_size
        if how == "truncate mid-batch":
            os.truncate(path, last.position + last.size // 2)
            keep[(name, part)] = last.base_offset
        elif how == "garbage appended":
            with open(path, "ab") as f:
                f.write(b"\x00\x00\x00\x00\x00\x00\x00\x63\x00\x00\x01\x00" + os.urandom(40))
            keep[(name, part)] = end
        else:
            with open(path, "r+b") as f:
                f.seek(last.position + last.size - 3)
                b = f.read(1)
                f.seek(last.position + last.size - 3)
                f.write(bytes([b[0] ^ 0x40]))
            keep[(name, part)] = last.base_offset
            assert path.stat().st_size == size
    for key, end in keep.items():
        name, part = key
        pdir = r_partitions(topics[name])[part]
        batches, got_end = r_partition_batches(pdir)
        assert got_end == end
        assert [r for b in batches for r in r_records(b)] == written.expected[key][:end]
        # the index hints of the damaged segment do not lead the seek astray
        for rec in written.expected[key][max(0, end - 5) : end]:
            found = r_find_batch(pdir, rec.offset)
            assert found is not None and rec in r_records(found[0])
        assert r_find_batch(pdir, end) is None

    served = _recover(data)
    for key, (end, records) in served.items():
        want = written.expected.get(key, [])[: keep.get(key, len(written.expected.get(key, [])))]
        assert end == len(want), key
        assert [RRecord(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == want
    # after recovery the reader sees exactly the same log
    for (name, part), (end, _) in served.items():
        assert r_partition_batches(r_partitions(r_topics(data)[name])[part])[1] == end


def test_state_store_layout(tmp_path: Path) -> None:
    """RocksDB: the column families and the metadata CF's topic key and TopicRecord,
    read with rocksdict (raw mode) and a wire-format decode, not with logbus."""
    from twisted.internet.task import Clock

    from logbus.core.broker import Broker

    class Reactor(Clock):
        def callFromThread(self, f: Any, *args: Any) -> None:
            self.callLater(0, f, *args)

    broker = Broker(tmp_path, reactor=Reactor())
    broker.start()
    broker.create_topic(ESCAPED, {"partitions": 3, "flush": "none"})
    broker.stop()
    assert (tmp_path / "LOCK").read_text() == f"{os.getpid()}\n"
    assert (tmp_path / "log" / ESCAPED_DIR / "2").is_dir()

    from rocksdict import Options, Rdict

    path = str(tmp_path / "state")
    cfs = Rdict.list_cf(path)
    assert set(cfs) == {"default", "metadata", "offsets", "queues", "timers", "sessions", "producers"}
    db = Rdict(path, Options(raw_mode=True), column_families={n: Options(raw_mode=True) for n in cfs})
    try:
        meta = db.get_column_family("metadata")
        items = list(meta.items())
        assert [k for k, _ in items] == [b"topic\x00" + ESCAPED.encode() + b"\x00"]
        fields = r_protobuf_fields(items[0][1])
        rec: dict[int, Any] = {}
        config = {}
        for number, _wire, v in fields:
            if number == 3:  # map<string, string> entry: key = 1, value = 2
                entry = {n: x for n, _, x in r_protobuf_fields(v)}
                config[entry[1].decode()] = entry[2].decode()
            else:
                rec[number] = v
        assert rec[1] == ESCAPED.encode() and rec[2] == 3
        assert abs(rec[4] - time.time() * 1000) < 60_000
        assert config["flush"] == "none" and config["segment.bytes"] == str(128 * 1024 * 1024)
        assert "partitions" not in config
        for cf in ("offsets", "queues", "timers", "sessions", "producers"):
            assert list(db.get_column_family(cf).items()) == []
    finally:
        db.close()
