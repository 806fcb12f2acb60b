"""Tiered storage on a temp dir against a real S3-compatible store (SeaweedFS): uploads,
the manifest as the source of truth, local and remote retention, a stopped store."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from logbus.core.errors import InvalidConfig
from logbus.core.log import LogManager, Record
from logbus.core.log.manifest import LOCAL_COPY_NAME, MANIFEST_NAME, Manifest, partition_prefix
from tests.core.conftest import topic_config
from tests.loop import LoopReactor
from tests.remote_store import RemoteStore

OpenLog = Callable[..., LogManager]
SEG = 4096  # segment.bytes: a few batches each


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteStore]:
    s = RemoteStore(tmp_path_factory.mktemp("s3"))
    s.start()
    yield s
    s.stop()


@pytest.fixture
def remote(store: RemoteStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """LogManager settings for a fresh prefix of the store, credentials in the environment."""
    for k, v in store.env.items():
        monkeypatch.setenv(k, v)
    return {"remote_storage": store.url(f"t-{uuid.uuid4().hex[:8]}"), "remote_storage_endpoint": store.endpoint}


@pytest.fixture
def own_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RemoteStore]:
    """A store of the test's own (to stop and start again), credentials in the environment."""
    (tmp_path / "own-s3").mkdir()
    s = RemoteStore(tmp_path / "own-s3")
    s.start()
    for k, v in s.env.items():
        monkeypatch.setenv(k, v)
    yield s
    s.stop()


def prefix_of(url: str) -> str:
    return url.split("/", 3)[3] + "/"


def fill(loop: LoopReactor, p: Any, n: int, size: int = 1000) -> None:
    for i in range(n):
        loop.wait(p.append([Record(b"k%d" % i, b"%06d" % i + b"v" * size)]))


def settle(loop: LoopReactor, lm: LogManager, done: Callable[[], bool], timeout: float = 60.0) -> None:
    """Housekeeping passes (and the loop between them) until ``done()``."""
    def step() -> bool:
        lm.housekeeping()
        loop.run_once(block=0.05)
        return done()
    loop.run_until(step, timeout)


def manifest_in(store: RemoteStore, url: str, topic: str = "t", partition: int = 0) -> Manifest:
    return Manifest.decode(store.read(prefix_of(url) + partition_prefix("", topic, partition) + MANIFEST_NAME))


def test_sealed_segments_go_up_and_local_copies_go_by_local_retention(
        open_log: OpenLog, loop: LoopReactor, store: RemoteStore, remote: dict[str, str]) -> None:
    lm = open_log(**remote)
    cfg = topic_config(segment_bytes=SEG, remote_storage_enable=True, local_retention_bytes=3 * SEG)
    p = lm.open_topic("t", cfg, create=True).partition(0)
    fill(loop, p, 60)
    sealed = [(s.base_offset, s.next_offset, s.size) for s in p.segments[:-1]]
    assert len(sealed) >= 10
    settle(loop, lm, lambda: p.remote is not None and p.remote.end_offset == sealed[-1][1]
           and len(p.segments) <= 4)
    m = manifest_in(store, remote["remote_storage"])
    assert [(s.base_offset, s.next_offset, s.size) for s in m.segments] == sealed
    # each segment's three objects, and nothing else but the manifest
    objects = store.objects(prefix_of(remote["remote_storage"]))
    names = {n for s in m.segments for n in s.names()}
    assert {k.rsplit("/", 1)[1] for k in objects} == names | {MANIFEST_NAME}
    assert all(objects[prefix_of(remote["remote_storage"]) + "t/0/" + s.name(".log")] == s.size for s in m.segments)
    # the log still starts at 0; the local copies past local.retention.bytes are gone
    assert p.log_start_offset == 0 and p.segments[0].base_offset > 0
    assert sum(s.size for s in p.segments[:-1]) <= 3 * SEG
    # a remote segment's bytes are the batches appended
    first = m.segments[0]
    data = store.read(prefix_of(remote["remote_storage"]) + "t/0/" + first.name(".log"))
    from logbus.core.log import batch as B
    assert [r.offset for r in B.decode(data)] == list(range(first.base_offset, first.next_offset))
    # the local copy of the manifest is the bucket's
    with open(os.path.join(p.directory, LOCAL_COPY_NAME), "rb") as f:
        assert Manifest.decode(f.read()) == m


