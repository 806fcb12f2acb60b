"""The broker facade on a temp dir: topic admin through the state store and the log."""

from __future__ import annotations


from typing import Any

import pytest

from logbus.gateway.amqp.model.forms import AMQP_FORMS
from logbus.core.broker import Broker
from logbus.core.errors import InvalidConfig, UnknownTopic
from logbus.core.log import Record
from tests.loop import LoopReactor


def test_grow_topic_is_recorded_and_survives_restart(tmp_path: Any) -> None:
    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b.start()
    b.topics.create_topic("t", {"partitions": 2, "flush": "none"})
    assert len(b.topics.grow_topic("t", 5).partitions) == 5
    with pytest.raises(InvalidConfig):
        b.topics.grow_topic("t", 3)
    with pytest.raises(UnknownTopic):
        b.topics.grow_topic("nope", 3)
    b.stop()
    b2 = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b2.start()
    info = b2.topics.describe_topic("t")
    assert len(info.partitions) == 5 and info.config["flush"] == "none"
    b2.stop()


def test_retention_keeps_what_a_queue_points_into(tmp_path: Any) -> None:
    """Retention may delete old segments of an exchange's topic, but never one holding a
    message a queue has not settled: after a restart that message is still delivered.
    (Queue pins count blocks of 64 offsets: retention keeps from the start of the block.)"""
    from logbus.core.message import Envelope, Message

    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b.start()
    b.topics.create_topic("__amqp_default", {"segment.bytes": 1024, "retention.ms": 1000, "flush": "none"})
    v = b.vhosts["/"]
    v.declare_queue("q", durable=True)
    for i in range(200):
        v.publish("", "q", Message(b"q", b"m%02d" % i + b"." * 80, None, [],
                                   Envelope(protocol=Envelope.AMQP, exchange="", routing_key="q")))
        while loop.run_once():
            pass
    p = b.log.partition("__amqp_default", 0)
    assert len(p.segments) > 4
    later = 10**13  # every segment is past retention.ms
    assert b.housekeeping(later) == 0  # the queue points into the first segment
    taken = [v.get("q", "me", no_ack=False) for _ in range(200)]
    for d in taken:
        if d is not None and d.entry.offset != 130:
            v.ack(d)
    assert b.housekeeping(later) > 0
    assert 64 < p.log_start_offset <= 128 < 130  # kept from the block of 130
    assert b.housekeeping(later) == 0  # still guarded
    b.stop()
    while loop.run_once():
        pass
    b = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b.start()
    d = b.vhosts["/"].get("q", "me", no_ack=True)
    assert d is not None and d.message.value.startswith(b"m130") and d.entry.redelivered
    assert b.vhosts["/"].get("q", "me", no_ack=True) is None
    b.stop()


def _fill(b: Broker, loop: LoopReactor, topic: str, n: int) -> None:
    for i in range(n):
        b.append(topic, 0, [Record(b"k", b"v%03d" % i + b"." * 100)])
        while loop.run_once():
            pass


def test_delete_records_moves_the_start_and_retention_drops_whole_segments(tmp_path: Any) -> None:
    from logbus.core.errors import OffsetOutOfRange, UnknownPartition

    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b.start()
    b.topics.create_topic("t", {"segment.bytes": 1024, "flush": "none", "partitions": 2})
    _fill(b, loop, "t", 40)
    p = b.log.partition("t", 0)
    segments = len(p.segments)
    assert segments > 3
    middle = p.segments[2].base_offset + 1  # inside the third segment
    results = b.topics.delete_records("t", {0: middle, 1: 5, 7: 1})
    assert results[0] == middle and p.log_start_offset == middle
    assert isinstance(results[1], OffsetOutOfRange)  # partition 1 is empty: 5 > its high watermark
    assert isinstance(results[7], UnknownPartition)
    assert b.topics.delete_records("t", {0: 1}) == {0: middle}  # never back
    with pytest.raises(OffsetOutOfRange):
        p.read(middle - 1, 1 << 20)
    assert p.read(middle - 1, 1, deleted=True).spans  # still on disk: a queue's pointer reads it
    assert p.read_records(middle)[0].offset == middle
    assert b.housekeeping() == 2  # the two segments wholly below the start
    assert len(p.segments) == segments - 2 and p.log_start_offset == middle
    b.stop()

    b2 = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b2.start()
    p2 = b2.log.partition("t", 0)
    assert p2.log_start_offset == middle and b2.topics.describe_topic("t").partitions[0].log_start_offset == middle
    assert b2.topics.delete_records("t", {0: -1}) == {0: 40}  # -1: the high watermark
    b2.stop()
    b3 = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b3.start()
    assert b3.log.partition("t", 0).log_start_offset == 40
    b3.stop()


