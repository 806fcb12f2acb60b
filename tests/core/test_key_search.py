"""Message search on a temp dir: by key, message id and time range, through the key
index, across sealed and active segments, after restarts, with index files missing,
cut short or damaged, with colliding hashes, after retention and topic deletion."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import pytest

from logbus.core.broker import Broker
from logbus.core.errors import InvalidRequest, UnknownPartition, UnknownTopic
from logbus.core.log import LogManager, TopicConfig, format as F, keyindex as K, keyindexer
from logbus.core.message import Envelope, Message
from logbus.core import search as S
from logbus.core.search import FoundMessage, search
from logbus.core.types import FoundMessage as ExportedFoundMessage
from tests.loop import LoopReactor

T0 = 1_700_000_000_000
KEYS = 13


def config(**kw: Any) -> TopicConfig:
    kw.setdefault("flush", "none")
    kw.setdefault("partitions", 2)
    kw.setdefault("segment_bytes", 2048)
    return TopicConfig(**kw)


class Model:
    """What was appended: (partition, offset) -> (key, message id, timestamp, value)."""

    def __init__(self) -> None:
        self.records: dict[tuple[int, int], tuple[bytes | None, str | None, int, bytes]] = {}

    def where(self, pred: Callable[[bytes | None, str | None, int], bool]) -> list[tuple[int, int]]:
        return sorted(k for k, (key, mid, ts, _) in self.records.items() if pred(key, mid, ts))


def fill(lm: LogManager, loop: LoopReactor, model: Model, n: int, start: int = 0, topic: str = "t") -> None:
    """``n`` records, one batch each (many segments): key ``k<i % KEYS>`` (none for every
    7th), a message id ``id-<i>`` on two in three, timestamps one ms apart."""
    parts = lm.topic(topic).partitions
    for i in range(start, start + n):
        key = None if i % 7 == 6 else b"k%d" % (i % KEYS)
        mid = f"id-{i}" if i % 3 else None
        env = Envelope(message_id=mid, exchange="x") if mid else Envelope(exchange="x")
        value = b"value %d " % i + b"." * 40
        p = parts[i % len(parts)]
        res = loop.wait(p.append([Message(key, value, T0 + i, [("h", b"%d" % i)], env).to_record()]))
        model.records[(p.index, res.base_offset)] = (key, mid, T0 + i, value)


def found_at(found: list[FoundMessage]) -> list[tuple[int, int]]:
    return [(f.partition, f.offset) for f in found]


def settle(lm: LogManager, loop: LoopReactor) -> None:
    loop.run_until(lm.keys.settled, timeout=30)


def test_lookups_by_key_and_message_id_across_segments(open_log: Callable[..., LogManager], loop: LoopReactor) -> None:
    lm = open_log()
    lm.open_topic("t", config(), create=True)
    model = Model()
    fill(lm, loop, model, 400)
    settle(lm, loop)
    p0 = lm.partition("t", 0)
    assert len(p0.segments) > 5 and all(os.path.exists(s.key_path) for s in p0.segments[:-1])
    assert not os.path.exists(p0.active.key_path)
    assert lm.keys.files_written >= 10
    for k in range(KEYS):
        key = b"k%d" % k
        got = search(lm, "t", key=key, limit=1000)
        assert found_at(got) == model.where(lambda kk, m, ts: kk == key)
        assert all(f.key == key for f in got)
    got = search(lm, "t", message_id="id-200")
    assert found_at(got) == model.where(lambda k, m, ts: m == "id-200") and len(got) == 1
    f = got[0]
    assert f.message_id == "id-200" and f.timestamp_ms == T0 + 200 and f.headers == (("h", b"200"),)
    assert f.value == model.records[(f.partition, f.offset)][3] and f.size == len(f.value or b"")
    assert search(lm, "t", message_id="id-202") != [] and search(lm, "t", message_id="id-201") == []  # 201 % 3 == 0: none
    assert search(lm, "t", key=b"absent") == []
    # key and id together: both must hold
    assert found_at(search(lm, "t", key=b"k6", message_id="id-200")) == []  # its key is k5
    assert found_at(search(lm, "t", key=b"k%d" % (200 % KEYS), message_id="id-200")) == found_at(got)


def test_the_index_answers_only_the_records_of_a_key(open_log: Callable[..., LogManager], loop: LoopReactor) -> None:
    """A lookup reads candidates, not the topic: without collisions, the candidates are
    exactly the records with the key."""
    lm = open_log()
    lm.open_topic("t", config(), create=True)
    model = Model()
    fill(lm, loop, model, 300)
    settle(lm, loop)
    for p in lm.topic("t").partitions:
        cands = lm.keys.candidates(p, F.key_hash(b"k3"))
        assert [(p.index, o) for o in cands] == [x for x in model.where(lambda k, m, ts: k == b"k3") if x[0] == p.index]


def test_active_segment_found_before_the_background_pass(open_log: Callable[..., LogManager], loop: LoopReactor) -> None:
    """With no background pass at all, a lookup indexes what it needs itself."""
    lm = open_log(key_index=False)
    lm.open_topic("t", config(segment_bytes=1 << 20), create=True)
    model = Model()
    fill(lm, loop, model, 60)
    assert lm.keys.records_indexed == 0
    assert found_at(search(lm, "t", key=b"k2")) == model.where(lambda k, m, ts: k == b"k2")
    fill(lm, loop, model, 40, start=60)  # appended after the first lookup: the tail is indexed too
    assert found_at(search(lm, "t", key=b"k2")) == model.where(lambda k, m, ts: k == b"k2")
    assert lm.keys.records_indexed == 100


def test_same_answers_after_restart_and_unclean_restart(open_log: Callable[..., LogManager], loop: LoopReactor) -> None:
    lm = open_log()
    lm.open_topic("t", config(), create=True)
    model = Model()
    fill(lm, loop, model, 300)
    settle(lm, loop)
    want = {k: model.where(lambda kk, m, ts, k=k: kk == b"k%d" % k) for k in range(KEYS)}
    lm.close()
    lm2 = open_log()
    lm2.open_topic("t", config())
    for k in range(KEYS):
        assert found_at(search(lm2, "t", key=b"k%d" % k, limit=1000)) == want[k]
    assert lm2.keys.files_rebuilt == 0  # the sealed segments' files were checked and used
    fill(lm2, loop, model, 50, start=300)
    # no close: an unclean stop; the active segment's entries were in memory only
    lm2.flusher.stop()
    lm2.keys.stop()
    lm2.cache.close_all()
    lm3 = open_log()
    lm3.open_topic("t", config())
    for k in range(KEYS):
        assert found_at(search(lm3, "t", key=b"k%d" % k, limit=1000)) == model.where(lambda kk, m, ts, k=k: kk == b"k%d" % k)


@pytest.mark.parametrize("damage", ["delete", "truncate", "flip", "empty", "other_log_size"])
def test_damaged_index_file_is_rebuilt(open_log: Callable[..., LogManager], loop: LoopReactor, damage: str) -> None:
    lm = open_log()
    lm.open_topic("t", config(partitions=1), create=True)
    model = Model()
    fill(lm, loop, model, 200)
    settle(lm, loop)
    seg = lm.partition("t", 0).segments[2]
    path = Path(seg.key_path)
    good = path.read_bytes()
    assert list(K.decode(good, seg.size))  # the file holds the segment's entries
    lm.close()
    if damage == "delete":
        path.unlink()
    elif damage == "truncate":
        path.write_bytes(good[: len(good) - 5])
    elif damage == "flip":
        bad = bytearray(good)
        bad[K.HEADER_SIZE + 3] ^= 0x40  # an entry's hash: no longer the CRC's
        path.write_bytes(bytes(bad))
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(K.encode(K.decode(good), seg.size + 1))
    lm2 = open_log()
    lm2.open_topic("t", config(partitions=1))
    for k in range(KEYS):
        assert found_at(search(lm2, "t", key=b"k%d" % k, limit=1000)) == model.where(lambda kk, m, ts, k=k: kk == b"k%d" % k)
    assert lm2.keys.files_rebuilt == 1
    settle(lm2, loop)
    assert path.read_bytes() == good  # written again, the same bytes


@pytest.mark.pure_only
def test_collisions_never_give_a_wrong_record(open_log: Callable[..., LogManager], loop: LoopReactor,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key and every message id hashes alike: every record is a candidate, and the
    answers are still exactly the records asked for."""
    monkeypatch.setattr(keyindexer, "key_hash", lambda key: 42)
    monkeypatch.setattr(keyindexer, "message_id_hash", lambda mid: 42)
    monkeypatch.setattr(S, "key_hash", lambda key: 42)
    monkeypatch.setattr(S, "message_id_hash", lambda mid: 42)
    lm = open_log()
    lm.open_topic("t", config(), create=True)
    model = Model()
    fill(lm, loop, model, 150)
    settle(lm, loop)
    p = lm.partition("t", 0)
    assert len(lm.keys.candidates(p, 42)) > len([x for x in model.records if x[0] == 0])  # keys and ids: all collide
    for k in range(KEYS):
        assert found_at(search(lm, "t", key=b"k%d" % k, limit=1000)) == model.where(lambda kk, m, ts, k=k: kk == b"k%d" % k)
    assert found_at(search(lm, "t", message_id="id-100")) == model.where(lambda k, m, ts: m == "id-100")
    assert found_at(search(lm, "t", key=b"k1", limit=2)) == model.where(lambda k, m, ts: k == b"k1")[:2]


