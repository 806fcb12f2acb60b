"""Admin.dlq_replay on a temp dir (core/queues/replay.py): dead letters go back to their
topic and its pop groups as new messages, once; the cursor is the committed offset of
group ``%REPLAY%<group>`` and survives a restart; a replay of a group while another waits
for durability is refused."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.python.failure import Failure

from logbus.core.broker import Broker
from logbus.core.message import Message
from logbus.core.queues.replay import ReplayInProgress
from tests.loop import LoopReactor


def dead(topic: str, value: bytes) -> Message:
    m = Message(b"k", value)
    m.envelope.delivery_count = 16
    dl = m.envelope.dead_letter
    dl.topic, dl.partition, dl.reason, dl.queue = topic, 0, "delivery_limit", "g"
    return m


def settle(loop: LoopReactor, d: Any) -> Any:
    out: list[Any] = []
    d.addBoth(out.append)
    while not out:
        loop.run_once(block=0.01)
    if isinstance(out[0], Failure):
        out[0].raiseException()
    return out[0]


def test_replay_once_and_after_a_restart(tmp_path: Any) -> None:
    loop = LoopReactor()
    b = Broker(tmp_path, reactor=loop)
    b.start()
    b.topics.create_topic("t", {"flush": "none"})
    b.topics.create_topic("%DLQ%g", {"partitions": 1})  # flush sync: a replay waits for the disk
    assert b.pop_service.receive("g", "t", "m", 1, 1000) == []
    settle(loop, b.admin.publish("%DLQ%g", [dead("t", b"a"), dead("t", b"b")]))

    d = b.admin.dlq_replay("g")
    with pytest.raises(ReplayInProgress):
        b.admin.dlq_replay("g")
    assert settle(loop, d) == {"pop_group": "g", "replayed": 2, "topics": {"t": 2}, "skipped": 0, "more": False}
    got = b.pop_service.receive("g", "t", "m", 10, 1000)
    while len(got) < 2 and (more := b.pop_service.receive("g", "t", "m", 10, 1000)):  # past its time budget
        got += more
    assert [(p.message.value, p.deliveries, p.offset) for p in got] == [(b"a", 1, 0), (b"b", 1, 1)]
    assert not any(p.message.envelope.HasField("dead_letter") for p in got)
    assert settle(loop, b.admin.dlq_replay("g"))["replayed"] == 0
    cursor = b.groups.fetch_offsets("%REPLAY%g", [("%DLQ%g", 0)])[("%DLQ%g", 0)]
    assert cursor is not None and cursor.offset == 2
    settle(loop, b.admin.publish("%DLQ%g", [dead("t", b"c")]))
    b.stop()
    while loop.run_once():
        pass

    b = Broker(tmp_path, reactor=loop)
    b.start()
    try:
        assert settle(loop, b.admin.dlq_replay("g", max=5))["topics"] == {"t": 1}  # only the new one
        assert [p.message.value for p in b.pop_service.receive("g", "t", "m", 10, 1000)] == [b"c"]
        assert settle(loop, b.admin.dlq_replay("g"))["replayed"] == 0
    finally:
        b.stop()
        while loop.run_once():
            pass