def test_alter_topic_is_recorded_applied_live_and_survives_restart(tmp_path: Any) -> None:
    from logbus.core.errors import RecordTooLarge

    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b.start()
    b.topics.create_topic("t", {"flush": "none", "retention.ms": 60000})
    _fill(b, loop, "t", 3)
    p = b.log.partition("t", 0)
    assert p.high_watermark == 3
    info = b.topics.alter_topic("t", {"flush": "sync", "max.message.bytes": 100, "retention.ms": None})
    assert info.config["flush"] == "sync" and info.config["retention.ms"] == b.topics.topic_defaults.retention_ms
    assert p.high_watermark == 3  # records readable under "none" stay readable under "sync"
    assert p.config.max_message_bytes == 100
    d = b.append("t", 0, [Record(b"k", b"x" * 500)])
    failures: list[Any] = []
    d.addErrback(failures.append)
    while loop.run_once():
        pass
    assert failures and failures[0].check(RecordTooLarge)
    with pytest.raises(InvalidConfig):
        b.topics.alter_topic("t", {"partitions": 3})
    with pytest.raises(InvalidConfig):
        b.topics.alter_topic("t", {"retention.ms": "soon"})
    with pytest.raises(InvalidConfig):
        b.topics.alter_topic("t", {"no.such": None})
    with pytest.raises(UnknownTopic):
        b.topics.alter_topic("nope", {"flush": "none"})
    assert b.topics.alter_topic("t", {"segment.ms": 5000}, validate_only=True).config["segment.ms"] == 5000
    assert p.config.segment_ms != 5000
    b.stop()
    b2 = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b2.start()
    config = b2.topics.describe_topic("t").config
    assert config["flush"] == "sync" and config["max.message.bytes"] == 100
    assert b2.log.partition("t", 0).config.max_message_bytes == 100

def _tree(directory: Any) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_creating_a_topic_never_deletes_files_it_did_not_create(tmp_path: Any) -> None:
    """A topic directory that already holds files (another process wrote it) makes the
    create fail, naming the directory; the files stay as they were, the topic unknown."""
    from logbus.core.errors import TopicExists
    from logbus.core.log import LogManager, Record, TopicConfig

    loop = LoopReactor()
    other = LogManager(tmp_path, loop)  # a writer that is not the broker, and no state record
    other.open_topic("telemetry", TopicConfig(partitions=2, flush="none"), create=True)
    loop.wait(other.partition("telemetry", 1).append([Record(b"d-1", b"21.5", 1000)] * 5))
    other.close()
    tdir = tmp_path / "log" / "telemetry"
    before = _tree(tdir)
    assert any(before.values())

    b = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b.start()
    try:
        assert "telemetry" not in b.log.topics
        with pytest.raises(TopicExists, match=str(tdir)):
            b.topics.create_topic("telemetry", {"partitions": 1, "flush": "none"})
        assert _tree(tdir) == before
        with pytest.raises(UnknownTopic):
            b.topics.describe_topic("telemetry")
        # the broker's own delete leaves nothing behind: the name can be used again
        b.topics.create_topic("orders", {"flush": "none"})
        b.append("orders", 0, [Record(b"k", b"v", 1000)])
        b.topics.delete_topic("orders")
        assert len(b.topics.create_topic("orders", {"flush": "none", "partitions": 3}).partitions) == 3
    finally:
        b.stop()
    b2 = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b2.start()
    assert "telemetry" not in b2.log.topics and _tree(tdir) == before
    b2.stop()


def test_retention_keeps_what_a_delayed_message_points_into(tmp_path: Any) -> None:
    """A message waiting for its deliver-at time holds its segment against retention, and
    reaches the pop group reading its topic when due, after a restart too."""
    from logbus.core.message import Message

    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b.start()
    b.topics.create_topic("t", {"segment.bytes": 1024, "retention.ms": 1000, "flush": "none"})
    assert b.pop_service.receive("g", "t", "m", 1, 1000) == []
    now = int(loop.seconds() * 1000)
    later = Message(None, b"later")
    later.envelope.deliver_at_ms = now + 3_600_000  # due in an hour of the loop's clock
    b.admin.publish("t", [later])
    for i in range(40):
        b.admin.publish("t", [Message(None, b"m%02d" % i + b"." * 80)])
        while loop.run_once():  # a batch per tick: the segments roll
            pass
    received: list[Any] = []
    while len(received) < 40:  # a receive stops early once it has spent its time budget
        got_now = b.pop_service.receive("g", "t", "m", 100, 1000)
        assert got_now, f"{len(received)} of 40 received"
        received += got_now
    assert [p.message.value[:3] for p in received][:1] == [b"m00"]
    p = b.log.partition("t", 0)
    assert len(p.segments) > 2
    assert b.housekeeping(10**13) == 0  # the delayed message holds the first segment
    b.stop()
    while loop.run_once():
        pass
    b = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b.start()
    assert b.pop_service.receive("g", "t", "m", 10, 1000) == []  # not due yet
    loop.advance(3600)
    got: list[Any] = []
    loop.run_until(lambda: bool(got.extend(b.pop_service.receive("g", "t", "m", 10, 1000)) or got))
    assert [m.message.value for m in got] == [b"later"] and got[0].offset == 0
    b.stop()