def test_time_range(open_log: Callable[..., LogManager], loop: LoopReactor) -> None:
    lm = open_log()
    lm.open_topic("t", config(), create=True)
    model = Model()
    fill(lm, loop, model, 300)
    got = search(lm, "t", start_ms=T0 + 100, end_ms=T0 + 149, limit=1000)
    assert found_at(got) == model.where(lambda k, m, ts: T0 + 100 <= ts <= T0 + 149)
    got = search(lm, "t", start_ms=T0 + 100, limit=10, partition=1)
    assert found_at(got) == [x for x in model.where(lambda k, m, ts: ts >= T0 + 100) if x[0] == 1][:10]
    assert found_at(search(lm, "t", end_ms=T0 + 9, limit=100)) == model.where(lambda k, m, ts: ts <= T0 + 9)
    assert search(lm, "t", start_ms=T0 + 10_000) == []
    # key and time range: both filters
    got = search(lm, "t", key=b"k4", start_ms=T0 + 50, end_ms=T0 + 250, limit=1000)
    assert found_at(got) == model.where(lambda k, m, ts: k == b"k4" and T0 + 50 <= ts <= T0 + 250)
    assert got


def test_retention_and_delete_records(open_log: Callable[..., LogManager], loop: LoopReactor) -> None:
    lm = open_log()
    lm.open_topic("t", config(partitions=1), create=True)
    model = Model()
    fill(lm, loop, model, 200)
    settle(lm, loop)
    p = lm.partition("t", 0)
    first = p.segments[:3]
    assert all(os.path.exists(s.key_path) for s in first)
    p.advance_start(p.segments[3].base_offset)
    assert p.apply_retention(T0) == 3
    assert not any(os.path.exists(s.key_path) or os.path.exists(s.log_path) for s in first)
    start = p.log_start_offset
    assert found_at(search(lm, "t", key=b"k1", limit=1000)) == model.where(lambda k, m, ts: k == b"k1" and True)[
        len([x for x in model.where(lambda k, m, ts: k == b"k1") if x[1] < start]):]
    # DeleteRecords inside a segment: records below the log start are not answered
    p.advance_start(start + 3)
    assert all(f.offset >= start + 3 for f in search(lm, "t", key=b"k1", limit=1000))
    settle(lm, loop)


