"""The vhost model wired together (core/vhost.py, spoken to in AMQP's words) on a temp dir: publish appends once
and enqueues everywhere it routes, consumers with credit get entries round-robin, acks,
requeues in place, dead-lettering with x-death, overflow refusal, and restart of a
durable queue from RocksDB."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from logbus.gateway.amqp.model.forms import AMQP_FORMS, amqp_headers
from logbus.core.log import LogManager, TopicConfig
from logbus.core.message import Envelope, Message
from logbus.core.pipeline import NoPopGroups, Pipeline
from logbus.core.queues.journal import QueueStore
from logbus.core.queues.msgstore import MESSAGE_OVERHEAD
from logbus.core.routing.router import NotFound, PreconditionFailed, ResourceLocked
from logbus.core.state import StateStore
from logbus.core.queues.queue import QueueLimits
from logbus.core.queues.service import DeadLetterTarget, Delivery, QueueSettings
from logbus.core.vhost import VHost
from tests.core.amqp_terms import AmqpTerms
from tests.loop import LoopReactor


@dataclass
class Consumer:
    tag: str
    owner: Any
    prefetch: int = 0
    no_ack: bool = False
    got: list[Delivery] = field(default_factory=list)
    unacked: int = 0
    invisible_ms: int = 0

    def has_credit(self) -> bool:
        return self.no_ack or not self.prefetch or self.unacked < self.prefetch

    def deliver(self, d: Delivery) -> None:
        self.got.append(d)
        if not self.no_ack:
            self.unacked += 1


class Env:
    def __init__(self, tmp: Path, loop: LoopReactor) -> None:
        self.tmp, self.loop = tmp, loop
        self.now = 1_000_000
        self.open()

    def open(self) -> None:
        self.lm = LogManager(self.tmp, self.loop)
        self.store = StateStore(self.tmp / "state")
        self.qs = QueueStore(self.store)
        self.v = AmqpTerms(VHost("/", self.lm, lambda t: self.lm.open_topic(t, TopicConfig(flush="none"), create=True),
                                 self.qs, clock=lambda: self.now, store=self.store, forms=AMQP_FORMS))

    def close(self) -> None:
        self.qs.commit()
        self.lm.close()
        self.store.close()

    def restart(self) -> None:
        self.close()
        self.lm = LogManager(self.tmp, self.loop)
        for d in sorted(p.name for p in (self.tmp / "log").iterdir() if p.is_dir()):
            self.lm.open_topic(d, TopicConfig(flush="none"))
        self.store = StateStore(self.tmp / "state")
        self.qs = QueueStore(self.store)
        self.v = AmqpTerms(VHost("/", self.lm, lambda t: self.lm.open_topic(t, TopicConfig(flush="none"), create=True),
                                 self.qs, clock=lambda: self.now, store=self.store, forms=AMQP_FORMS))


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    loop = LoopReactor()
    e = Env(tmp_path, loop)
    yield e
    e.close()
    while loop.run_once():
        pass


def msg(body: bytes, **env: Any) -> Message:
    return Message(None, body, None, [], Envelope(**env))


def test_fanout_appends_once_and_every_queue_gets_it(env: Env) -> None:
    v = env.v
    v.declare_exchange("logs", "fanout")
    for q in ("a", "b", "c"):
        v.declare_queue(q)
        v.router.bind("logs", q)
    idle = Consumer("idle", owner="ch0", prefetch=1, unacked=1)  # no credit; its queues' messages are kept in memory
    for q in "bc":
        v.consume(q, idle)
    assert v.publish("logs", "", msg(b"hello")).routed
    env.loop.run_once()
    assert env.lm.partition("logs", 0).next_offset == 1  # one record in the log
    assert [v.queue(q).queue.message_count for q in "abc"] == [1, 1, 1]
    assert v.messages.live_bytes == 5 + MESSAGE_OVERHEAD  # one copy in memory
    c = Consumer("c1", owner="ch1")
    v.consume("a", c)  # (a had no consumer: its entry reads the log)
    assert [d.message.value for d in c.got] == [b"hello"]
    v.ack("a", c.got[0].receipt)
    assert v.messages.live_bytes == 5 + MESSAGE_OVERHEAD  # b and c still hold it
    v.purge_queue("b")
    v.delete_queue("c")
    assert v.messages.live_bytes == 0
    assert not v.publish("", "nowhere", msg(b"x")).routed  # unroutable: logged, no queue
    with pytest.raises(NotFound):
        v.publish("nope", "", msg(b"x"))


def test_round_robin_with_prefetch_and_requeue_in_place(env: Env) -> None:
    v = env.v
    v.declare_queue("work")
    for i in range(6):
        v.publish("", "work", msg(b"%d" % i))
    c1, c2 = Consumer("c1", "ch1", prefetch=2), Consumer("c2", "ch2", prefetch=2)
    v.consume("work", c1)
    v.consume("work", c2)
    assert [d.message.value for d in c1.got] == [b"0", b"1"]  # c1 first took its prefetch
    assert [d.message.value for d in c2.got] == [b"2", b"3"]
    v.reject("work", c1.got[0].receipt, requeue=True)  # back in its old place
    c1.unacked -= 1
    v.dispatch("work")
    assert [d.message.value for d in c1.got][-1] == b"0" and c1.got[-1].entry.redelivered
    v.release("work", "ch2")  # channel 2 closes: its two come back, in order
    c2.unacked = 0
    v.cancel("work", c2)
    c1.unacked = 0
    v.dispatch("work")
    assert [d.message.value for d in c1.got[-2:]] == [b"2", b"3"]


def test_dead_letter_with_x_death_and_overflow(env: Env) -> None:
    v = env.v
    v.declare_exchange("dlx", "fanout")
    v.declare_queue("dead")
    v.router.bind("dlx", "dead")
    v.declare_queue("q", arguments={"x-dead-letter-exchange": "dlx", "x-max-length": 2,
                                    "x-message-ttl": 1000})
    for i in range(3):
        v.publish("", "q", msg(b"%d" % i, exchange="", routing_key="q"))
    assert v.queue("q").queue.message_count == 2 and v.queue("dead").queue.message_count == 1
    env.now += 2000
    v.expire()
    assert v.queue("dead").queue.message_count == 3
    c = Consumer("c", "ch", no_ack=True)
    v.consume("dead", c)
    deaths = [amqp_headers(d.message.envelope)["x-death"][0] for d in c.got]
    assert [(x["reason"], x["queue"], x["count"]) for x in deaths] == [
        ("maxlen", "q", 1), ("expired", "q", 1), ("expired", "q", 1)]
    assert [d.message.value for d in c.got] == [b"0", b"1", b"2"]
    v.declare_queue("capped", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    assert not v.publish("", "capped", msg(b"a")).refused
    assert v.publish("", "capped", msg(b"b")).refused


def test_reject_publish_dlx_refuses_and_dead_letters(env: Env) -> None:
    v = env.v
    v.declare_exchange("dlx", "fanout")
    v.declare_queue("dead")
    v.router.bind("dlx", "dead")
    v.declare_queue("capped", arguments={"x-max-length": 1, "x-overflow": "reject-publish-dlx",
                                         "x-dead-letter-exchange": "dlx"})
    assert not v.publish("", "capped", msg(b"a", exchange="", routing_key="capped")).refused
    assert v.publish("", "capped", msg(b"b", exchange="", routing_key="capped")).refused
    assert v.queue("capped").queue.message_count == 1
    c = Consumer("c", "ch", no_ack=True)
    v.consume("dead", c)
    assert [d.message.value for d in c.got] == [b"b"]
    death = amqp_headers(c.got[0].message.envelope)["x-death"][0]
    assert (death["reason"], death["queue"], death["count"]) == ("maxlen", "capped", 1)


def test_dead_letter_cycles_are_dropped_unless_rejected(env: Env) -> None:
    """RabbitMQ's rule: a message dead-lettered back into a queue it died in, with no
    rejection on the way, is dropped there; a rejection makes it a consumer's choice."""
    v = env.v
    # expiry into itself through the default exchange (no dead-letter routing key)
    v.declare_queue("loop", arguments={"x-dead-letter-exchange": "", "x-message-ttl": 1000})
    v.publish("", "loop", msg(b"x", exchange="", routing_key="loop"))
    env.now += 2000
    v.expire()
    assert v.queue("loop").queue.message_count == 0
    # a longer cycle: a -> b -> a, both by expiry; b's other binding still gets it
    v.declare_exchange("to_b", "fanout")
    v.declare_exchange("to_a", "fanout")
    v.declare_queue("a", arguments={"x-dead-letter-exchange": "to_b", "x-message-ttl": 1000})
    v.declare_queue("b", arguments={"x-dead-letter-exchange": "to_a", "x-message-ttl": 1000})
    v.declare_queue("audit")
    v.router.bind("to_b", "b")
    v.router.bind("to_a", "a")
    v.router.bind("to_a", "audit")
    v.publish("", "a", msg(b"y", exchange="", routing_key="a"))
    env.now += 2000
    v.expire()  # a -> b
    assert v.queue("b").queue.message_count == 1
    env.now += 2000
    v.expire()  # b -> a would cycle: dropped there; audit was not in the cycle
    assert (v.queue("a").queue.message_count, v.queue("audit").queue.message_count) == (0, 1)
    # rejected into itself: delivered again, each time
    v.declare_queue("retry", arguments={"x-dead-letter-exchange": ""})
    v.publish("", "retry", msg(b"z", exchange="", routing_key="retry", protocol=Envelope.AMQP))
    c = Consumer("c", "ch", prefetch=1)
    v.consume("retry", c)
    for _ in range(3):
        v.reject("retry", c.got[-1].receipt, requeue=False)
        c.unacked -= 1
        v.dispatch("retry")
    assert len(c.got) == 4
    death = amqp_headers(c.got[-1].message.envelope)["x-death"][0]
    assert (death["reason"], death["queue"], death["count"]) == ("rejected", "retry", 3)


