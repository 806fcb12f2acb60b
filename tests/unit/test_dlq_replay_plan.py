"""The pure part of dead-letter replay (core/queues/replay.py): which DLQ records a replay
publishes, which it skips, and the cursor it leaves, with and without a topic filter and
a limit; the cursor's round trip through a committed offset's metadata."""

from __future__ import annotations

import pytest

from logbus.core.errors import InvalidRequest
from logbus.core.message import Message
from logbus.core.queues.replay import MAX_REPLAY, Cursor, Plan, check_limit, plan, replayed_message
from logbus.core.streams.group_model import OffsetAndMetadata

TOPICS = {"orders": 3, "refunds": 1}


def dead(topic: str, value: str, partition: int = 0) -> Message:
    m = Message(b"k", value.encode(), 1234, [("h", b"x")])
    m.envelope.delivery_count = 16
    m.envelope.deliver_at_ms = 99
    dl = m.envelope.dead_letter
    dl.topic, dl.partition, dl.offset, dl.reason, dl.delivery_count = topic, partition, 7, "delivery_limit", 16
    return m


# the DLQ: offsets 0..5
DLQ: list[tuple[int, Message | None]] = [
    (0, dead("orders", "o0", 2)),
    (1, dead("refunds", "r1")),
    (2, dead("orders", "o2")),
    (3, dead("gone", "g3")),
    (4, None),
    (5, dead("refunds", "r5", 4)),
]


def run(cursor: Cursor, topic: str | None = None, limit: int = MAX_REPLAY, end: int = 6) -> Plan:
    return plan(DLQ, cursor, end, topic=topic, limit=limit, partitions=TOPICS.get)


def test_a_full_replay_publishes_every_dead_letter_once_and_skips_what_it_cannot() -> None:
    p = run(Cursor())
    assert [(r.dlq_offset, r.topic, r.partition) for r in p.replays] == [
        (0, "orders", 2), (1, "refunds", 0), (2, "orders", 0), (5, "refunds", None)]  # refunds has no partition 4
    assert [o for o, _ in p.skipped] == [3, 4]
    assert "'gone' does not exist" in p.skipped[0][1] and "readable" in p.skipped[1][1]
    assert p.cursor == Cursor(6) and not p.more
    again = run(p.cursor)
    assert again.replays == [] and again.skipped == [] and again.cursor == Cursor(6)


def test_the_replayed_message_is_new() -> None:
    original = DLQ[0][1]
    assert original is not None
    m = replayed_message(original)
    assert (m.key, m.value, m.headers, m.timestamp) == (b"k", b"o0", [("h", b"x")], None)
    assert not m.envelope.HasField("dead_letter")
    assert m.envelope.delivery_count == 0 and m.envelope.deliver_at_ms == 0
    assert original.envelope.dead_letter.topic == "orders"  # the DLQ record's message is untouched


def test_a_limit_stops_the_cursor_at_the_first_record_left() -> None:
    p = run(Cursor(), limit=2)
    assert [r.dlq_offset for r in p.replays] == [0, 1]
    assert p.cursor == Cursor(2) and p.more
    rest = run(p.cursor, limit=2)
    assert [r.dlq_offset for r in rest.replays] == [2, 5] and [o for o, _ in rest.skipped] == [3, 4]
    assert rest.cursor == Cursor(6) and not rest.more


def test_a_topic_replay_leaves_the_others_and_keeps_its_own_cursor() -> None:
    p = run(Cursor(), topic="refunds")
    assert [r.dlq_offset for r in p.replays] == [1, 5]
    assert p.cursor == Cursor(0, {"refunds": 6})  # orders at 0 is still to do
    assert run(p.cursor, topic="refunds").replays == []
    orders = run(p.cursor, topic="orders")
    assert [r.dlq_offset for r in orders.replays] == [0, 2]
    assert orders.cursor == Cursor(3, {"refunds": 6, "orders": 6})  # 3 (gone) is left for a full replay
    full = run(orders.cursor)
    assert full.replays == [] and [o for o, _ in full.skipped] == [3, 4]
    assert full.cursor == Cursor(6)  # entries at or below the offset are dropped


def test_a_topic_replay_with_a_limit() -> None:
    p = run(Cursor(), topic="orders", limit=1)
    assert [r.dlq_offset for r in p.replays] == [0]
    assert p.cursor == Cursor(1, {"orders": 2}) and p.more
    nxt = run(p.cursor, topic="orders", limit=1)
    assert [r.dlq_offset for r in nxt.replays] == [2] and nxt.cursor == Cursor(1, {"orders": 6})


def test_records_appended_later_are_replayed_by_the_next_replay() -> None:
    p = run(Cursor(), end=2)
    assert [r.dlq_offset for r in p.replays] == [0, 1] and p.cursor == Cursor(2)
    assert [r.dlq_offset for r in run(p.cursor).replays] == [2, 5]


def test_the_cursor_round_trips_through_a_commit() -> None:
    c = Cursor(3, {"refunds": 6, "orders": 9})
    metadata = c.metadata()
    assert metadata == '{"orders":9,"refunds":6}'
    assert Cursor.from_commit(OffsetAndMetadata(3, metadata)) == c
    assert Cursor.from_commit(None) == Cursor()
    assert Cursor(4).metadata() is None
    # metadata a Kafka client wrote, or entries not past the offset, are ignored
    assert Cursor.from_commit(OffsetAndMetadata(5, "not json")) == Cursor(5)
    assert Cursor.from_commit(OffsetAndMetadata(5, '{"a": 3, "b": true, "c": 8}')) == Cursor(5, {"c": 8})


def test_limits() -> None:
    assert check_limit(None) == MAX_REPLAY and check_limit(5) == 5 and check_limit(10**9) == MAX_REPLAY
    for bad in (0, -1, True, "3", 1.5):
        with pytest.raises(InvalidRequest):
            check_limit(bad)
