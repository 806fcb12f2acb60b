"""The log on a temp dir: append, read, roll, indexes, timestamps, retention, handles."""

from __future__ import annotations

import os
from typing import Any, Callable

import pytest

from logbus.core.errors import (
    OffsetOutOfRange,
    RecordTooLarge,
    StorageError,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)
from logbus.core.log import LogManager, Record
from logbus.core.log import batch as B
from tests.core.conftest import topic_config
from tests.loop import LoopReactor

OpenLog = Callable[..., LogManager]


def append_n(loop: LoopReactor, p: Any, n: int, size: int = 50, ts: int | None = None, per_batch: int = 1) -> list[Any]:
    """``n`` appends, each waited for (so each is its own batch)."""
    return [loop.wait(p.append([Record(b"k%d" % i, b"v" * size, ts)] * per_batch)) for i in range(n)]


def test_appends_in_one_tick_share_one_batch(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(), create=True).partition(0)
    ds = [p.append([Record(b"k%d" % i, b"v%d" % i, 1000 + i)]) for i in range(50)]
    results = [loop.wait(d) for d in ds]
    assert [(r.base_offset, r.last_offset) for r in results] == [(i, i) for i in range(50)]
    infos = B.split_validate(p.read(0, 1 << 20).data, 1 << 20)
    assert len(infos) == 1 and infos[0].records_count == 50
    assert [(r.offset, r.key, r.timestamp) for r in p.read_records(0)] == [
        (i, b"k%d" % i, 1000 + i) for i in range(50)
    ]
    # a raw batch in the same tick keeps call order: queued records are encoded first
    d1 = p.append([Record(None, b"before")])
    d2 = p.append_raw(bytes(B.build([Record(None, b"raw")], 0)))
    d3 = p.append([Record(None, b"after")])
    assert [loop.wait(d).base_offset for d in (d1, d2, d3)] == [50, 51, 52]
    assert [r.value for r in p.read_records(50)] == [b"before", b"raw", b"after"]


def test_append_assigns_offsets_and_reads_back(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(partitions=2), create=True).partition(1)
    results = append_n(loop, p, 10, per_batch=3)
    assert [(r.base_offset, r.last_offset) for r in results] == [(3 * i, 3 * i + 2) for i in range(10)]
    assert p.log_end_offset == 30 and p.log_start_offset == 0
    recs = p.read_records(7)
    assert [r.offset for r in recs] == list(range(7, 30))
    assert recs[0].key == b"k2"


def test_read_returns_whole_batches_and_spans(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(), create=True).partition(0)
    append_n(loop, p, 5, per_batch=4)  # batches at 0,4,8,12,16
    batch_size = p.read(0, 1).size  # first batch is returned even past max_bytes
    res = p.read(5, 2 * batch_size)
    assert res.first_offset == 4 and res.next_offset == 12
    assert len(res.spans) == 1 and res.spans[0].size == 2 * batch_size == len(res.data)
    with open(res.spans[0].path, "rb") as f:
        f.seek(res.spans[0].position)
        assert f.read(res.spans[0].size) == res.data
    assert p.read(20, 100).spans == [] and p.read(20, 100).next_offset == 20
    with pytest.raises(OffsetOutOfRange):
        p.read(21, 100)
    with pytest.raises(OffsetOutOfRange):
        p.read(-1, 100)


def test_roll_by_size_and_reads_across_segments(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(segment_bytes=2048, index_interval_bytes=256), create=True).partition(0)
    append_n(loop, p, 200, size=40)
    assert len(p.segments) > 5
    for a, b in zip(p.segments, p.segments[1:]):
        assert a.next_offset == b.base_offset and a.size <= 2048
        assert os.path.basename(b.log_path) == f"{b.base_offset:020d}.log"
    assert [r.offset for r in p.read_records(0, 1 << 20)] == list(range(200))
    res = p.read(0, 1 << 20)
    assert len(res.spans) == len(p.segments)
    for offset in (0, 13, 57, 150, 199):
        assert p.read_records(offset, 1)[0].offset == offset


