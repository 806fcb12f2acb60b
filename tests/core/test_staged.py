"""Staged entries (core/queues/queue.py): timers released ahead of their due time wait in
their queue, invisible, until due; then they join the tail. On real RocksDB, with
Twisted's deterministic clock as the reactor."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from twisted.internet.task import Clock

from logbus.core.log.batch import Record
from logbus.core.message import Message
from logbus.core.queues import timers as timers_mod
from logbus.core.queues.journal import QueueStore
from logbus.core.queues.lateness import BOUNDS_MS, Lateness
from logbus.core.queues.msgstore import MessageStore
from logbus.core.queues.queue import DROP_HEAD, MAXLEN, REJECT_PUBLISH_DLX, Entry, Outcome, QueueLimits
from logbus.core.queues.service import DeadLetterTarget, QueueService, QueueSettings, QueueState
from logbus.core.queues.timers import LEAD_MS, Timers
from logbus.core.state import StateStore
from logbus.core.state_pb2 import TimerRecord

T0 = 1_700_000_000_000  # epoch ms at the start of each test


class World:
    """A queue service on a state store in ``path``, its clock a Twisted ``Clock``."""

    def __init__(self, path: Path, settings: QueueSettings = QueueSettings()) -> None:
        self.path = path
        self.reactor = Clock()
        self.reactor.advance(T0 / 1000)
        self.records: dict[int, Record] = {}
        self.dead: list[tuple[int, str]] = []
        self.settings = settings
        self.store: StateStore | None = None
        self.lateness = Lateness()
        self.open()

    def now(self) -> int:
        return round(self.reactor.seconds() * 1000)

    def open(self) -> None:
        self.store = StateStore(self.path)
        self.qs = QueueStore(self.store)
        self.timers = Timers(self.qs, self.store, self.now, self.reactor)
        self.timers.lateness = self.lateness
        self.svc = QueueService("/", self.qs, self.timers, MessageStore(self.read_batch), clock=self.now,
                                dead_letter=self.dead_letter)
        self.svc.create("q", self.settings, durable=True)

    def restart(self) -> None:
        self.svc.stop()
        self.qs.commit()
        assert self.store is not None
        self.store.close()
        self.open()

    def close(self) -> None:
        if self.store is not None:
            self.store.close()

    def read_batch(self, topic: str, partition: int, offset: int) -> list[tuple[int, Record]]:
        return [(offset, self.records[offset])]

    def dead_letter(self, qs: QueueState, message: Message, reason: str, entry: Entry | None) -> None:
        self.dead.append((int(message.value or b"-1"), reason))

    def publish(self, offset: int, visible_ms: int = 0) -> None:
        message = Message(value=str(offset).encode())
        self.records[offset] = message.to_record()
        self.svc.enqueue(["q"], "t", 0, offset, message, visible_ms=visible_ms)

    def take(self, n: int = 10) -> list[int]:
        return [d.entry.offset for d in self.svc.take("q", "me", n)]

    @property
    def queue(self) -> Any:
        return self.svc.state("q").queue


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path / "state")
    yield w
    w.close()


def test_a_staged_entry_is_invisible_until_due_then_joins_the_tail(world: World) -> None:
    world.publish(0)
    world.publish(1, visible_ms=T0 + 100)
    world.publish(2)
    assert world.queue.message_count == 2 and world.queue.staged_count == 1
    world.reactor.advance(0.099)
    assert world.queue.message_count == 2  # not yet
    world.reactor.advance(0.001)  # the service's wake call fires at the visible time
    assert world.queue.message_count == 3
    assert world.take() == [0, 2, 1]  # at the tail, as if published when due


def test_how_late_each_staged_entry_became_ready_is_counted(world: World) -> None:
    world.publish(0, visible_ms=T0 + 100)
    world.publish(1, visible_ms=T0 + 100)
    world.reactor.advance(0.1)  # the wake call fires at the visible time: 0 ms late
    assert world.queue.message_count == 2
    world.publish(2, visible_ms=T0 + 150)
    world.reactor.advance(0.2)  # the clock jumps past it: the wake runs 150 ms late
    assert world.queue.message_count == 3
    counts = world.lateness.counts
    assert counts[0] == 2 and counts[BOUNDS_MS.index(200)] == 1 and sum(counts) == 3
    assert world.lateness.total_ms == 150


def test_staged_entries_become_ready_in_visible_order(world: World) -> None:
    world.publish(0, visible_ms=T0 + 30)
    world.publish(1, visible_ms=T0 + 10)
    world.publish(2, visible_ms=T0 + 20)
    world.reactor.advance(0.05)
    assert world.take() == [1, 2, 0]


def test_staged_entries_survive_a_restart_staged_with_their_delivery_count(world: World) -> None:
    """A staged entry below the delivered mark was never delivered: after a restart it is
    still staged, not early, and its first delivery counts 1 (the mark's inference, "at
    or below the mark means delivered once", must not apply to it)."""
    world.publish(0, visible_ms=T0 + 500)
    world.publish(1)
    [d1] = world.svc.take("q", "me", 1)  # the mark passes the staged entry's seq
    world.svc.settle(d1, Outcome.ACK)
    world.restart()
    assert world.queue.staged_count == 1 and world.queue.message_count == 0
    world.reactor.advance(0.499)
    assert world.take() == []
    world.reactor.advance(0.001)
    [d] = world.svc.take("q", "me", 1)
    assert d.entry.offset == 0 and d.entry.deliveries == 1 and not d.entry.visible_ms


def test_overdue_staged_entries_are_ready_at_once_after_a_restart(world: World) -> None:
    world.publish(0, visible_ms=T0 + 50)
    world.qs.commit()
    world.reactor.advance(1)  # the process is down past the due time
    world.restart()
    assert world.take() == [0]


@pytest.mark.parametrize(("overflow", "taken", "dead"), [
    (REJECT_PUBLISH_DLX, [1], [(0, MAXLEN)]),  # the due entry is refused and dead-lettered
    (DROP_HEAD, [0], [(1, MAXLEN)]),  # the head makes room for it
])
def test_a_full_queue_applies_its_limit_when_a_staged_entry_is_due(
        tmp_path: Path, overflow: str, taken: list[int], dead: list[tuple[int, str]]) -> None:
    """Limits apply when the entry becomes ready, as to a publish then."""
    w = World(tmp_path / "state", QueueSettings(limits=QueueLimits(max_length=1, overflow=overflow),
                                                dead_letter=DeadLetterTarget(exchange="dlx")))
    try:
        w.publish(0, visible_ms=T0 + 10)
        w.publish(1)
        w.reactor.advance(0.01)
        assert w.take() == taken and w.dead == dead
    finally:
        w.close()


def test_timers_are_released_ahead_of_due_and_staged(world: World) -> None:
    """The broker's path: a DELAY timer is handed over ``LEAD_MS`` before due with its due
    time, the queue stages it, and it is visible at the due time, not before."""
    due = T0 + 5_000
    released: list[tuple[int, int]] = []

    def on_due(due_ms: int, rec: TimerRecord) -> None:
        released.append((world.now(), due_ms))
        world.publish(rec.offset, visible_ms=due_ms)

    world.timers.add(due, TimerRecord(kind=TimerRecord.DELAY, topic="t", partition=0, offset=7))
    world.timers.arm(on_due)
    world.reactor.advance((due - LEAD_MS - world.now() - 1) / 1000)
    assert released == []
    world.reactor.advance(0.001)
    assert released == [(due - LEAD_MS, due)]
    assert world.timers.pending() == 0 and world.queue.staged_count == 1
    world.reactor.advance((due - world.now() - 1) / 1000)
    assert world.take() == []
    world.reactor.advance(0.001)
    assert world.take() == [7]


def test_timers_released_ahead_are_bounded(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most MAX_AHEAD timers wait staged; the rest are released when due."""
    monkeypatch.setattr(timers_mod, "MAX_AHEAD", 3)
    released: list[int] = []

    def on_due(due_ms: int, rec: TimerRecord) -> None:
        released.append(rec.offset)
        world.publish(rec.offset, visible_ms=due_ms)

    for i in range(6):
        world.timers.add(T0 + 1_000 + i, TimerRecord(kind=TimerRecord.DELAY, topic="t", partition=0, offset=i))
    world.timers.arm(on_due)
    world.reactor.advance(0.5)  # within LEAD_MS of every due time
    assert released == [0, 1, 2]
    world.reactor.advance(0.5)  # the first is due: room for one more
    assert released == [0, 1, 2, 3]
    world.reactor.advance(0.01)
    assert released == [0, 1, 2, 3, 4, 5]
    assert world.take() == [0, 1, 2, 3, 4, 5]