def test_the_pin_follows_entries_and_timers_as_they_come_and_go(tmp_path: Any) -> None:
    """``Broker.pinned_from`` (what retention keeps, issue 30) is the lowest offset a queue
    entry of any vhost or pop group or a pending timer points at (the start of its block
    of offsets): right after entries are added and settled, and after a restart, with no
    scan at housekeeping."""
    from logbus.core.message import Envelope, Message
    from logbus.core.queues.pins import QUEUE_SHIFT
    from logbus.core.queues.timers import PIN_SHIFT

    def block(offset: int) -> int:
        return (offset >> QUEUE_SHIFT) << QUEUE_SHIFT

    loop = LoopReactor()

    def run() -> None:
        while loop.run_once():
            pass

    b = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b.start()
    b.topics.create_topic("__amqp_default", {"flush": "none"})
    b.topics.create_topic("t", {"flush": "none"})
    v = b.vhosts["/"]
    v.declare_queue("q", durable=True)
    assert b.pinned_from("__amqp_default", 0) is None and b.pinned_from("t", 0) is None
    n = block(100) + 3  # the last 3 in a block of their own
    for i in range(n):
        v.publish("", "q", Message(b"q", b"m%d" % i, None, [],
                                   Envelope(protocol=Envelope.AMQP, exchange="", routing_key="q")))
    run()
    assert b.pinned_from("__amqp_default", 0) == 0
    taken = [v.get("q", "me", no_ack=False) for _ in range(n - 3)]
    assert all(taken)
    for d in taken[1:]:
        assert d is not None
        v.ack(d)
    assert b.pinned_from("__amqp_default", 0) == 0  # offset 0 is still unsettled
    assert taken[0] is not None
    v.ack(taken[0])
    assert b.pinned_from("__amqp_default", 0) == n - 3 == block(n - 1)  # settled below n - 3
    # a pop group on t: its entries pin t, and so does a delayed message's timer
    assert b.pop_service.receive("g", "t", "m", 1, 1000) == []
    later = Message(None, b"later")
    later.envelope.deliver_at_ms = int(loop.seconds() * 1000) + 3_600_000
    b.admin.publish("t", [Message(None, b"a"), Message(None, b"b")], partition=0)
    b.admin.publish("t", [later], partition=0)  # offset 2, an hour from now
    run()
    assert b.pinned_from("t", 0) == 0
    while got := b.pop_service.receive("g", "t", "m", 10, 60_000):  # in more than one past its time budget
        for p in got:
            b.pop_service.ack("g", "t", p.handle)
    # only the timer is left: pinned from its block of offsets
    assert b.pinned_from("t", 0) == (2 >> PIN_SHIFT) << PIN_SHIFT
    b.stop()
    run()
    b = Broker(tmp_path, reactor=loop, forms=AMQP_FORMS)
    b.start()
    assert b.pinned_from("__amqp_default", 0) == n - 3  # the last 3 entries came back
    assert b.pinned_from("t", 0) == (2 >> PIN_SHIFT) << PIN_SHIFT  # the timer's, counted from the index
    v = b.vhosts["/"]
    for _ in range(3):
        d = v.get("q", "me", no_ack=True)
        assert d is not None
    assert b.pinned_from("__amqp_default", 0) is None
    v.declare_queue("gone", durable=True)
    v.publish("", "gone", Message(b"gone", b"x", None, [],
                                  Envelope(protocol=Envelope.AMQP, exchange="", routing_key="gone")))
    run()
    assert b.pinned_from("__amqp_default", 0) == block(n)
    v.delete_queue("gone")
    assert b.pinned_from("__amqp_default", 0) is None  # a deleted queue pins nothing
    # a topic deleted with force: its timers, entries and leases pin nothing any more
    b.admin.publish("t", [Message(None, b"c")], partition=0)
    run()
    [leased] = b.pop_service.receive("g", "t", "m", 10, 60_000)
    assert b.pinned_from("t", 0) == 0
    b.topics.delete_topic("t", force=True)
    assert b.pinned_from("t", 0) is None
    b.stop()
    run()