def test_roll_by_age(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(segment_ms=1000), create=True).partition(0)
    loop.wait(p.append([Record(None, b"a")], now_ms=10_000))
    loop.wait(p.append([Record(None, b"b")], now_ms=10_500))
    assert len(p.segments) == 1
    loop.wait(p.append([Record(None, b"c")], now_ms=11_001))
    assert [s.base_offset for s in p.segments] == [0, 2]
    assert lm.housekeeping(now_ms=20_000) == 0 and len(p.segments) == 3  # idle roll
    assert p.active.size == 0 and p.active.base_offset == 3


def test_offset_for_time(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(segment_bytes=1024, index_interval_bytes=128), create=True).partition(0)
    for i in range(100):
        loop.wait(p.append([Record(None, b"x" * 20, 1000 + 10 * i), Record(None, b"y", 1005 + 10 * i)]))
    assert p.offset_for_time(0) == (0, 1000)
    assert p.offset_for_time(1000) == (0, 1000)
    assert p.offset_for_time(1001) == (1, 1005)
    assert p.offset_for_time(1500) == (100, 1500)
    assert p.offset_for_time(1995) == (199, 1995)
    assert p.offset_for_time(1996) is None


def test_append_raw_rewrites_offsets_keeps_bytes(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(), create=True).partition(0)
    loop.wait(p.append([Record(None, b"first")]))
    sent = bytes(B.build([Record(b"a", b"1"), Record(b"b", b"2")], 0)) + bytes(B.build([Record(b"c", b"3")], 0))
    r = loop.wait(p.append_raw(sent))
    assert (r.base_offset, r.last_offset) == (1, 3)
    data = p.read(1, 1 << 20).data
    infos = B.split_validate(data, 1 << 20)
    assert [i.base_offset for i in infos] == [1, 3]
    assert [r.value for r in p.read_records(0)] == [b"first", b"1", b"2", b"3"]
    # everything but the base offsets is stored exactly as sent
    first = len(B.build([Record(b"a", b"1"), Record(b"b", b"2")], 0))
    assert data[8:first] == sent[8:first] and data[first + 8:] == sent[first + 8:]


def test_append_raw_rejects_bad_input(open_log: OpenLog, loop: LoopReactor) -> None:
    from logbus.core.errors import CorruptBatch

    lm = open_log()
    p = lm.open_topic("t", topic_config(max_message_bytes=200), create=True).partition(0)
    bad = B.build([Record(None, b"x")], 0)
    bad[-1] ^= 1
    with pytest.raises(CorruptBatch):
        loop.wait(p.append_raw(bytes(bad)))
    with pytest.raises(RecordTooLarge):
        loop.wait(p.append_raw(bytes(B.build([Record(None, b"x" * 300)], 0))))
    with pytest.raises(RecordTooLarge):
        loop.wait(p.append([Record(None, b"x" * 300)]))
    assert p.log_end_offset == 0 and p.size_bytes == 0


