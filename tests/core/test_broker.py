"""The broker facade on a temp dir: topic admin through the state store and the log."""

from __future__ import annotations

from typing import Any

import pytest

from logbus.core.broker import Broker
from logbus.core.errors import InvalidConfig, UnknownTopic
from tests.loop import LoopReactor


def test_grow_topic_is_recorded_and_survives_restart(tmp_path: Any) -> None:
    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop)
    b.start()
    b.create_topic("t", {"partitions": 2, "flush": "none"})
    assert len(b.grow_topic("t", 5).partitions) == 5
    with pytest.raises(InvalidConfig):
        b.grow_topic("t", 3)
    with pytest.raises(UnknownTopic):
        b.grow_topic("nope", 3)
    b.stop()
    b2 = Broker(tmp_path, reactor=loop)
    b2.start()
    info = b2.describe_topic("t")
    assert len(info.partitions) == 5 and info.config["flush"] == "none"
    b2.stop()


def test_retention_keeps_what_a_queue_points_into(tmp_path: Any) -> None:
    """Retention may delete old segments of an exchange's topic, but never one holding a
    message a queue has not settled: after a restart that message is still delivered."""
    from logbus.core.message import Envelope, Message

    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop)
    b.start()
    b.create_topic("__amqp_default", {"segment.bytes": 1024, "retention.ms": 1000, "flush": "none"})
    v = b.vhosts["/"]
    v.declare_queue("q", durable=True)
    for i in range(60):
        v.publish("", "q", Message(b"q", b"m%02d" % i + b"." * 80, None, [],
                                   Envelope(protocol=Envelope.AMQP, exchange="", routing_key="q")))
        while loop.run_once():
            pass
    p = b.log.partition("__amqp_default", 0)
    assert len(p.segments) > 4
    later = 10**13  # every segment is past retention.ms
    assert b.housekeeping(later) == 0  # the queue points into the first segment
    taken = [v.get("q", "me", no_ack=False) for _ in range(60)]
    for d in taken:
        if d is not None and d.entry.offset != 30:
            v.ack("q", d.entry.seq)
    assert b.housekeeping(later) > 0
    assert p.log_start_offset <= 30
    assert b.housekeeping(later) == 0  # still guarded
    b.stop()
    while loop.run_once():
        pass
    b = Broker(tmp_path, reactor=loop)
    b.start()
    d = b.vhosts["/"].get("q", "me", no_ack=True)
    assert d is not None and d.message.value.startswith(b"m30") and d.entry.redelivered
    assert b.vhosts["/"].get("q", "me", no_ack=True) is None
    b.stop()


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

    b = Broker(tmp_path, reactor=loop)
    b.start()
    try:
        assert "telemetry" not in b.log.topics
        with pytest.raises(TopicExists, match=str(tdir)):
            b.create_topic("telemetry", {"partitions": 1, "flush": "none"})
        assert _tree(tdir) == before
        with pytest.raises(UnknownTopic):
            b.describe_topic("telemetry")
        # the broker's own delete leaves nothing behind: the name can be used again
        b.create_topic("orders", {"flush": "none"})
        b.append("orders", 0, [Record(b"k", b"v", 1000)])
        b.delete_topic("orders")
        assert len(b.create_topic("orders", {"flush": "none", "partitions": 3}).partitions) == 3
    finally:
        b.stop()
    b2 = Broker(tmp_path, reactor=loop)
    b2.start()
    assert "telemetry" not in b2.log.topics and _tree(tdir) == before
    b2.stop()