def test_the_bucket_manifest_wins_at_reopen_and_cut_uploads_are_cleaned(
        open_log: OpenLog, loop: LoopReactor, store: RemoteStore, remote: dict[str, str]) -> None:
    lm = open_log(**remote)
    cfg = topic_config(segment_bytes=SEG, remote_storage_enable=True, local_retention_bytes=-1)
    p = lm.open_topic("t", cfg, create=True).partition(0)
    fill(loop, p, 20)
    settle(loop, lm, lambda: p.remote is not None and p.remote.end_offset == p.segments[-2].next_offset)
    lm.close()
    # an upload cut short by a kill: objects no manifest names
    base = prefix_of(remote["remote_storage"]) + "t/0/"
    store.client().put_object(Bucket="logbus-test", Key=base + "00000000000000000999-deadbeef0000.log", Body=b"x")
    # and a local copy older than the bucket's manifest
    copy = os.path.join(p.directory, LOCAL_COPY_NAME)
    m = manifest_in(store, remote["remote_storage"])
    older = Manifest(m.topic, m.partition, m.incarnation, m.version - 1, 0, m.segments[:-1])
    Path(copy).write_bytes(older.encode())
    lm2 = open_log(**remote)
    p2 = lm2.open_topic("t", cfg)
    q = p2.partition(0)
    assert q.remote is not None and q.remote.version == m.version - 1  # the copy, until the bucket answers
    tier = lm2.tiering.tiers[("t", 0)]  # type: ignore[union-attr]
    settle(loop, lm2, lambda: tier.ready)
    assert q.remote == m
    assert base + "00000000000000000999-deadbeef0000.log" not in store.objects(base)


def test_another_life_of_the_topic_is_left_alone(
        open_log: OpenLog, loop: LoopReactor, store: RemoteStore, remote: dict[str, str]) -> None:
    base = prefix_of(remote["remote_storage"]) + "t/0/"
    foreign = Manifest("t", 0, "someone-else", 3, 0)
    store.client().put_object(Bucket="logbus-test", Key=base + MANIFEST_NAME, Body=foreign.encode())
    lm = open_log(**remote)
    cfg = topic_config(segment_bytes=SEG, remote_storage_enable=True, local_retention_bytes=SEG)
    p = lm.open_topic("t", cfg, create=True).partition(0)
    fill(loop, p, 20)
    tier = lm.tiering.tiers[("t", 0)]  # type: ignore[union-attr]
    settle(loop, lm, lambda: tier.refused is not None)
    assert "someone-else" in tier.refused  # type: ignore[operator]
    lm.housekeeping()
    assert p.remote is None and p.segments[0].base_offset == 0  # nothing uploaded, nothing deleted
    assert manifest_in(store, remote["remote_storage"]) == foreign


def test_remote_retention_drops_segments_from_the_manifest_then_the_bucket(
        open_log: OpenLog, loop: LoopReactor, store: RemoteStore, remote: dict[str, str]) -> None:
    lm = open_log(**remote)
    cfg = topic_config(segment_bytes=SEG, remote_storage_enable=True, local_retention_bytes=2 * SEG,
                       retention_bytes=8 * SEG)
    p = lm.open_topic("t", cfg, create=True).partition(0)
    fill(loop, p, 80)
    settle(loop, lm, lambda: p.remote is not None and p.remote.end_offset == p.segments[-2].next_offset
           and p.remote.log_start_offset > 0)
    m = manifest_in(store, remote["remote_storage"])
    assert m.log_start_offset == m.segments[0].base_offset == p.log_start_offset > 0
    assert m.size + p.segments[-1].size <= 9 * SEG
    base = prefix_of(remote["remote_storage"]) + "t/0/"
    named = {base + n for s in m.segments for n in s.names()} | {base + MANIFEST_NAME}
    loop.run_until(lambda: set(store.objects(base)) == named, 30)


def test_a_stopped_store_keeps_everything_local_until_it_is_back(
        open_log: OpenLog, loop: LoopReactor, own_store: RemoteStore) -> None:
    lm = open_log(remote_storage=own_store.url("stopped"), remote_storage_endpoint=own_store.endpoint)
    cfg = topic_config(segment_bytes=SEG, remote_storage_enable=True, local_retention_bytes=SEG)
    p = lm.open_topic("t", cfg, create=True).partition(0)
    tier = lm.tiering.tiers[("t", 0)]  # type: ignore[union-attr]
    settle(loop, lm, lambda: tier.ready)
    own_store.stop()
    fill(loop, p, 40)
    sealed = len(p.segments) - 1
    settle(loop, lm, lambda: lm.tiering.failures >= 2)  # type: ignore[union-attr]
    lm.housekeeping()
    assert p.remote is None and len(p.segments) - 1 == sealed  # nothing deleted
    assert p.segments[0].base_offset == 0
    own_store.start()
    tier.retry_at = 0.0  # the backoff's wait is not what is tested
    settle(loop, lm, lambda: p.remote is not None and p.remote.end_offset == p.segments[-2].next_offset
           and len(p.segments) <= 2)
    assert p.log_start_offset == 0