def test_topic_deleted(open_log: Callable[..., LogManager], loop: LoopReactor) -> None:
    lm = open_log()
    lm.open_topic("t", config(), create=True)
    model = Model()
    fill(lm, loop, model, 50)
    assert search(lm, "t", key=b"k1")
    lm.delete_topic("t")
    with pytest.raises(UnknownTopic):
        search(lm, "t", key=b"k1")
    lm.open_topic("t", config(), create=True)  # a new topic of the same name knows nothing old
    assert search(lm, "t", key=b"k1") == []
    settle(lm, loop)


def test_broker_facade(tmp_path: Any) -> None:
    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop)
    b.start()
    try:
        b.topics.create_topic("orders", {"partitions": 2, "flush": "none"})
        loop.wait(b.admin.publish("orders", [Message(b"c-1", "ü".encode(), T0, [("bin", b"\xff")],
                                               Envelope(message_id="m-1"))]))
        loop.wait(b.admin.publish("orders", [Message(b"c-2", b"\xff\xfe", T0 + 1)]))
        [f] = b.admin.search_messages("orders", message_id="m-1")
        assert ExportedFoundMessage is FoundMessage
        assert f.to_json() == {
            "partition": f.partition, "offset": 0, "timestamp_ms": T0, "key": "c-1", "key_encoding": "string",
            "message_id": "m-1", "headers": [{"name": "bin", "value": "/w==", "encoding": "base64"}],
            "payload": "ü", "payload_encoding": "string", "size": 2,
        }
        [g] = b.admin.search_messages("orders", key=b"c-2")
        assert g.to_json()["payload"] == "//4=" and g.to_json()["payload_encoding"] == "base64"
        assert g.message_id is None and g.headers == ()
        with pytest.raises(UnknownTopic):
            b.admin.search_messages("nope", key=b"x")
        with pytest.raises(UnknownPartition):
            b.admin.search_messages("orders", key=b"x", partition=2)
        with pytest.raises(InvalidRequest):
            b.admin.search_messages("orders")
        with pytest.raises(InvalidRequest):
            b.admin.search_messages("orders", key=b"x", limit=0)
        with pytest.raises(InvalidRequest):
            b.admin.search_messages("orders", start_ms=5, end_ms=4)
    finally:
        b.stop()