def test_retention_by_size_and_time_and_guard(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    cfg = topic_config(segment_bytes=1024, retention_bytes=3000, retention_ms=60_000)
    p = lm.open_topic("t", cfg, create=True).partition(0)
    for i in range(60):
        loop.wait(p.append([Record(None, b"x" * 80, 1_000_000 + i)]))
    n_before = len(p.segments)
    # a queue still needs offset 5: nothing can go
    assert lm.housekeeping(now_ms=1_000_100, keep_from=lambda t, i: 5) == 0
    deleted = lm.housekeeping(now_ms=1_000_100)
    assert deleted > 0 and len(p.segments) == n_before - deleted
    assert p.size_bytes - p.segments[0].size < 3000
    start = p.log_start_offset
    assert start == p.segments[0].base_offset > 0
    assert not os.path.exists(os.path.join(p.directory, f"{0:020d}.log"))
    with pytest.raises(OffsetOutOfRange):
        p.read(0, 100)
    assert p.read_records(start)[0].offset == start
    # time: everything older than retention.ms goes, but never the active segment
    lm.housekeeping(now_ms=1_000_000 + 10_000_000)
    assert len(p.segments) == 1 and p.log_end_offset == 60


def test_file_handles_are_bounded(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log(max_open_files=8)
    t = lm.open_topic("many", topic_config(partitions=40, segment_bytes=1024), create=True)
    for round_ in range(3):
        ds = [p.append([Record(None, b"x" * 300)]) for p in t.partitions]
        for d in ds:
            loop.wait(d)
        assert len(lm.cache) <= 8
    for p in t.partitions:
        assert [r.offset for r in p.read_records(0)] == [0, 1, 2]
    assert len(lm.cache) <= 8


def test_sync_policy_fires_after_flush(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(flush="sync"), create=True).partition(0)
    d = p.append([Record(None, b"x")])
    fired: list[Any] = []
    d.addCallback(fired.append)
    assert not fired  # not before the tick's write and the flusher's fsync
    loop.run_until(lambda: bool(fired))
    assert fired[0].base_offset == 0
    before = lm.metrics.flushes.files
    assert before >= 1


def test_interval_policy(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(flush="interval:20"), create=True).partition(0)
    loop.wait(p.append([Record(None, b"x")]))
    loop.run_until(lambda: lm.metrics.flushes.files >= 1, timeout=5)


def test_topics_create_open_delete(open_log: OpenLog, loop: LoopReactor, tmp_path: Any) -> None:
    lm = open_log()
    t = lm.open_topic("weird name:ü", topic_config(partitions=2), create=True)
    assert os.path.basename(t.directory) == "weird%20name%3A%C3%BC"
    with pytest.raises(TopicExists):
        lm.open_topic("weird name:ü", topic_config(), create=True)
    with pytest.raises(UnknownPartition):
        t.partition(2)
    grown = lm.open_topic("weird name:ü", topic_config(partitions=4))
    assert len(grown.partitions) == 4 and os.path.isdir(os.path.join(t.directory, "3"))
    loop.wait(t.partition(0).append([Record(None, b"x")]))
    lm.delete_topic("weird name:ü")
    assert not os.path.exists(t.directory)
    with pytest.raises(UnknownTopic):
        lm.topic("weird name:ü")


def test_clean_reopen_keeps_everything(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    cfg = topic_config(segment_bytes=1024, index_interval_bytes=100)
    p = lm.open_topic("t", cfg, create=True).partition(0)
    append_n(loop, p, 50, size=30, ts=5000)
    lm.close()
    # sealed segments keep their index files; the small active one has none (it is scanned)
    assert all(os.path.exists(s.index_path) for s in p.segments[:-1])
    assert not os.path.exists(p.active.index_path) and not os.path.exists(p.active.time_path)
    lm2 = open_log()
    assert lm2.clean_start
    p2 = lm2.open_topic("t", cfg).partition(0)
    assert lm2.reports == []
    assert p2.log_end_offset == 50 and [r.offset for r in p2.read_records(0)] == list(range(50))
    assert p2.offset_for_time(5000) == (0, 5000)
    assert loop.wait(p2.append([Record(None, b"more")])).base_offset == 50
    assert list(lm2.metrics.registry.collect())  # the collector answers


def test_metrics_collector_counts(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(), create=True).partition(0)
    append_n(loop, p, 4, per_batch=2)
    from prometheus_client import generate_latest

    text = generate_latest(lm.metrics.registry).decode()
    assert 'logbus_records_appended_total{topic="t"} 8.0' in text
    assert "logbus_partitions 1.0" in text


def test_topic_names_never_collide_with_log_entries(open_log: OpenLog, loop: LoopReactor) -> None:
    from logbus.core.errors import InvalidTopicName
    from logbus.core.log import topic_dirname

    lm = open_log()
    for name in (".trash", ".clean_shutdown", ".hidden"):
        t = lm.open_topic(name, topic_config(), create=True)
        assert not os.path.basename(t.directory).startswith(".")
        loop.wait(t.partition(0).append([Record(None, name.encode())]))
    assert topic_dirname(".trash") == "%2Etrash"
    lm.close()
    lm2 = open_log()
    for name in (".trash", ".clean_shutdown", ".hidden"):
        p = lm2.open_topic(name, topic_config()).partition(0)
        assert [r.value for r in p.read_records(0)] == [name.encode()]
    with pytest.raises(InvalidTopicName, match="escaped"):
        lm2.open_topic("é" * 124, topic_config(), create=True)
    for bad in ("a/b", ".", ".."):
        with pytest.raises(InvalidTopicName):
            lm2.open_topic(bad, topic_config(), create=True)


def test_client_batches_that_only_the_broker_may_write_are_refused(open_log: OpenLog, loop: LoopReactor) -> None:
    import struct

    from aiokafka.record.util import calc_crc32c

    from logbus.core.errors import CorruptBatch

    def patched(attrs: int | None = None, count: int | None = None, lod: int | None = None) -> bytes:
        buf = B.build([Record(None, b"x")] * 2, 0)
        if attrs is not None:
            struct.pack_into(">h", buf, 21, attrs)
        if lod is not None:
            struct.pack_into(">i", buf, 23, lod)
        if count is not None:
            struct.pack_into(">i", buf, 57, count)
        struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
        return bytes(buf)

    lm = open_log()
    p = lm.open_topic("t", topic_config(), create=True).partition(0)
    for bad, why in (
        (patched(attrs=B.ATTR_CONTROL), "control"),
        (patched(attrs=5), "codec"),
        (patched(count=1000, lod=999), "claims"),
    ):
        with pytest.raises(CorruptBatch, match=why):
            loop.wait(p.append_raw(bad))
    assert p.log_end_offset == 0
    assert loop.wait(p.append_raw(patched())).last_offset == 1


def test_segment_rolls_before_relative_offsets_overflow(
    open_log: OpenLog, loop: LoopReactor, monkeypatch: pytest.MonkeyPatch
) -> None:
    from logbus.core.log import partition as P

    monkeypatch.setattr(P, "MAX_RELATIVE_OFFSET", 10)
    lm = open_log()
    p = lm.open_topic("t", topic_config(), create=True).partition(0)
    for _ in range(5):
        loop.wait(p.append([Record(None, b"x")] * 3))
    loop.wait(p.append_raw(bytes(B.build([Record(None, b"y")] * 4, 0))))
    assert all(s.next_offset - s.base_offset <= 10 for s in p.segments)
    assert len(p.segments) >= 2 and p.log_end_offset == 19
    assert [r.offset for r in p.read_records(0)] == list(range(19))


def test_large_active_segment_keeps_its_index_at_shutdown(
    open_log: OpenLog, loop: LoopReactor, monkeypatch: pytest.MonkeyPatch
) -> None:
    from logbus.core.log import partition as P

    monkeypatch.setattr(P, "INDEX_ON_CLOSE_MIN", 500)
    cfg = topic_config(index_interval_bytes=100)
    lm = open_log()
    p = lm.open_topic("t", cfg, create=True).partition(0)
    append_n(loop, p, 20, size=30, ts=7000)
    lm.close()
    assert os.path.getsize(p.active.index_path) > 8
    lm2 = open_log()
    p2 = lm2.open_topic("t", cfg).partition(0)
    assert lm2.reports == [] and len(p2.active.index) == len(p.active.index)
    assert p2.read_records(13, 1)[0].offset == 13


def test_sync_readers_see_only_durable_records(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log(inline_flush=False)  # every sync through the flusher thread
    p = lm.open_topic("t", topic_config(flush="sync"), create=True).partition(0)
    loop.wait(p.append([Record(None, b"first")]))
    assert p.high_watermark == 1
    d = p.append([Record(None, b"second")])
    lm.drain()  # written to the page cache, handed to the flusher, not yet durable
    # the flusher's answer comes back through the loop, which has not run since
    res = p.read(0, 1 << 20)
    assert res.log_end_offset == 2 and res.high_watermark == 1
    assert [r.value for r in B.decode(res.data)] == [b"first"]
    assert p.read(1, 100).spans == []  # between the watermark and the end: empty
    loop.wait(d)
    assert p.high_watermark == 2
    assert [r.value for r in p.read_records(0)] == [b"first", b"second"]
    with pytest.raises(OffsetOutOfRange):
        p.read(3, 100)


def test_non_sync_readers_see_every_written_record(open_log: OpenLog, loop: LoopReactor) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(flush="interval:1000"), create=True).partition(0)
    p.append([Record(None, b"x")])
    assert p.read_records(0)[0].value == b"x" and p.high_watermark == 1  # read drains


@pytest.mark.parametrize("flush", ["sync", "none", "interval:1000"])
def test_watchers_hear_when_records_become_readable(open_log: OpenLog, loop: LoopReactor, flush: str) -> None:
    lm = open_log()
    p = lm.open_topic("t", topic_config(flush=flush), create=True).partition(0)
    seen: list[int] = []

    def cb() -> None:
        seen.append(p.high_watermark)

    p.watch(cb)
    loop.wait(p.append([Record(None, b"a")]))
    assert seen and seen[-1] == 1  # told once the record is readable, not before
    p.unwatch(cb)
    loop.wait(p.append([Record(None, b"b")]))
    assert seen[-1] == 1


def test_an_append_past_the_tick_batch_gets_a_batch_of_its_own(open_log: OpenLog, loop: LoopReactor) -> None:
    """MAX_TICK_BATCH is when a tick's appends are encoded, not a size limit: a record
    larger than it is accepted up to max.message.bytes, in a batch of its own after the
    records queued before it, and the records after it go on in the next batch."""
    from logbus.core.log.partition import MAX_TICK_BATCH

    lm = open_log()
    p = lm.open_topic("t", topic_config(max_message_bytes=4 * MAX_TICK_BATCH), create=True).partition(0)
    big = b"B" * (2 * MAX_TICK_BATCH)
    ds = [p.append([Record(None, b"a")]), p.append([Record(None, b"b")]), p.append([Record(None, big)]),
          p.append([Record(None, b"c")])]
    assert [loop.wait(d).base_offset for d in ds] == [0, 1, 2, 3]
    infos = B.split_validate(p.read(0, 16 << 20).data, 16 << 20)
    assert [(i.base_offset, i.records_count) for i in infos] == [(0, 2), (2, 1), (3, 1)]
    assert [r.value for r in p.read_records(0, 16 << 20)] == [b"a", b"b", big, b"c"]


def test_a_refused_append_with_a_callback_raises_and_keeps_nothing(open_log: OpenLog, loop: LoopReactor) -> None:
    """The callback form refuses at once by raising (the caller must know before it
    gives the record's offset to anyone): next_offset is unchanged, nothing is queued,
    and a closed partition refuses the same way."""
    lm = open_log()
    p = lm.open_topic("t", topic_config(max_message_bytes=300), create=True).partition(0)
    results: list[Any] = []
    p.append([Record(None, b"ok")], callback=results.append)
    with pytest.raises(RecordTooLarge, match="max.message.bytes"):
        p.append([Record(None, b"x" * 300)], callback=results.append)
    assert p.next_offset == 1
    p.append([Record(None, b"ok2")], callback=results.append)
    while loop.run_once():
        pass
    assert [r.base_offset for r in results] == [0, 1]
    assert [r.value for r in p.read_records(0)] == [b"ok", b"ok2"]
    p.close()
    with pytest.raises(StorageError, match="closed"):
        p.append([Record(None, b"late")], callback=results.append)
    assert p.next_offset == 2 and len(results) == 2