def test_declare_rules(env: Env) -> None:
    v = env.v
    v.declare_queue("q", durable=True, arguments={"x-max-length": 5})
    with pytest.raises(PreconditionFailed):
        v.declare_queue("q", durable=False, arguments={"x-max-length": 5})
    with pytest.raises(PreconditionFailed):
        v.declare_queue("q", durable=True, arguments={"x-max-length": 6})
    v.declare_queue("q", passive=True)
    with pytest.raises(NotFound):
        v.declare_queue("missing", passive=True)
    v.declare_queue("mine", exclusive="conn1")
    with pytest.raises(ResourceLocked):
        v.declare_queue("mine", exclusive="conn2")


def test_durable_queue_survives_restart_acked_never_return(env: Env) -> None:
    v = env.v
    v.declare_queue("jobs", durable=True)
    for i in range(4):
        v.publish("", "jobs", msg(b"%d" % i))
    env.loop.run_once()
    c = Consumer("c", "ch", prefetch=4)
    v.consume("jobs", c)
    v.ack("jobs", c.got[0].receipt)
    v.ack("jobs", c.got[2].receipt)
    env.restart()
    env.v.load()
    c2 = Consumer("c", "ch", prefetch=10)
    env.v.consume("jobs", c2)
    assert [(d.message.value, d.entry.redelivered) for d in c2.got] == [(b"1", True), (b"3", True)]
    assert env.v.messages.log_reads >= 1  # read back from the log