def test_kafka_batches_compressed_or_not_are_decoded(open_log: Callable[..., LogManager], loop: LoopReactor) -> None:
    """Batches a Kafka producer sent (no records in memory to index from): decoded from
    the file, gzip included."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    lm = open_log()
    p = lm.open_topic("t", config(partitions=1, segment_bytes=1 << 20), create=True).partitions[0]
    for codec in (0, 1):
        b = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
        for i in range(300):
            b.append(i, T0 + i, b"kafka-%d" % (i % 10), b"v" * 50, [])
        loop.wait(p.append_raw(bytes(b.build())))
    assert p.appended is not None  # the partition gives hints, but these batches have none
    settle(lm, loop)
    got = search(lm, "t", key=b"kafka-3", limit=1000)
    assert [f.offset for f in got] == [o for o in range(600) if o % 300 % 10 == 3]


def test_a_slice_ends_inside_a_large_batch(open_log: Callable[..., LogManager], loop: LoopReactor) -> None:
    """One batch of many records is indexed over several passes of a tiny budget, resumed
    where each stopped: every record once."""
    lm = open_log(key_index=False)
    p = lm.open_topic("t", config(partitions=1, segment_bytes=1 << 24), create=True).partitions[0]
    n = 5 * keyindexer.CHUNK_RECORDS + 7
    loop.wait(p.append([Message(b"big-%d" % (i % 3), b"x", T0 + i, [], Envelope(message_id=f"b{i}")).to_record()
                        for i in range(n)]))
    assert len(p.segments) == 1
    passes = 0
    while lm.keys.work(0.0):
        passes += 1
    assert passes >= 5 and lm.keys.records_indexed == n
    assert [f.offset for f in search(lm, "t", key=b"big-1", limit=10_000)] == list(range(1, n, 3))
    assert [f.offset for f in search(lm, "t", message_id=f"b{n - 1}")] == [n - 1]


class NoTimers:
    """A reactor whose timers never fire: the background pass runs only when called."""

    class Call:
        def active(self) -> bool:
            return False

    def callLater(self, delay: float, f: Any, *args: Any) -> Any:
        return self.Call()

    def callFromThread(self, f: Any, *args: Any) -> None:
        f(*args)


def test_large_batches_indexed_from_the_appended_records(tmp_path: Any) -> None:
    """Batches the partition encoded are indexed from their records (not read back), a
    large one in slices that end inside it too."""
    lm = LogManager(tmp_path, NoTimers())
    p = lm.open_topic("t", config(partitions=1, segment_bytes=1 << 24), create=True).partitions[0]
    n = 3 * keyindexer.CHUNK_RECORDS + 5
    p.append([Message(b"h-%d" % (i % 4), b"x", T0 + i, [], Envelope(message_id=f"h{i}")).to_record()
              for i in range(n)])
    p.drain()
    p.append([Message(b"h-1", b"small", T0).to_record()])
    p.drain()
    passes = 0
    while lm.keys.work(0.0):
        passes += 1
    assert passes >= 3
    assert lm.keys.records_indexed == n + 1 and lm.keys.records_from_hints == n + 1
    assert [f.offset for f in search(lm, "t", key=b"h-1", limit=10_000)] == [*range(1, n, 4), n]
    assert [f.offset for f in search(lm, "t", message_id="h7")] == [7]
    lm.close()


def test_start_removes_a_key_index_beside_the_active_segment(open_log: Callable[..., LogManager],
                                                             loop: LoopReactor) -> None:
    """A `.keyindex` beside the active segment (left from when it was sealed, before a
    recovery removed the segments after it) is never used: recovery deletes it, and the
    active segment's records are found from the log."""
    lm = open_log()
    lm.open_topic("t", config(partitions=1), create=True)
    model = Model()
    fill(lm, loop, model, 60)
    p = lm.partition("t", 0)
    active = p.active
    lm.close()
    Path(active.key_path).write_bytes(K.encode([F.key_hash(b"k1") << 32], active.size))  # claims offset base+0
    lm2 = open_log()
    lm2.open_topic("t", config(partitions=1))
    assert not os.path.exists(active.key_path)
    assert found_at(search(lm2, "t", key=b"k1", limit=1000)) == model.where(lambda k, m, ts: k == b"k1")


