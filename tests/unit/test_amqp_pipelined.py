"""Publishes that arrive together are handled together (``Channel.publish_many``,
``VHost.publish_many``): sans I/O, over a real broker on a temp dir. Whatever a client
sends, handling a read of many publishes at once must come to what handling them one
read at a time (in the same reactor turn) does: the same messages in the same queues in the same order, the same
publishes confirmed, nacked and returned, the same channel error at the same publish.
Hypothesis draws the publishes; a few named cases pin the edges down."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import body, frame, header
from pamqp import commands as C

from logbus.gateway.amqp.model.forms import AMQP_FORMS
from logbus.core.broker import Broker
from logbus.core.log import TopicConfig
from logbus.gateway.amqp.session import Session
from tests.core.amqp_terms import AmqpTerms
from tests.loop import LoopReactor

HEADER = b"AMQP\x00\x00\x09\x01"
_names = itertools.count()


class Client:
    """One connection with channel 1 open in confirm mode, fed raw frames."""

    def __init__(self, broker: Broker, loop: LoopReactor, user: str = "guest", password: str = "guest") -> None:
        self.loop = loop
        self.broker = broker
        self.out: list[bytes] = []
        self.conn = Session(broker.doors, broker.queue_model, send=self.out.append, close=lambda: None,
                            reading=lambda on: None, reactor=loop, peer_is_loopback=True, peer="test")
        self.feed(HEADER, frame.marshal(C.Connection.StartOk({}, "PLAIN", f"\0{user}\0{password}"), 0),
                  frame.marshal(C.Connection.TuneOk(2047, 131072, 0), 0),
                  frame.marshal(C.Connection.Open("/"), 0))
        for ch in (1, 2):
            self.feed(frame.marshal(C.Channel.Open(), ch), frame.marshal(C.Confirm.Select(), ch))
        assert not any(isinstance(m, C.Connection.Close) for _, m in self.methods())

    def feed(self, *chunks: bytes) -> None:
        for data in chunks:
            self.conn.data_received(data)
        self.settle()

    def settle(self) -> None:
        self.loop.run_until(lambda: self.broker.password_worker.pending == 0)  # a login's check
        while self.loop.run_once():
            pass

    def methods(self) -> list[tuple[int, Any]]:
        data = b"".join(self.out)
        self.out.clear()
        found = []
        while data:
            used, channel, f = frame.unmarshal(data)
            data = data[used:]
            found.append((channel, f))
        return found

    def close(self) -> None:
        self.conn.connection_lost()
        self.settle()


def publish_frames(channel: int, exchange: str, routing_key: str, payload: bytes, *,
                   mandatory: bool = False, headers: dict[str, Any] | None = None) -> bytes:
    props = C.Basic.Properties(delivery_mode=2, headers=headers)
    return (frame.marshal(C.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory), channel)
            + frame.marshal(header.ContentHeader(0, len(payload), props), channel)
            + frame.marshal(body.ContentBody(payload), channel))


def outcome(methods: list[tuple[int, Any]], roles: dict[str, str] | None = None) -> dict[str, Any]:
    """What the client was told, per channel: seqs acked (multiple expanded), nacked,
    returns (exchange, routing key, code) in order, and a channel close. ``roles``
    names the exchanges and queues of one topology by role."""
    roles = roles or {}
    told: dict[int, dict[str, Any]] = {}
    for channel, m in methods:
        t = told.setdefault(channel, {"acked": set(), "nacked": set(), "returned": [], "closed": None})
        if isinstance(m, C.Basic.Ack):
            upto = m.delivery_tag
            low = 1 if m.multiple else upto
            t["acked"] |= {s for s in range(low, upto + 1) if s not in t["nacked"]}
        elif isinstance(m, C.Basic.Nack):
            t["nacked"].add(m.delivery_tag)
            t["acked"].discard(m.delivery_tag)
        elif isinstance(m, C.Basic.Return):
            t["returned"].append((roles.get(m.exchange, m.exchange), roles.get(m.routing_key, m.routing_key),
                                  m.reply_code))
        elif isinstance(m, C.Channel.Close):
            t["closed"] = (m.reply_code, m.class_id, m.method_id)
    return told


class Env:
    def __init__(self, tmp: Path) -> None:
        self.loop = LoopReactor()
        self.broker = Broker(tmp, reactor=self.loop, forms=AMQP_FORMS, topic_defaults=TopicConfig(flush="none"))
        self.broker.start()
        self.vhost = self.broker.vhosts["/"]

    def bodies(self, queue: str) -> list[bytes]:
        """The queue's messages, in the order a consumer would get them."""
        q = self.vhost.queues[queue].queue
        return [self.vhost.messages.get(e.topic, e.partition, e.offset).value
                for e in sorted(q.entries.values(), key=lambda e: e.seq)]

    def close(self) -> None:
        self.broker.stop()
        while self.loop.run_once():
            pass


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    e = Env(tmp_path_factory.mktemp("pipelined"))
    yield e
    e.close()


