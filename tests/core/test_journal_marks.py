"""The queue journal's marks and start-up's redo (decision 0045; core tier: a real broker
and RocksDB on a temp dir). A confirm no longer waits for the state store's write-ahead
log: each turn's batch marks the partitions it appended to, and at start the records
past a mark are routed again from the log, into the queues that lack them. What a
power loss leaves is modelled here by writing the state store between two runs (a mark
set back, entries or timers deleted: the batches the loss took); the fault tier cuts
the write-ahead log of a killed server (tests/fault/test_journal_power_loss.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from logbus.core.log import Record, TopicConfig
from logbus.core.message import Envelope, Message
from logbus.core.state import (
    CF_QUEUES,
    CF_TIMERS,
    TIMER_PREFIX,
    StateStore,
    journal_mark_key,
    pack_uint64,
    queue_entries_prefix,
    unpack_uint64,
)
from logbus.core.state_pb2 import TimerRecord
from logbus.gateway.amqp.codec import Properties, Publish, encode_properties
from logbus.gateway.amqp.mapping import to_message
from tests.core.amqp_terms import AmqpTerms
from tests.core.brokers import Brokers


def files_synced(broker: Any) -> float:
    return broker.metrics.registry.get_sample_value("logbus_flush_files_total") or 0.0


def settle(brokers: Brokers) -> None:
    while brokers.loop.run_once():
        pass


def stored_mark(store: StateStore | None, topic: str, partition: int = 0) -> int | None:
    assert store is not None
    raw = store.get(CF_QUEUES, journal_mark_key(topic, partition))
    return None if raw is None else unpack_uint64(raw)


def amqp_message(exchange: str, routing_key: str, body: bytes, **headers: Any) -> Message:
    """As the AMQP gateway makes it: the envelope names the exchange and routing key."""
    props = Properties(delivery_mode=2, headers=headers or None)
    return to_message(Publish(1, exchange, routing_key, False, False, props, encode_properties(props), body))


def count(b: Any, queue: str) -> int:
    return int(b.vhost("/").service.queues[queue].queue.message_count)


def values(b: Any, queue: str) -> list[bytes]:
    got = b.vhost("/").service.take(queue, "me", 100, no_ack=True)
    return sorted(d.message.value for d in got)


def lose(path: Path, *, marks: dict[str, int], entries_of: tuple[str, ...] = (), timers: bool = False) -> None:
    """What a power loss takes: the later batches (marks set back, a queue's entries or
    every timer gone), written between two runs."""
    store = StateStore(path / "state")
    try:
        with store.batch(sync=True) as b:
            for topic, offset in marks.items():
                b.put(CF_QUEUES, journal_mark_key(topic, 0), pack_uint64(offset))
            for q in entries_of:
                b.delete_many(CF_QUEUES, [k for k, _ in store.scan_prefix(CF_QUEUES, queue_entries_prefix("/", q))])
            if timers:
                b.delete_many(CF_TIMERS, [k for k, _ in store.scan_prefix(CF_TIMERS, TIMER_PREFIX)])
    finally:
        store.close()


def setup(brokers: Brokers) -> tuple[Any, AmqpTerms]:
    b = brokers.start(topic_defaults=TopicConfig(flush="sync"))
    v = AmqpTerms(b.vhost("/"))
    v.declare_exchange("xd", "direct", durable=True)
    for q in ("q1", "q2"):
        v.declare_queue(q, durable=True)
        v.bind("xd", q, "k")
    return b, v


def three_published(brokers: Brokers) -> tuple[Any, AmqpTerms]:
    """``setup``, then m0..m2 published to "xd" and settled."""
    b, v = setup(brokers)
    for i in range(3):
        v.publish("xd", "k", amqp_message("xd", "k", b"m%d" % i))
    settle(brokers)
    return b, v


def test_a_confirm_syncs_the_records_only_and_the_turns_batch_marks_the_partition(tmp_path: Path) -> None:
    brokers = Brokers(tmp_path)
    b, v = setup(brokers)
    done: list[Any] = []
    v.publish("xd", "k", amqp_message("xd", "k", b"first"), on_durable=done.append)
    brokers.loop.run_until(lambda: len(done) == 1)
    assert stored_mark(b.state, "xd") == 1 and b.queue_store.first_marks == 1
    before = files_synced(b)
    v.publish("xd", "k", amqp_message("xd", "k", b"second"), on_durable=done.append)
    brokers.loop.run_until(lambda: len(done) == 2)
    assert files_synced(b) - before == 1  # the segment, not the write-ahead log
    # a later batch (the journal writes at most once per COMMIT_INTERVAL) carries the mark
    brokers.loop.run_until(lambda: stored_mark(b.state, "xd") == 2)
    assert b.queue_store.first_marks == 1 and files_synced(b) - before == 1

    v.unbind("xd", "q1", "k")
    v.unbind("xd", "q2", "k")
    v.publish("xd", "k", amqp_message("xd", "k", b"nowhere"), on_durable=done.append)  # routed to no queue
    brokers.loop.run_until(lambda: len(done) == 3)
    brokers.loop.run_until(lambda: stored_mark(b.state, "xd") == 3)

    b.topics.create_topic("plain", {"flush": "sync"})  # read by no queue: no mark
    d = b.append("plain", 0, [Record(None, b"x", None, [])])
    d.addBoth(done.append)
    brokers.loop.run_until(lambda: len(done) == 4)
    commits = b.queue_store.commits
    v.publish("xd", "k", amqp_message("xd", "k", b"after"), on_durable=done.append)
    brokers.loop.run_until(lambda: b.queue_store.commits > commits)  # a batch after the append
    assert stored_mark(b.state, "plain") is None
    brokers.stop()


def test_records_past_a_mark_are_routed_again_into_the_queues_that_lack_them_once(tmp_path: Path) -> None:
    brokers = Brokers(tmp_path)
    b, v = three_published(brokers)
    assert stored_mark(b.state, "xd") == 3
    brokers.stop()
    lose(tmp_path, marks={"xd": 0}, entries_of=("q2",))  # q1's batch survived, q2's did not
    b = brokers.start()
    assert (b.redone.records, b.redone.entries) == (3, 3)
    assert count(b, "q1") == count(b, "q2") == 3
    assert stored_mark(b.state, "xd") == 3
    b = brokers.restart()  # moved on: nothing redone again
    assert values(b, "q1") == values(b, "q2") == [b"m0", b"m1", b"m2"]
    brokers.stop()


def test_a_kill_leaves_the_marks_current_and_nothing_is_redone(tmp_path: Path) -> None:
    brokers = Brokers(tmp_path)
    b, v = three_published(brokers)
    got = b.vhost("/").service.take("q1", "me", 2, no_ack=True)  # settled: their entries deleted
    assert len(got) == 2
    settle(brokers)
    brokers.stop()
    b = brokers.start()
    assert b.redone.records == 0
    assert values(b, "q1") == [b"m2"] and count(b, "q2") == 3
    brokers.stop()


def test_a_clean_stop_marks_the_last_turns_appends(tmp_path: Path) -> None:
    brokers = Brokers(tmp_path)
    b, v = setup(brokers)
    v.publish("xd", "k", amqp_message("xd", "k", b"m0"))
    brokers.stop()  # in the publish's turn: the log's close drains it, with its mark
    b = brokers.start()
    assert b.redone.records == 0 and count(b, "q1") == 1
    brokers.stop()


def test_a_mark_past_the_logs_end_comes_back_to_it(tmp_path: Path) -> None:
    brokers = Brokers(tmp_path)
    b, v = setup(brokers)
    v.publish("xd", "k", amqp_message("xd", "k", b"m0"))
    settle(brokers)
    brokers.stop()
    lose(tmp_path, marks={"xd": 5})  # records 1..4 never reached the disk
    b = brokers.start()
    assert stored_mark(b.state, "xd") == 1
    v = AmqpTerms(b.vhost("/"))
    v.publish("xd", "k", amqp_message("xd", "k", b"m1"))  # offset 1 again: its entries are its own
    settle(brokers)
    brokers.stop()
    lose(tmp_path, marks={"xd": 1}, entries_of=("q1", "q2"))
    b = brokers.start()
    assert values(b, "q1") == [b"m1"]  # m0's entries were taken too, but it is below the mark
    brokers.stop()


def test_a_delayed_publish_gets_its_timer_again_from_its_timestamp(tmp_path: Path) -> None:
    brokers = Brokers(tmp_path)
    b, v = setup(brokers)
    v.declare_exchange("later", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
    v.bind("later", "q1", "k")
    m = amqp_message("later", "k", b"delayed", **{"x-delay": 600_000})
    v.publish("later", "k", m, headers={"x-delay": 600_000})
    settle(brokers)
    [(_, due, rec)] = b.timers.due(10**15)
    brokers.stop()
    lose(tmp_path, marks={"later": 0})  # the timer kept: its record is not routed again
    b = brokers.start()
    assert [(d, r.offset) for _, d, r in b.timers.due(10**15)] == [(due, 0)]
    brokers.stop()
    lose(tmp_path, marks={"later": 0}, timers=True)
    b = brokers.start()
    [(_, again, rec)] = b.timers.due(10**15)
    ts = b.log.partition("later", 0).read_records(0)[0].timestamp
    assert rec.kind == TimerRecord.DELAY and rec.exchange == "later" and rec.routing_key == "k"
    assert again == ts + 600_000  # (the record's clock: epoch ms, as the broker's outside tests)
    assert count(b, "q1") == 0
    brokers.stop()


def test_a_kafka_record_on_an_exchanges_topic_is_routed_again_by_its_key(tmp_path: Path) -> None:
    brokers = Brokers(tmp_path)
    b, v = setup(brokers)
    from logbus.core.log import batch as B

    data = bytes(B.build([Record(b"k", b"produced", None, [])], 0))
    b.streams.produce("xd", 0, data)
    settle(brokers)
    assert count(b, "q1") == 1
    brokers.stop()
    lose(tmp_path, marks={"xd": 0}, entries_of=("q1", "q2"))
    b = brokers.start()
    assert values(b, "q1") == values(b, "q2") == [b"produced"]
    brokers.stop()


def test_memtables_of_a_quiet_state_store_are_written_out(tmp_path: Path, monkeypatch: Any) -> None:
    import logbus.core.quiet as quiet

    monkeypatch.setattr(quiet, "MEMTABLE_BYTES", 0)
    brokers = Brokers(tmp_path)
    b = brokers.start()
    # the spell's clock is the test's: the broker's own check (once a second) cannot find it
    # quiet on a machine slow enough for a second to pass while publishing
    now = [1000.0]
    b.quiet.clock = lambda: now[0]
    v = AmqpTerms(b.vhost("/"))
    v.declare_queue("q", durable=True)
    for i in range(2000):
        v.publish("", "q", Message(None, b"m%d" % i, None, [], Envelope()))
    while brokers.loop.run_once():
        pass
    assert b.state is not None
    before = b.state.memtable_bytes()
    assert before > 100_000
    b.quiet.check()  # sees the journal's writes (or the broker's check saw them)
    assert b.state.memtable_bytes() >= before  # not quiet yet
    now[0] += b.quiet.quiet_seconds
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
    now = [1000.0]  # the spell's clock, moved here only (the broker's own checks see no time pass)
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


def test_a_publish_through_the_default_exchange_is_routed_again_to_its_queue(tmp_path: Path) -> None:
    from logbus.core.routing.log_topics import DEFAULT_EXCHANGE_TOPIC

    brokers = Brokers(tmp_path)
    b, v = setup(brokers)
    v.publish("", "q1", amqp_message("", "q1", b"direct to q1"))
    settle(brokers)
    assert stored_mark(b.state, DEFAULT_EXCHANGE_TOPIC) == 1  # (no bindings of its own: marked still)
    brokers.stop()
    lose(tmp_path, marks={DEFAULT_EXCHANGE_TOPIC: 0}, entries_of=("q1",))
    b = brokers.start()
    assert b.redone.records == 1
    assert values(b, "q1") == [b"direct to q1"] and count(b, "q2") == 0
    brokers.stop()