def test_truncated_says_whether_more_matched_than_the_limit(open_log: Callable[..., LogManager],
                                                            loop: LoopReactor) -> None:
    lm = open_log()
    lm.open_topic("t", config(), create=True)
    model = Model()
    fill(lm, loop, model, 120)
    settle(lm, loop)
    k1 = model.where(lambda k, m, ts: k == b"k1")
    for limit in (1, len(k1) - 1, len(k1), len(k1) + 1):
        got = search(lm, "t", key=b"k1", limit=limit)
        assert found_at(got) == k1[:limit] and got.truncated is (limit < len(k1)), limit
    window = model.where(lambda k, m, ts: T0 + 10 <= ts <= T0 + 19)
    for limit in (3, 10, 11):
        got = search(lm, "t", start_ms=T0 + 10, end_ms=T0 + 19, limit=limit)
        assert found_at(got) == window[:limit] and got.truncated is (limit < 10), limit


def test_a_key_is_looked_up_in_each_of_its_forms(open_log: Callable[..., LogManager], loop: LoopReactor) -> None:
    """amq.topic's records: an MQTT publish is keyed by its topic, an AMQP one by its
    routing key; a search with the MQTT gateway's key forms finds both, in offset order."""
    from logbus.gateway.mqtt.topic_map import key_forms

    lm = open_log()
    lm.open_topic("amq.topic", config(partitions=1), create=True)
    p = lm.partition("amq.topic", 0)
    keys = [b"a/b", b"a.b", b"a/c", b"a.b", b"a/b"]
    for i, key in enumerate(keys):
        loop.wait(p.append([Message(key, b"%d" % i, T0 + i, [], Envelope()).to_record()]))
    settle(lm, loop)
    for asked in (b"a.b", b"a/b"):
        got = search(lm, "amq.topic", key=asked, key_forms=key_forms, limit=10)
        assert [f.offset for f in got] == [0, 1, 3, 4] and not got.truncated
        assert found_at(search(lm, "amq.topic", key=asked, key_forms=key_forms, limit=3)) == [(0, 0), (0, 1), (0, 3)]
        assert search(lm, "amq.topic", key=asked, key_forms=key_forms, limit=3).truncated
    assert [f.offset for f in search(lm, "amq.topic", key=b"a.b")] == [1, 3]  # no forms: the key alone
    assert key_forms(b"plain") == (b"plain",)
    assert key_forms("café/ü.x".encode()) == ("café/ü.x".encode(), "café.ü/x".encode())