def setup_topology(env: Env) -> dict[str, str]:
    """Fresh names: a direct exchange with queues 'a' (routing key a) and 'b'
    (b), a headers exchange to queue 'h' (x-match any, color=red), a queue 'small'
    (x-max-length 2, reject-publish) bound to the direct exchange with key s."""
    n = next(_names)
    names = {k: f"{k}{n}" for k in ("ex", "hx", "a", "b", "h", "small")}
    v = AmqpTerms(env.vhost)
    v.declare_exchange(names["ex"], "direct")
    v.declare_exchange(names["hx"], "headers")
    for q in ("a", "b", "h"):
        v.declare_queue(names[q])
    v.declare_queue(names["small"], arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    v.bind(names["ex"], names["a"], "a")
    v.bind(names["ex"], names["b"], "b")
    v.bind(names["ex"], names["small"], "s")
    v.bind(names["hx"], names["h"], "", arguments={"x-match": "any", "color": "red"})
    return names


# One publish: (channel, exchange role, routing key, mandatory, headers)
publishes = st.tuples(
    st.sampled_from([1, 1, 1, 2]),
    st.sampled_from(["ex", "ex", "hx", "hx", "", "missing"]),
    st.sampled_from(["a", "b", "s", "zz"]),
    st.booleans(),
    st.sampled_from([None, {"color": "red"}, {"color": "blue"}]),
)


def frames_of(names: dict[str, str], ops: list[tuple[Any, ...]]) -> list[bytes]:
    out = []
    for i, (channel, role, key, mandatory, headers) in enumerate(ops):
        exchange = {"ex": names["ex"], "hx": names["hx"], "": "", "missing": f"nosuch{names['ex']}"}[role]
        if role == "hx":
            key = ""  # a headers exchange ignores it: publishes differ by headers alone
        elif role == "" and key in ("a", "b", "s"):
            key = names[{"a": "a", "b": "b", "s": "small"}[key]]
        out.append(publish_frames(channel, exchange, key, b"m%d" % i, mandatory=mandatory, headers=headers))
    return out


def run(env: Env, ops: list[tuple[Any, ...]], together: bool) -> tuple[dict[str, Any], dict[str, list[bytes]]]:
    names = setup_topology(env)
    c = Client(env.broker, env.loop)
    c.methods()
    frames = frames_of(names, ops)
    if together:
        c.feed(b"".join(frames))
    else:
        c.feed(*frames)  # one read per publish, in the same reactor turn
    told = outcome(c.methods(), {v: k for k, v in names.items()})
    c.close()
    return told, {q: env.bodies(names[q]) for q in ("a", "b", "h", "small")}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(publishes, min_size=1, max_size=12))
def test_one_read_equals_one_read_each(env: Env, ops: list[tuple[Any, ...]]) -> None:
    assert run(env, ops, together=True) == run(env, ops, together=False)


def test_a_run_is_one_append_and_one_ack(env: Env) -> None:
    names = setup_topology(env)
    c = Client(env.broker, env.loop)
    c.methods()
    p = env.vhost.log.partition(env.vhost.router.exchange(names["ex"]).log_topic, 0)
    before = p.next_offset
    c.feed(b"".join(publish_frames(1, names["ex"], "a", b"m%d" % i) for i in range(50)))
    acks = [m for _, m in c.methods() if isinstance(m, C.Basic.Ack)]
    assert [(a.delivery_tag, a.multiple) for a in acks] == [(50, True)]
    assert env.bodies(names["a"]) == [b"m%d" % i for i in range(50)]
    assert p.next_offset == before + 50
    assert [e.offset for e in env.vhost.queues[names["a"]].queue.entries.values()] == list(range(before, before + 50))
    c.close()


