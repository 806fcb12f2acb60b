"""Consumers with a filter on a shared queue (core/queues/service.py, queue.View): each
gets only what its filter takes, round-robin with the others; what no filter takes
waits in the queue, in order, for a consumer without one. Real RocksDB for the
journal; the log is a dict of records, read back when a message left memory."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock

from logbus.core.log.batch import Record
from logbus.core.message import Envelope, Message
from logbus.core.queues.journal import QueueStore
from logbus.core.queues.msgstore import MessageStore
from logbus.core.queues.queue import Outcome
from logbus.core.queues.entry import Delivery
from logbus.core.queues.service import FILL_BATCH, QueueService, QueueSettings
from logbus.core.queues.timers import Timers
from logbus.core.state import StateStore
from logbus.filters import properties as properties_module
from logbus.filters.message_filter import FilterSpec


class Taker:
    """A consumer with room for ``credit`` unsettled messages."""

    def __init__(self, name: str, credit: int = 100) -> None:
        self.tag = self.owner = name
        self.invisible_ms = 0
        self.no_ack = False
        self.credit = credit
        self.got: list[Delivery] = []

    def has_credit(self) -> bool:
        return len(self.got) < self.credit

    def deliver(self, d: Delivery) -> None:
        self.got.append(d)

    def values(self) -> list[str]:
        return [(d.message.value or b"").decode() for d in self.got]


class Broker:
    def __init__(self, root: Path, reactor: Any = None) -> None:
        self.root = root
        self.reactor = reactor  # None: a new view's backlog is judged at once
        self.records: dict[int, Record] = {}
        self.store = StateStore(root / "state")
        self.open()

    def open(self) -> None:
        self.qs = QueueStore(self.store)
        self.messages = MessageStore(lambda topic, partition, offset: [(offset, self.records[offset])])
        self.svc = QueueService("/", self.qs, Timers(self.qs, self.store, lambda: 1000, self.reactor),
                                self.messages, clock=lambda: 1000)
        self.svc.create("q", QueueSettings(), durable=True)

    def publish(self, value: str, kind: str, tag: str = "") -> None:
        offset = len(self.records)
        env = Envelope(tag=tag) if tag else Envelope()
        m = Message(None, value.encode(), 1000, [("kind", kind.encode())], env)
        self.records[offset] = m.to_record()
        self.svc.enqueue(["q"], "t", 0, offset, m)

    def restart(self) -> None:
        self.qs.commit()
        self.store.close()
        self.store = StateStore(self.root / "state")
        self.open()


@pytest.fixture
def broker() -> Iterator[Broker]:
    root = Path(tempfile.mkdtemp(prefix="logbus-cfilter-"))
    b = Broker(root)
    yield b
    b.store.close()
    shutil.rmtree(root, ignore_errors=True)


def sql(text: str) -> FilterSpec:
    spec = FilterSpec.parse(None, text)
    assert spec is not None
    return spec


def settle_all(b: Broker, c: Taker, outcome: Outcome = Outcome.ACK) -> None:
    got, c.got = c.got, []
    for d in got:
        b.svc.settle(d, outcome)
    b.svc.dispatch("q")  # as a channel does after acks


def test_a_filtered_consumer_gets_only_what_its_filter_takes(broker: Broker) -> None:
    a, anyone = Taker("a"), Taker("any")
    broker.svc.consume("q", a, sql("kind = 'a'"))
    broker.svc.consume("q", anyone)
    for i, kind in enumerate("abbaab"):
        broker.publish(f"{kind}{i}", kind)
    assert set(a.values()) <= {"a0", "a3", "a4"} and a.values()
    assert sorted(a.values() + anyone.values()) == sorted(["a0", "b1", "b2", "a3", "a4", "b5"])
    assert broker.svc.state("q").queue.message_count == 0


def test_what_no_filter_takes_waits_in_order_for_a_consumer_without_one(broker: Broker) -> None:
    for i, kind in enumerate("babcb"):
        broker.publish(f"{kind}{i}", kind)
    a, c = Taker("a"), Taker("c")
    broker.svc.consume("q", a, sql("kind = 'a'"))  # the view is made from what is ready
    broker.svc.consume("q", c, sql("kind IN ('c')"))
    assert (a.values(), c.values()) == (["a1"], ["c3"])
    q = broker.svc.state("q").queue
    assert q.message_count == 3 and q.unacked_count == 2
    broker.publish("a5", "a")
    assert a.values() == ["a1", "a5"]
    rest = Taker("rest")
    broker.svc.consume("q", rest)
    assert rest.values() == ["b0", "b2", "b4"]


def test_a_requeued_message_goes_back_to_the_filtered_consumers(broker: Broker) -> None:
    a = Taker("a", credit=1)
    broker.svc.consume("q", a, sql("kind = 'a'"))
    broker.publish("a0", "a")
    broker.publish("a1", "a")
    assert a.values() == ["a0"]
    settle_all(broker, a, Outcome.REQUEUE)  # back in its old place, ahead of a1
    assert a.values() == ["a0"] and a.got[0].entry.deliveries == 2
    settle_all(broker, a)
    assert a.values() == ["a1"]


def test_consumers_with_the_same_filter_share_one_view(broker: Broker) -> None:
    x, y = Taker("x"), Taker("y")
    broker.svc.consume("q", x, sql("kind = 'a'"))
    broker.svc.consume("q", y, sql("kind = 'a'"))
    q = broker.svc.state("q").queue
    assert len(q.views) == 1
    for i in range(4):
        broker.publish(f"a{i}", "a")
    assert x.values() == ["a0", "a2"] and y.values() == ["a1", "a3"]  # round-robin
    broker.svc.cancel("q", x)
    assert len(q.views) == 1
    broker.svc.cancel("q", y)
    assert not q.views


def test_a_tag_filter_and_messages_read_back_from_the_log(broker: Broker) -> None:
    for i, tag in enumerate(["red", "blue", "red"]):
        broker.publish(f"m{i}", "x", tag=tag)
    broker.restart()  # the entries come back from RocksDB; the messages from the log
    spec = FilterSpec.parse("blue || green", None)
    assert spec is not None
    blue = Taker("blue")
    broker.svc.consume("q", blue, spec)
    assert blue.values() == ["m1"]
    assert blue.got[0].entry.deliveries == 1
    settle_all(broker, blue)
    rest = Taker("rest")
    broker.svc.consume("q", rest)
    assert rest.values() == ["m0", "m2"]


def test_a_delivery_out_of_order_is_not_redelivered_after_a_restart(broker: Broker) -> None:
    """The journal's delivered mark must not pass b0, which no one was given."""
    broker.publish("b0", "b")
    broker.publish("a1", "a")
    a = Taker("a")
    broker.svc.consume("q", a, sql("kind = 'a'"))
    assert a.values() == ["a1"]
    broker.restart()
    rest = Taker("rest")
    broker.svc.consume("q", rest)
    assert rest.values() == ["b0", "a1"]
    deliveries: dict[str, Any] = {v: d.entry.deliveries for v, d in zip(rest.values(), rest.got)}
    assert deliveries == {"b0": 1, "a1": 2}  # AMQP's redelivered: more than one


