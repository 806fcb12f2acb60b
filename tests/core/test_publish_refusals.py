"""A property over publishing into the queue model on a temp dir with real RocksDB: any mix
of accepted and refused publishes across queues leaves every queue holding exactly the
accepted messages, in publish order, before and after a restart.

Refusals come from everywhere a publish can be refused below a gateway: the log (a record
over its topic's max.message.bytes; a partition that is closed), the router (a missing
exchange: publish raises, publish_many stops at it), and a queue (x-max-length with
x-overflow reject-publish refuses for itself only; the other queues still take the
message, as RabbitMQ). Publishes go one at a time (``publish``) or as the runs of one
client read (``publish_many``), where a refused record must not take its neighbours down.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from logbus.core.log import LogManager, TopicConfig
from logbus.core.message import Envelope, Message
from logbus.core.queues.journal import QueueStore
from logbus.core.routing.router import NotFound
from logbus.core.state import StateStore
from logbus.core.vhost import VHost
from logbus.gateway.amqp.model.forms import AMQP_FORMS
from tests.core.amqp_terms import AmqpTerms
from tests.loop import LoopReactor

QUEUES = ("q0", "q1", "q2", "capped")
CAP = 3  # capped: x-max-length, reject-publish
SMALL_MAX = 400  # the "small" exchange's topic: max.message.bytes
# exchange -> queues it routes to (fanout); "missing" is never declared
ROUTES = {"ok": ("q0", "q1", "capped"), "small": ("q1", "q2"), "shut": ("q0", "q2", "capped"),
          "other": ("q2",)}
EXCHANGES = (*ROUTES, "missing")


class World:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.loop = LoopReactor()
        self.open()

    def _create(self, topic: str) -> Any:
        return self.lm.open_topic(topic, TopicConfig(flush="none"), create=True)

    def open(self, restart: bool = False) -> None:
        self.lm = LogManager(self.tmp, self.loop)
        if restart:
            for d in sorted(p.name for p in (self.tmp / "log").iterdir() if p.is_dir()):
                self.lm.open_topic(d, TopicConfig(flush="none"))
        self.store = StateStore(self.tmp / "state")
        self.qs = QueueStore(self.store)
        self.v = AmqpTerms(VHost("/", self.lm, self._create, self.qs, clock=lambda: 1_000_000, store=self.store,
                                 forms=AMQP_FORMS))
        self.v.load()

    def restart(self) -> None:
        self.settle()
        self.qs.commit()
        self.lm.close()
        self.store.close()
        self.open(restart=True)

    def settle(self) -> None:
        while self.loop.run_once():
            pass

    def queue_bodies(self, name: str) -> list[bytes]:
        q = self.v.queue(name).queue
        return [self.v.messages.get(e.topic, e.partition, e.offset).value or b""
                for e in sorted(q.entries.values(), key=lambda e: e.seq)]


def message(body: bytes) -> Message:
    return Message(None, body, None, [], Envelope())


items = st.tuples(st.sampled_from(EXCHANGES), st.booleans())  # (exchange, large body)
reads = st.lists(st.tuples(st.booleans(), st.lists(items, min_size=1, max_size=6)), min_size=1, max_size=8)


@settings(max_examples=60)
@given(reads=reads)
def test_queues_hold_exactly_the_accepted_publishes(reads: list[tuple[bool, list[tuple[str, bool]]]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        w = World(Path(tmp))
        try:
            run(w, reads)
        finally:
            w.settle()
            w.lm.close()
            w.store.close()


def run(w: World, reads: list[tuple[bool, list[tuple[str, bool]]]]) -> None:
    v = w.v
    w.lm.open_topic("small", TopicConfig(flush="none", max_message_bytes=SMALL_MAX), create=True)
    for name in ROUTES:
        v.declare_exchange(name, "fanout", durable=True)
    for name in QUEUES:
        args = {"x-max-length": CAP, "x-overflow": "reject-publish"} if name == "capped" else None
        v.declare_queue(name, durable=True, arguments=args)
    for ex, queues in ROUTES.items():
        for q in queues:
            v.bind(ex, q)
    w.lm.partition("shut", 0).close()  # every append to it is refused from now on

    expected: dict[str, list[bytes]] = {q: [] for q in QUEUES}
    n = 0

    def body(large: bool) -> bytes:
        return (b"L%d-" % n) + b"x" * (SMALL_MAX + 100 if large else 20)

    def accept(ex: str, b: bytes) -> None:
        if ex == "shut" or (ex == "small" and len(b) > SMALL_MAX - 100):
            return  # refused by the log: in no queue
        for q in ROUTES[ex]:
            if q != "capped" or len(expected[q]) < CAP:
                expected[q].append(b)

    for batched, batch in reads:
        if batched:
            run_items = []
            for ex, large in batch:
                n += 1
                m = message(body(large))
                m.envelope.exchange = ex
                run_items.append(m)
            out = v.pipeline.publish(v.vhost, run_items)
            stop = next((i for i, (ex, _) in enumerate(batch) if ex == "missing"), len(batch))
            assert out.done == stop and (out.error is not None) == (stop < len(batch))
            for m in run_items[:stop]:
                accept(m.envelope.exchange, m.value or b"")
        else:
            for ex, large in batch:
                n += 1
                b = body(large)
                try:
                    v.publish(ex, "", message(b))
                except NotFound:
                    assert ex == "missing"
                    continue
                accept(ex, b)
        w.settle()

    for q in QUEUES:
        assert w.queue_bodies(q) == expected[q], q
    w.restart()
    for q in QUEUES:
        assert w.queue_bodies(q) == expected[q], ("after restart", q)