def test_missing_exchange_mid_run_publishes_those_before_it(env: Env) -> None:
    names = setup_topology(env)
    c = Client(env.broker, env.loop)
    c.methods()
    frames = [publish_frames(1, names["ex"], "a", b"m%d" % i) for i in range(3)]
    frames.append(publish_frames(1, "nosuch", "a", b"lost"))
    frames += [publish_frames(1, names["ex"], "a", b"after%d" % i) for i in range(3)]
    c.feed(b"".join(frames))
    told = outcome(c.methods())[1]
    # The channel closed before the three were durable: no confirms, as for a channel
    # closed with confirms outstanding; they are in the queue all the same.
    assert told["acked"] == set()
    assert told["closed"] == (404, 60, 40)
    assert env.bodies(names["a"]) == [b"m0", b"m1", b"m2"]
    c.close()


def test_reject_publish_mid_run_nacks_exactly_the_refused(env: Env) -> None:
    names = setup_topology(env)
    c = Client(env.broker, env.loop)
    c.methods()
    c.feed(b"".join(publish_frames(1, names["ex"], "s", b"m%d" % i) for i in range(4))
           + publish_frames(1, names["ex"], "a", b"m4"))
    told = outcome(c.methods())[1]
    assert (told["acked"], told["nacked"]) == ({1, 2, 5}, {3, 4})
    assert env.bodies(names["small"]) == [b"m0", b"m1"]
    c.close()


def test_write_denied_mid_run(env: Env) -> None:
    names = setup_topology(env)
    access = env.broker.access
    access.put_user("writer", password="pw")
    access.set_permission("writer", "/", "", f"^{names['ex']}$", "")
    c = Client(env.broker, env.loop, "writer", "pw")
    c.methods()
    c.feed(publish_frames(1, names["ex"], "a", b"m0") + publish_frames(1, names["ex"], "b", b"m1")
           + publish_frames(1, names["hx"], "", b"m2") + publish_frames(1, names["ex"], "a", b"m3"))
    told = outcome(c.methods())[1]
    assert told["acked"] == set()  # closed before they were durable, as above
    assert told["closed"] == (403, 60, 40)
    assert (env.bodies(names["a"]), env.bodies(names["b"])) == ([b"m0"], [b"m1"])
    c.close()


def deliveries_and_close(methods: list[tuple[int, Any]]) -> list[Any]:
    return [(m.delivery_tag, m.redelivered) if isinstance(m, C.Basic.Deliver) else
            ("closed", m.reply_code, m.method_id) for _, m in methods
            if isinstance(m, (C.Basic.Deliver, C.Channel.Close))]


def consume_then_ack(env: Env, acks: list[tuple[int, bool]], together: bool) -> tuple[Any, ...]:
    """20 messages, a consumer with prefetch 5 on channel 1, then ``acks`` as (tag, multiple)."""
    names = setup_topology(env)
    c = Client(env.broker, env.loop)
    c.feed(b"".join(publish_frames(2, names["ex"], "a", b"m%d" % i) for i in range(20)))
    c.feed(frame.marshal(C.Basic.Qos(prefetch_count=5), 1),
           frame.marshal(C.Basic.Consume(queue=names["a"], consumer_tag="c"), 1))
    c.methods()
    frames = [frame.marshal(C.Basic.Ack(delivery_tag=tag, multiple=multiple), 1) for tag, multiple in acks]
    if together:
        c.feed(b"".join(frames))
    else:
        c.feed(*frames)
    seen = deliveries_and_close(c.methods())
    q = env.vhost.queues[names["a"]].queue
    state = (q.ready_count, len(q.leases), sorted(q.entries))
    c.close()
    return seen, state


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()) | st.just((99, False)), min_size=1, max_size=10))
def test_acks_in_one_read_equal_one_read_each(env: Env, acks: list[tuple[int, bool]]) -> None:
    """The acks a client can send in one read: tags delivered before it (1 to 5), 0 with
    multiple (all outstanding), and an unknown tag. One read at a time would also take
    a tag delivered while the read is handled (as 99 with multiple would); no client
    can mean one, as it has not seen it."""
    assert consume_then_ack(env, acks, together=True) == consume_then_ack(env, acks, together=False)


def test_acks_in_one_read_deliver_the_next_ones(env: Env) -> None:
    seen, (ready, leased, _) = consume_then_ack(env, [(1, False), (2, False), (4, True)], together=True)
    assert seen == [(t, False) for t in range(6, 10)]
    assert (ready, leased) == (11, 5)