def test_tiering_needs_the_brokers_remote_storage(open_log: OpenLog) -> None:
    lm = open_log()
    with pytest.raises(InvalidConfig, match="remote storage"):
        lm.open_topic("t", topic_config(remote_storage_enable=True), create=True)


@pytest.mark.parametrize("settings, message", [
    ({"local.retention.ms": "-3"}, "local.retention.ms must be -2"),
    ({"retention.ms": "1000", "local.retention.ms": "2000"}, "must not be more than retention.ms"),
    ({"retention.bytes": "1000", "local.retention.bytes": "-1"}, "must not be more than retention.bytes"),
    ({"remote.storage.enable": "yes"}, "true or false"),
])
def test_local_retention_settings_are_checked(settings: dict[str, Any], message: str) -> None:
    from logbus.core.log import TopicConfig
    with pytest.raises(InvalidConfig, match=message):
        TopicConfig.from_mapping(settings)


def test_reads_below_the_local_log_come_from_remote_segments(
        open_log: OpenLog, loop: LoopReactor, store: RemoteStore, remote: dict[str, str]) -> None:
    from logbus.core.log import batch as B
    lm = open_log(**remote)
    cfg = topic_config(segment_bytes=SEG, remote_storage_enable=True, local_retention_bytes=SEG)
    p = lm.open_topic("t", cfg, create=True).partition(0)
    fill(loop, p, 60)
    settle(loop, lm, lambda: p.remote is not None and p.remote.end_offset == p.segments[-2].next_offset
           and len(p.segments) <= 2)
    assert p.segments[0].base_offset > 20
    # a Fetch's read (no bytes) does not wait: nothing yet, then spans in the cache once woken
    woken: list[int] = []
    p.watch(lambda: woken.append(1))
    r = p.read(0, 1 << 20, data=False)
    assert (r.spans, r.next_offset) == ([], 0)
    loop.run_until(lambda: bool(woken))
    loop.run_until(lambda: bool(p.read(0, 1 << 20, data=False).spans))
    r = p.read(0, 1 << 20, data=False)
    assert r.first_offset == 0 and r.next_offset == p.remote.segments[0].next_offset  # type: ignore[union-attr]
    with open(r.spans[0].path, "rb") as f:
        f.seek(r.spans[0].position)
        got = f.read(r.spans[0].size)
    assert [x.offset for x in B.decode(got)] == list(range(r.first_offset, r.next_offset))
    # the broker's own readers get the bytes at once, every offset of the log
    offset, seen = 0, []
    while offset < p.next_offset:
        res = p.read(offset, 3000)
        recs = [x for x in B.decode(res.data) if x.offset >= offset]
        seen += [(x.offset, (x.value or b"")[:6]) for x in recs]
        offset = res.next_offset
    assert seen == [(i, b"%06d" % i) for i in range(60)]
    # a cold cache: the blocking path fetches what a batch needs
    reads = lm.remote_reads
    assert reads is not None
    loop.run_until(lambda: not reads.in_flight)
    reads.forget("t", 0)
    before = reads.blocking_reads
    mid = p.remote.segments[3].base_offset + 1  # type: ignore[union-attr]
    assert [x.offset for x in p.read_records(mid, 1)][:1] == [mid]
    assert reads.blocking_reads > before


def test_offsets_for_times_in_remote_segments(
        open_log: OpenLog, loop: LoopReactor, store: RemoteStore, remote: dict[str, str]) -> None:
    lm = open_log(**remote)
    cfg = topic_config(segment_bytes=SEG, remote_storage_enable=True, local_retention_bytes=SEG)
    p = lm.open_topic("t", cfg, create=True).partition(0)
    t0 = int(time.time() * 1000) - 60_000  # recent: retention.ms keeps them
    for i in range(60):
        loop.wait(p.append([Record(b"k", b"v" * 1000, t0 + 10 * i)]))
    settle(loop, lm, lambda: p.remote is not None and len(p.segments) <= 2
           and p.remote.end_offset == p.segments[-2].next_offset)
    assert p.segments[0].base_offset > 30
    assert p.offset_for_time(0) == (0, t0)
    assert p.offset_for_time(t0 + 10 * 17 - 5) == (17, t0 + 170)  # remote
    assert p.offset_for_time(t0 + 10 * 59) == (59, t0 + 590)  # local
    assert p.offset_for_time(t0 + 10_000) is None


