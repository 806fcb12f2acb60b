"""The operator's view on a real broker on a temp dir (no sockets): a queue's counts and
stats against what was done to it, the kind's running totals surviving the queue's
deletion, a browse in delivery order (priorities) that takes nothing, purge, and offset
reset plans (clamped to the log, dry run, executed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from logbus.core.broker import Broker
from logbus.core.errors import InvalidRequest, NotFound
from logbus.core.message import Envelope, Message
from logbus.core.queues.entry import Outcome, QueueLimits
from logbus.core.queues.service import DeadLetterTarget, QueueSettings
from logbus.core.streams.group_model import OffsetAndMetadata
from tests.core.brokers import Brokers
from tests.core.test_vhost import Consumer


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    brokers = Brokers(tmp_path)
    yield brokers.start()
    brokers.stop()


def msg(body: bytes, **env: object) -> Message:
    return Message(None, body, None, [], Envelope(**env))  # type: ignore[arg-type]


def test_counts_and_stats_follow_what_happens(broker: Broker) -> None:
    v = broker.vhost("/")
    assert v is not None
    v.declare_queue("dlq", durable=True)
    v.declare_queue("work", QueueSettings(dead_letter=DeadLetterTarget(exchange="", routing_key="dlq")), durable=True)
    for i in range(6):
        v.publish("", "work", msg(b"%d" % i))
    c = Consumer("c", owner="ch", prefetch=3)
    v.consume("work", c)
    info = broker.admin.queue_info("/", "work")
    assert (info.ready, info.unacked, info.consumers, info.messages) == (3, 3, 1, 6)
    assert (info.stats.routed, info.stats.delivered) == (6, 3)
    v.settle(c.got[0], Outcome.ACK)
    v.settle(c.got[1], Outcome.REQUEUE)  # handed out again at once: a redelivery
    v.settle(c.got[2], Outcome.DEAD_LETTER)
    c.unacked = 0  # its credit back
    v.dispatch("work")
    assert [d.message.value for d in c.got[3:]] == [b"1", b"3", b"4"]
    info = broker.admin.queue_info("/", "work")
    s = info.stats
    assert (s.acked, s.dead_lettered, s.redelivered) == (1, 1, 1)
    assert s.delivered == 6
    assert (info.ready, info.unacked) == (1, 3)
    assert broker.admin.queue_info("/", "dlq").ready == 1

    totals = broker.admin.inventory.queue_totals()["classic"]
    assert (totals.routed, totals.acked) == (7, 1)  # 6 to work, 1 dead letter to dlq
    v.delete_queue("work")
    with pytest.raises(NotFound):
        broker.admin.queue_info("/", "work")
    assert broker.admin.inventory.queue_totals()["classic"].routed == 7  # the deleted queue's work still counts
    assert broker.admin.message_totals()["amqp"]["dead_lettered"] == 1
    assert [q.name for q in broker.admin.list_queues("/")] == ["dlq"]


def test_routed_is_counted_by_the_publishers_protocol(broker: Broker) -> None:
    """The same AMQP queue takes messages of every protocol; each entry made is routed
    under the protocol of its message's envelope (none: a Kafka record), while delivered
    and acked stay with the queue's consumers (classic: amqp)."""
    v = broker.vhost("/")
    assert v is not None
    v.declare_queue("mixed", durable=True)
    v.declare_queue("copy", durable=True)
    v.bind("amq.fanout", "mixed", "")
    v.bind("amq.fanout", "copy", "")
    before = {p: t["routed"] for p, t in broker.admin.message_totals().items()}
    for protocol, n in ((Envelope.MQTT, 3), (Envelope.AMQP, 1), (Envelope.HTTP, 2), (Envelope.PROTOCOL_UNSPECIFIED, 4)):
        for _ in range(n):
            v.publish("amq.fanout", "", msg(b"x", protocol=protocol))
    c = Consumer("c", owner="ch", prefetch=100)
    v.consume("mixed", c)
    v.settle(c.got[0], Outcome.ACK)
    totals = broker.admin.message_totals()
    routed = {p: t["routed"] - before[p] for p, t in totals.items()}
    assert routed == {"mqtt": 6, "amqp": 2, "http": 4, "kafka": 8}  # two queues each
    assert (totals["amqp"]["delivered"], totals["amqp"]["acked"]) == (10, 1)
    assert totals["mqtt"]["delivered"] == 0
    assert broker.admin.queue_info("/", "mixed").stats.routed == 10  # a queue's own count is unchanged


