"""A confirm covers the queue entries its publish made, against a power loss too: the
sync that makes a turn's appends durable also syncs the state store's write-ahead log
when the queue journal wrote since the last sync (core tier: a real broker and RocksDB
on a temp dir; what the flusher synced is read from its own count of files)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from logbus.core.log import Record, TopicConfig
from logbus.core.message import Envelope, Message
from logbus.core.state import CF_QUEUES
from tests.core.amqp_terms import AmqpTerms
from tests.core.brokers import Brokers


def files_synced(broker: Any) -> float:
    return broker.metrics.registry.get_sample_value("logbus_flush_files_total") or 0.0


def settle(brokers: Brokers, done: list[Any], n: int) -> None:
    brokers.loop.run_until(lambda: len(done) == n)


def test_a_publish_that_made_queue_entries_syncs_the_write_ahead_log_with_its_record(tmp_path: Path) -> None:
    brokers = Brokers(tmp_path)
    b = brokers.start(topic_defaults=TopicConfig(flush="sync"))
    v = AmqpTerms(b.vhost("/"))
    v.declare_queue("q", durable=True)
    done: list[Any] = []
    v.publish("", "q", Message(None, b"warm", None, [], Envelope()), on_durable=done.append)
    settle(brokers, done, 1)

    before = files_synced(b)
    v.publish("", "q", Message(None, b"one", None, [], Envelope()), on_durable=done.append)
    settle(brokers, done, 2)
    assert files_synced(b) - before == 2  # the segment and the write-ahead log

    b.create_topic("plain", {"flush": "sync"})  # read by no queue: no journal write
    before = files_synced(b)
    d = b.append("plain", 0, [Record(None, b"x", None, [])])
    got: list[Any] = []
    d.addBoth(got.append)
    settle(brokers, got, 1)
    assert files_synced(b) - before == 1


def test_the_write_ahead_log_followed_when_rocksdb_starts_a_new_one(tmp_path: Path) -> None:
    brokers = Brokers(tmp_path)
    b = brokers.start(topic_defaults=TopicConfig(flush="sync"))
    store = b.state
    assert store is not None
    store.put(CF_QUEUES, b"k", b"v")
    first = store.wal_fd()
    assert first >= 0
    wal = os.readlink(f"/proc/self/fd/{first}")
    assert wal.endswith(".log") and Path(wal).parent == tmp_path / "state"
    store._cfs[CF_QUEUES].flush()  # its memtable to an SST file: RocksDB starts a new log
    store.put(CF_QUEUES, b"k2", b"v")
    second = store.wal_fd()
    assert second != first and os.readlink(f"/proc/self/fd/{second}") != wal
    assert first in store.retired_wal
    # the journal closes a retired descriptor once no sync holds it
    v = AmqpTerms(b.vhost("/"))
    v.declare_queue("q", durable=True)
    done: list[Any] = []
    v.publish("", "q", Message(None, b"x", None, [], Envelope()), on_durable=done.append)
    settle(brokers, done, 1)
    b.queue_store._retired.clear()
    b.queue_store._close_retired()
    assert store.retired_wal == []
    brokers.stop()


def test_memtables_of_a_quiet_state_store_are_written_out(tmp_path: Path, monkeypatch: Any) -> None:
    import logbus.core.quiet as quiet

    monkeypatch.setattr(quiet, "MEMTABLE_BYTES", 0)
    brokers = Brokers(tmp_path)
    b = brokers.start()
    b.quiet.quiet_seconds = 0.0
    v = AmqpTerms(b.vhost("/"))
    v.declare_queue("q", durable=True)
    for i in range(2000):
        v.publish("", "q", Message(None, b"m%d" % i, None, [], Envelope()))
    while brokers.loop.run_once():
        pass
    assert b.state is not None
    before = b.state.memtable_bytes()
    assert before > 100_000
    b.quiet.check()  # sees the journal's writes
    assert b.state.memtable_bytes() >= before  # not quiet yet
    b.quiet.check()  # nothing written since: quiet, flushed
    brokers.loop.run_until(lambda: b.state.memtable_bytes() < before // 4)  # type: ignore[union-attr]
    assert b.vhost("/").service.queues["q"].queue.message_count == 2000
    brokers.restart()
    assert brokers.current is not None
    assert brokers.current.vhost("/").service.queues["q"].queue.message_count == 2000


def test_messages_flowing_through_a_transient_queue_keep_the_broker_from_quiet(tmp_path: Path) -> None:
    """Publishes into a queue that journals nothing (not durable; an MQTT clean session)
    are work too: a quiet pass in the middle of them (it runs a full collection, 13 ms
    seen at 1,000 MQTT messages a second) stalled every message behind it."""
    brokers = Brokers(tmp_path)
    b = brokers.start()
    now = [0.0]  # the spell's clock, moved here only (the broker's own checks see no time pass)
    b.quiet.clock = lambda: now[0]
    b.quiet.quiet_seconds = 10.0
    v = AmqpTerms(b.vhost("/"))
    v.declare_queue("t", durable=False)
    b.quiet.check()
    for round_ in range(3):
        v.publish("", "t", Message(None, b"m%d" % round_, None, [], Envelope()))
        while brokers.loop.run_once():
            pass
        now[0] += 10.0
        b.quiet.check()
        assert b.quiet.spells == 0, f"a quiet pass while messages flow (round {round_})"
    now[0] += 10.0
    b.quiet.check()  # nothing since: now it is quiet
    assert b.quiet.spells == 1
    assert b.vhost("/").service.queues["t"].queue.message_count == 3
