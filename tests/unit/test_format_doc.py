"""docs/format.md is enough to read a logbus data directory without logbus.

logbus writes a log (several topics, one with a name that needs escaping, several
segments per partition, keys, headers, explicit and append-time timestamps, an
envelope header, a gzip batch appended as a Kafka producer sends it) and shuts down
cleanly. Then an independent reader (tests/unit/format_reader.py: written from
docs/format.md with the standard library only, no ``logbus`` import, no aiokafka)
lists the topics from the directory tree, decodes every batch
and record and must get back exactly what was written; it seeks by offset with the
``.index`` files and by timestamp with the ``.timeindex`` files, and it stops at a
torn or corrupt tail exactly where logbus's own recovery stops.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tests.unit.format_reader import (
    INDEX_ON_CLOSE_MIN,
    RBatch,
    RRecord,
    R_HEADER,
    R_HEADER_SIZE,
    crc32c,
    r_find_batch,
    r_offset_for_time,
    r_partition_batches,
    r_partitions,
    r_protobuf_fields,
    r_read_index,
    r_read_timeindex,
    r_records,
    r_seg_path,
    r_segment_of,
    r_segments,
    r_topics,
)


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
            # a sealed segment may have its key index (written by a background pass), the
            # active one never has
            names -= {f"{b:020d}.keyindex" for b in bases[:-1]}
            assert (pdir / "aborted.txnindex").read_bytes() == b""  # every partition's, empty: none aborted
            names.remove("aborted.txnindex")
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


def _check_index_files(data_dir: Path, intervals: dict[str, int]) -> None:
    """Every segment's index files hold exactly what docs/format.md section 6-8 says."""
    for name, tdir in r_topics(data_dir).items():
        for pdir in r_partitions(tdir).values():
            batches, _ = r_partition_batches(pdir)
            bases = r_segments(pdir)
            for i, base in enumerate(bases):
                nxt = bases[i + 1] if i + 1 < len(bases) else None
                seg = [b for b in batches if b.base_offset >= base and (nxt is None or b.base_offset < nxt)]
                offsets, times = _documented_indexes(seg, base, intervals[name], nxt is not None)
                if not _has_index_files(pdir, base, nxt):
                    offsets, times = [], []
                assert r_read_index(r_seg_path(pdir, base, "index")) == offsets
                assert r_read_timeindex(r_seg_path(pdir, base, "timeindex")) == times
                if seg and offsets:
                    assert offsets[0] == (0, 0)
                    if nxt is not None:  # sealed: the last time entry holds the segment's max
                        assert times[-1][0] == max(b.max_timestamp for b in seg)


def test_index_files_follow_the_documented_rule(written: Written) -> None:
    _check_index_files(written.dir, written.intervals)


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
    _check_index_files(data, written.intervals)


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
    """RocksDB: the column families and the metadata CF's topic key and TopicRecord (and
    the first boot's user and vhost keys), read with rocksdict (raw mode) and a wire-format
    decode, not with logbus."""
    from twisted.internet.task import Clock

    from logbus.core.broker import Broker

    class Reactor(Clock):
        def callFromThread(self, f: Any, *args: Any) -> None:
            self.callLater(0, f, *args)

    broker = Broker(tmp_path, reactor=Reactor())
    broker.start()
    broker.topics.create_topic(ESCAPED, {"partitions": 3, "flush": "none"})
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
        everything = list(meta.items())
        items = [(k, v) for k, v in everything if k.startswith(b"topic\x00")]
        assert [k for k, _ in items] == [b"topic\x00" + ESCAPED.encode() + b"\x00"]
        # first boot: vhost "/", the default and the anonymous user and their permissions, the marker
        assert sorted(k for k, _ in everything if not k.startswith(b"topic\x00")) == [
            b"auth_seeded\x00", b"permission\x00/\x00anonymous\x00", b"permission\x00/\x00guest\x00",
            b"user\x00anonymous\x00", b"user\x00guest\x00", b"vhost\x00/\x00"]
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