def test_a_long_queue_is_judged_for_a_new_filter_a_part_per_reactor_turn() -> None:
    """A consumer filter on a queue of thousands does not judge them all in one turn,
    and hands out nothing past what it has judged, so the order holds."""
    root = Path(tempfile.mkdtemp(prefix="logbus-cfilter-"))
    clock = Clock()
    b = Broker(root, clock)
    try:
        n = FILL_BATCH * 2 + 10
        for i in range(n):
            b.publish(f"{'ab'[i % 3 == 0]}{i}", "ab"[i % 3 == 0])  # every third one is a "b"
        a = Taker("a", credit=n)
        b.svc.consume("q", a, sql("kind = 'a'"))
        first = a.values()
        assert first and all(int(v[1:]) < FILL_BATCH for v in first)  # one batch judged so far
        view = b.svc.state("q").queue.views[sql("kind = 'a'")]
        assert view.filling
        b.publish(f"a{n}", "a")  # newer than the backlog: waits behind it
        assert a.values() == first
        while view.filling:
            clock.advance(0)
        want = [f"a{i}" for i in range(n + 1) if i % 3 != 0]
        assert a.values() == want  # every "a", in publish order
        assert b.svc.state("q").queue.message_count == (n + 2) // 3
    finally:
        b.store.close()
        shutil.rmtree(root, ignore_errors=True)


def test_properties_are_built_once_per_message_for_every_consumer_filter(broker: Broker,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    real = properties_module.message_properties

    def counting(envelope: Any, headers: Any, **kw: Any) -> dict[str, Any]:
        built.append(kw["topic"])
        return real(envelope, headers, **kw)

    monkeypatch.setattr(properties_module, "message_properties", counting)
    takers = [Taker(f"c{i}") for i in range(3)]
    for i, c in enumerate(takers):  # three distinct selectors: three views
        broker.svc.consume("q", c, sql(f"kind = 'a' AND {i} = {i}"))
    broker.publish("a0", "a")
    broker.publish("b1", "b")
    assert len(built) == 2  # one per message, not one per view
    assert sum(len(c.got) for c in takers) == 1