def test_a_deleted_topic_leaves_nothing_in_the_bucket(
        open_log: OpenLog, loop: LoopReactor, store: RemoteStore, remote: dict[str, str]) -> None:
    lm = open_log(**remote)
    cfg = topic_config(segment_bytes=SEG, remote_storage_enable=True, local_retention_bytes=SEG)
    p = lm.open_topic("t", cfg, create=True).partition(0)
    fill(loop, p, 20)
    settle(loop, lm, lambda: p.remote is not None and p.remote.end_offset == p.segments[-2].next_offset)
    base = prefix_of(remote["remote_storage"])
    assert store.objects(base)
    lm.delete_topic("t")
    loop.run_until(lambda: not store.objects(base), 30)
    # the same name again starts a new life, with nothing remote
    q = lm.open_topic("t", cfg, create=True).partition(0)
    assert q.remote is None and q.log_start_offset == 0


def test_the_read_cache_stays_within_its_limit(
        open_log: OpenLog, loop: LoopReactor, store: RemoteStore, remote: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from logbus.core.log import remote_read
    monkeypatch.setattr(remote_read, "CHUNK", 1024)
    monkeypatch.setattr(remote_read, "MIN_IDLE_S", 0.0)
    lm = open_log(remote_cache_bytes=3 * SEG, **remote)
    cfg = topic_config(segment_bytes=SEG, remote_storage_enable=True, local_retention_bytes=SEG)
    p = lm.open_topic("t", cfg, create=True).partition(0)
    fill(loop, p, 60)
    settle(loop, lm, lambda: p.remote is not None and len(p.segments) <= 2
           and p.remote.end_offset == p.segments[-2].next_offset)
    reads = lm.remote_reads
    assert reads is not None
    offset = 0
    while offset < p.segments[0].base_offset:
        offset = p.read(offset, 3000).next_offset
        loop.run_until(lambda: not reads.in_flight)
        assert reads.cached_bytes <= 3 * SEG + SEG  # the limit, and one segment being read
    assert p.remote is not None and reads.fetched_bytes >= p.remote.size - SEG
    cache = os.path.join(lm.root, remote_read.CACHE_DIR)
    on_disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(cache) for f in fs)
    assert on_disk <= 4 * SEG


def test_a_stopped_store_makes_remote_messages_wait_never_gone(
        open_log: OpenLog, loop: LoopReactor, own_store: RemoteStore) -> None:
    from logbus.core.errors import RemoteUnavailable
    from logbus.core.message import Message
    from logbus.core.queues.msgstore import MessageStore, log_batch_reader

    lm = open_log(remote_storage=own_store.url("wait"), remote_storage_endpoint=own_store.endpoint)
    cfg = topic_config(segment_bytes=SEG, remote_storage_enable=True, local_retention_bytes=SEG)
    p = lm.open_topic("t", cfg, create=True).partition(0)
    for i in range(40):
        loop.wait(p.append([Message(b"k", b"%06d" % i + b"v" * 1000).to_record()]))
    settle(loop, lm, lambda: p.remote is not None and len(p.segments) <= 2
           and p.remote.end_offset == p.segments[-2].next_offset)
    reads = lm.remote_reads
    assert reads is not None
    own_store.stop()
    messages = MessageStore(log_batch_reader(lm), remote=lm.remote_pending)
    with pytest.raises(RemoteUnavailable):
        messages.get("t", 0, 3)
    tried = reads.blocking_reads
    with pytest.raises(RemoteUnavailable, match="out of reach"):  # at once: no wait on the store
        messages.get("t", 0, 4)
    assert reads.blocking_reads == tried
    assert messages.pending("t", 0, 5) is not None  # a push delivery waits for it
    own_store.start()
    got: list[Message] = []

    def read_again() -> bool:
        reads._retry_at = 0.0  # the backoff's wait is not what is tested
        try:
            got.append(messages.get("t", 0, 3))
        except RemoteUnavailable:  # a store just started may still answer 500 for a moment
            return False
        return True
    loop.run_until(read_again, 30)
    assert (got[0].value or b"")[:6] == b"000003"