def test_browse_in_delivery_order_takes_nothing(broker: Broker) -> None:
    v = broker.vhost("/")
    assert v is not None
    v.declare_queue("pri", QueueSettings(limits=QueueLimits(max_priority=5)))
    for body, pri in ((b"low", 1), (b"high", 5), (b"mid", 3), (b"high2", 5)):
        v.publish("", "pri", msg(body, priority=pri, message_id=body.decode()))
    peeked = broker.admin.peek_queue("/", "pri", 3)
    assert [p.payload for p in peeked] == [b"high", b"high2", b"mid"]
    assert [p.message_id for p in peeked] == ["high", "high2", "mid"]
    assert [p.position for p in peeked] == [1, 2, 3]
    info = broker.admin.queue_info("/", "pri")
    assert (info.ready, info.stats.delivered) == (4, 0)
    c = Consumer("c", owner="ch", prefetch=1)
    v.consume("pri", c)
    assert c.got[0].message.value == b"high"  # as the browse said
    assert [p.payload for p in broker.admin.peek_queue("/", "pri", 10)] == [b"high2", b"mid", b"low"]
    v.settle(c.got[0], Outcome.REQUEUE)  # given back: in its old place again
    c.unacked = 1  # (no credit: it stays ready)
    assert [(p.payload, p.redelivered) for p in broker.admin.peek_queue("/", "pri", 2)] == [
        (b"high", True), (b"high2", False)]
    v.consume("pri", Consumer("c2", owner="ch2", prefetch=1))  # takes "high" again
    with pytest.raises(InvalidRequest):
        broker.admin.peek_queue("/", "pri", 0)

    assert broker.admin.purge_queue_contents("/", "pri") == 3
    info = broker.admin.queue_info("/", "pri")
    assert (info.ready, info.unacked) == (0, 1)  # the leased one stays


def test_pop_groups_are_queues_of_their_own_namespace(broker: Broker) -> None:
    broker.topics.create_topic("jobs", {"partitions": 1})
    broker.pop_service.receive("workers", "jobs", "m", 1, 30_000)
    broker.admin.publish("jobs", [msg(b"a"), msg(b"b")], partition=0)
    while broker.reactor.run_once():
        pass
    [q] = broker.admin.list_queues("~")
    assert (q.vhost, q.name, q.kind, q.protocol, q.ready) == ("", "workers/jobs", "pop", "http", 2)
    assert broker.admin.queue_info("~", "workers/jobs").ready == 2
    assert [p.payload for p in broker.admin.peek_queue("~", "workers/jobs", 5)] == [b"a", b"b"]


def test_offset_reset_plans(broker: Broker) -> None:
    broker.topics.create_topic("clicks", {"partitions": 2})
    for p in (0, 1):
        broker.admin.publish("clicks", [msg(b"x") for _ in range(10)], partition=p)
    while broker.reactor.run_once():
        pass
    with pytest.raises(NotFound):
        broker.admin.consumer_group_offsets("g")
    broker.streams.commit_offsets("g", -1, "", {("clicks", 0): OffsetAndMetadata(4)})
    g = broker.admin.consumer_group_offsets("g")
    # partition 1, not committed on, counts from the log start
    assert [(p.topic, p.partition, p.committed, p.log_end, p.lag, p.uncommitted) for p in g.partitions] \
        == [("clicks", 0, 4, 10, 6, False), ("clicks", 1, None, 10, 10, True)]
    assert (g.lag, g.uncommitted_partitions) == (16, 1)

    plan = broker.admin.reset_group_offsets("g", "shift", 100)  # clamped to the end; a dry run
    assert [(r.partition, r.current, r.new) for r in plan] == [(0, 4, 10)]
    assert broker.admin.consumer_group_offsets("g").partitions[0].committed == 4
    plan = broker.admin.reset_group_offsets("g", "shift", -100, topics=["clicks"], execute=True)
    assert [(r.partition, r.current, r.new) for r in plan] == [(0, 4, 0), (1, None, 0)]
    assert [p.committed for p in broker.admin.consumer_group_offsets("g").partitions] == [0, 0]
    assert [r.new for r in broker.admin.reset_group_offsets("g", "latest")] == [10, 10]
    assert [r.new for r in broker.admin.reset_group_offsets("g", "offset", 7)] == [7, 7]
    assert [r.new for r in broker.admin.reset_group_offsets("g", "datetime", 0)] == [0, 0]
    assert [r.new for r in broker.admin.reset_group_offsets("g", "datetime", 2**62)] == [10, 10]
    with pytest.raises(InvalidRequest):
        broker.admin.reset_group_offsets("g", "sideways")
    with pytest.raises(NotFound):
        broker.admin.reset_group_offsets("g", "earliest", topics=["nope"])
    # a group with members is refused (GroupActive): tests/integration/test_operator_view.py, with a real consumer