def test_durable_definitions_survive_restart_transient_ones_do_not(env: Env) -> None:
    v = env.v
    v.declare_exchange("events", "topic", durable=True, arguments={"alternate-exchange": "lost"})
    v.declare_exchange("lost", "fanout", durable=True)
    v.declare_exchange("temp", "fanout")
    v.declare_queue("all", durable=True, arguments={"x-max-length": 10})
    v.declare_queue("unrouted", durable=True)
    v.declare_queue("scratch")
    v.bind("events", "all", "#")
    v.bind("lost", "unrouted")
    v.bind("events", "scratch", "#")  # to a transient queue: not kept
    v.bind("temp", "all")  # from a transient exchange: not kept
    v.declare_queue("gone", durable=True)
    v.bind("events", "gone", "x.*")
    v.delete_queue("gone")
    env.restart()
    v = env.v
    v.load()
    assert sorted(n for n in v.queues) == ["all", "unrouted"]
    assert v.queue("all").settings.limits.max_length == 10
    assert sorted(x.name for x in v.router.exchanges() if not x.name.startswith("amq.")) == ["", "events", "lost"]
    assert [(b.source, b.destination, b.routing_key) for b in v.router.bindings()] == [
        ("events", "all", "#"), ("lost", "unrouted", "")]
    v.publish("events", "a.b", msg(b"1"))
    assert v.queue("all").queue.message_count == 1
    v.unbind("events", "all", "#")
    v.publish("events", "a.b", msg(b"2"))  # nothing matches: the alternate exchange
    assert v.queue("unrouted").queue.message_count == 1
    env.restart()
    env.v.load()
    assert env.v.router.bindings_from("events") == []


def test_x_expires_deletes_an_unused_queue(env: Env) -> None:
    v = env.v
    v.declare_queue("idle", durable=True, arguments={"x-expires": 1000})
    v.publish("", "idle", msg(b"x"))
    env.now += 900
    v.get("idle", "ch", no_ack=True)  # a get counts as use
    env.now += 900
    v.expire()
    assert "idle" in v.queues
    c = Consumer("c", "ch")
    v.consume("idle", c)
    env.now += 5000
    v.expire()
    assert "idle" in v.queues  # a consumer keeps it
    v.cancel("idle", c)
    env.now += 1000
    v.expire()
    assert "idle" not in v.queues
    env.restart()
    env.v.load()
    assert "idle" not in env.v.queues  # its definition went too


def test_the_neutral_model_dead_letters_without_any_protocol(tmp_path: Path) -> None:
    """The vhost model in its own terms (settings, no ``x-`` argument, the NEUTRAL forms):
    a dead-lettered copy records where it died in ``Envelope.dead_letter``, and the
    cycle rule holds on its deaths."""
    loop = LoopReactor()
    lm = LogManager(tmp_path, loop)
    store = StateStore(tmp_path / "state")
    now = [1_000_000]
    v = VHost("/", lm, lambda t: lm.open_topic(t, TopicConfig(flush="none"), create=True), QueueStore(store),
              clock=lambda: now[0], store=store)
    try:
        v.declare_exchange("dlx", "fanout")
        v.declare_queue("dead")
        v.bind("dlx", "dead")
        ttl = QueueSettings(QueueLimits(message_ttl_ms=1000), dead_letter=DeadLetterTarget("dlx", "gone"))
        v.declare_queue("q", ttl)
        v.declare_queue("loop", QueueSettings(QueueLimits(message_ttl_ms=1000), dead_letter=DeadLetterTarget("")))
        assert v.publish("", "q", msg(b"x", routing_key="q")).routed
        assert v.publish("", "loop", msg(b"y", routing_key="loop")).routed
        now[0] += 2000
        v.expire()
        c = Consumer("c", "ch", no_ack=True)
        v.consume("dead", c)
        (d,) = c.got
        env = d.message.envelope
        assert (env.dead_letter.reason, env.dead_letter.queue, env.dead_letter.time_ms) == ("expired", "q", now[0])
        assert (env.exchange, env.routing_key, env.amqp_headers) == ("dlx", "gone", b"")
        assert v.queue("loop").queue.message_count == 0  # expired back into itself: a cycle, dropped
    finally:
        lm.close()
        store.close()


def test_publishes_of_one_turn_are_dispatched_once_at_its_end(env: Env) -> None:
    """``Pipeline.publish(dispatch_later=True)`` (MQTT's: a fleet, one message per read):
    the queues are dispatched once at the end of the turn with everything the turn's reads
    published, in order, instead of once per read; without it, at once."""
    at_end: list[Any] = []
    v = VHost("/", env.lm, lambda t: env.lm.open_topic(t, TopicConfig(flush="none"), create=True), env.qs,
              clock=lambda: env.now, store=env.store)
    pipeline = Pipeline(env.lm, {"/": v}, NoPopGroups(), v.service.timers, v.messages, lambda: env.now,
                        later=at_end.append)
    v.open_queue("q")
    v.router.bind("amq.topic", "q", "fleet.#")
    c = Consumer("c", owner="sub")
    v.consume("q", c)
    for device in ("d1", "d2", "d3"):  # three connections' reads in one turn
        pipeline.publish(v, [msg(device.encode(), exchange="amq.topic", routing_key=f"fleet.{device}")],
                         dispatch_later=True)
    assert c.got == [] and len(at_end) == 1  # one end-of-turn dispatch asked for, nothing delivered yet
    at_end.pop()()
    assert [d.message.value for d in c.got] == [b"d1", b"d2", b"d3"]
    pipeline.publish(v, [msg(b"d4", exchange="amq.topic", routing_key="fleet.d4")])  # the default: dispatched at once
    assert [d.message.value for d in c.got][-1] == b"d4" and at_end == []
