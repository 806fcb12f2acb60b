"""The MQTT connection (gateway/mqtt/protocol.py around machine.py) on a real broker in a temp
dir, driven without sockets (Twisted's StringTransport), against a simple model: one
MQTT 5 client that subscribes, unsubscribes, publishes to itself at each QoS, pings and
acknowledges, and sometimes breaks the protocol. The model says what must come back:
one answer per packet, PUBACK/PUBREC in the order of the PUBLISHes, one copy of each
message per matching session at the highest matching QoS, nothing after a protocol error
but the DISCONNECT."""

from __future__ import annotations

import gc
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from logbus.core.broker import Broker
from logbus.gateway.amqp.model.forms import AMQP_FORMS
from logbus.gateway.mqtt import (
    ConnAck, Connect, Decoder, Disconnect, PingReq, PingResp, PubAck, PubComp, Publish, PubRec, PubRel, SubAck,
    Subscribe, Subscription, UnsubAck, Unsubscribe, encode,
)  # fmt: skip
from logbus.gateway.mqtt.protocol import MqttFactory, MqttProtocol
from logbus.gateway.mqtt.subscriptions import matches
from tests.loop import LoopReactor

TOPICS = ["a/b", "a/c", "x", "$sys/t"]
FILTERS = ["a/b", "a/+", "#", "x", "+/c", "$sys/#"]


class Client:
    def __init__(self, factory: MqttFactory, loop: LoopReactor) -> None:
        self.loop = loop
        self.protocol: MqttProtocol = factory.buildProtocol(None)
        self.transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 50000))
        self.protocol.makeConnection(self.transport)
        self.decoder = Decoder(version=5)

        self.seen: list[Any] = []

    def send(self, packet: Any) -> None:
        self.protocol.dataReceived(encode(packet, 5))

    def received(self) -> list[Any]:
        data = self.transport.value()
        self.transport.clear()
        return self.decoder.feed(data)

    def received_all(self) -> list[Any]:
        """What came since the last call, also kept in ``seen``."""
        got = self.received()
        self.seen += got
        return self.seen

    def drop(self) -> None:
        self.protocol.connectionLost()


class MqttSessionMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self._dir = tempfile.TemporaryDirectory()
        self.loop = LoopReactor()
        self.broker = Broker(Path(self._dir.name), reactor=self.loop, forms=AMQP_FORMS)
        self.broker.start()
        b = self.broker
        self.factory = MqttFactory(b.doors, b.queue_model, b.sessions, b.metrics, self.loop, properties=b.forms.properties)
        self.factory.startFactory()
        self.client: Client | None = None
        self.subs: dict[str, int] = {}  # the model: filter -> maximum QoS
        self.next_id = 1
        self.expected: list[tuple[str, bytes, int]] = []  # messages to us not yet seen
        self.payloads = 0

    def teardown(self) -> None:
        if getattr(self, "broker", None) is not None:
            if self.client is not None:
                self.client.drop()
            self.factory.stopFactory()
            self.loop.wait(self.broker.stop())
            self._dir.cleanup()

    def _pid(self) -> int:
        pid = self.next_id
        self.next_id = self.next_id % 65535 + 1
        return pid

    def _settle(self) -> list[Any]:
        """Run the loop until every publish is durable, answering deliveries as a client
        does; what came back (deliveries checked against the model here)."""
        assert self.client is not None
        out: list[Any] = []
        for _ in range(200):
            self.loop.run_once(block=0.005)
            got = self.client.received()
            for p in got:
                if isinstance(p, Publish):
                    self._delivered(p)
                elif isinstance(p, PubRel):
                    self.client.send(PubComp(p.packet_id))
                else:
                    out.append(p)
            if not got and not self.client.protocol.machine.answers_waiting and not self.client.protocol.machine.out:
                break
        return out

    def _delivered(self, p: Publish) -> None:
        assert self.client is not None
        want = self.expected.pop(0)
        assert (p.topic, p.payload, p.qos) == want
        if p.qos == 1:
            self.client.send(PubAck(p.packet_id))
        elif p.qos == 2:
            self.client.send(PubRec(p.packet_id))

    @precondition(lambda self: self.client is None)
    @rule()
    def connect(self) -> None:
        self.client = Client(self.factory, self.loop)
        self.client.send(Connect("model", 5, clean_start=True, keep_alive=0))
        [ack] = self._settle()
        assert isinstance(ack, ConnAck) and (ack.session_present, ack.reason_code) == (False, 0)
        self.subs.clear()

    @precondition(lambda self: self.client is not None)
    @rule(f=st.sampled_from(FILTERS), qos=st.integers(0, 2))
    def subscribe(self, f: str, qos: int) -> None:
        assert self.client is not None
        pid = self._pid()
        self.client.send(Subscribe(pid, (Subscription(f, qos),)))
        self.subs[f] = qos
        assert self._settle() == [SubAck(pid, (qos,))]

    @precondition(lambda self: self.client is not None)
    @rule(f=st.sampled_from(FILTERS))
    def unsubscribe(self, f: str) -> None:
        assert self.client is not None
        pid = self._pid()
        self.client.send(Unsubscribe(pid, (f,)))
        code = 0 if self.subs.pop(f, None) is not None else 0x11
        assert self._settle() == [UnsubAck(pid, (code,))]

    @precondition(lambda self: self.client is not None)
    @rule(topic=st.sampled_from(TOPICS), qos=st.integers(0, 2), n=st.integers(1, 3))
    def publish(self, topic: str, qos: int, n: int) -> None:
        assert self.client is not None
        data = b""
        sent = []
        for _ in range(n):  # several in one read: published together
            self.payloads += 1
            payload = str(self.payloads).encode()
            pid = self._pid() if qos else 0
            data += encode(Publish(topic, payload, qos, packet_id=pid), 5)
            sent.append(pid)
            granted = [q for f, q in self.subs.items() if matches(f, topic)]
            if granted:
                self.expected.append((topic, payload, min(qos, max(granted))))
        self.client.protocol.dataReceived(data)
        out = self._settle()
        answers = [p for p in out if isinstance(p, (PubAck, PubRec))]
        if qos:
            assert [p.packet_id for p in answers] == sent  # in the order they came
            assert all(p.reason_code in (0, 0x10) for p in answers)
            if qos == 2:
                for pid in sent:
                    self.client.send(PubRel(pid))
                assert self._settle() == [PubComp(pid) for pid in sent]
        else:
            assert answers == []

    @precondition(lambda self: self.client is not None)
    @rule()
    def ping(self) -> None:
        assert self.client is not None
        self.client.send(PingReq())
        assert self._settle() == [PingResp()]

    @precondition(lambda self: self.client is not None)
    @rule(bad=st.sampled_from(["connect", "connack"]))
    def break_the_protocol(self, bad: str) -> None:
        assert self.client is not None
        self.client.send(Connect("again", 5) if bad == "connect" else ConnAck())
        out = self._settle()
        assert len(out) == 1 and isinstance(out[0], Disconnect) and out[0].reason_code == 0x82
        assert self.client.transport.disconnecting
        self.client.drop()
        self.client = None
        self.expected.clear()

    @precondition(lambda self: self.client is not None)
    @rule()
    def disconnect(self) -> None:
        assert self.client is not None
        self.client.send(Disconnect())
        assert self._settle() == []
        assert self.client.transport.disconnecting
        self.client.drop()
        self.client = None

    @invariant()
    def nothing_owed(self) -> None:
        if getattr(self, "client", None) is not None:
            assert self.expected == [], f"never delivered: {self.expected}"


MqttSessionMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=20, deadline=None,
                                                suppress_health_check=[HealthCheck.too_slow])
test_mqtt_session_against_a_model = MqttSessionMachine.TestCase


@contextmanager
def _gateway(path: Path) -> Iterator[tuple[LoopReactor, Broker, MqttFactory]]:
    """A started broker on ``path`` with the MQTT gateway over it; both stopped after."""
    loop = LoopReactor()
    broker = Broker(path, reactor=loop, forms=AMQP_FORMS)
    broker.start()
    factory = MqttFactory(broker.doors, broker.queue_model, broker.sessions, broker.metrics, loop,
                          properties=broker.forms.properties)
    factory.startFactory()
    try:
        yield loop, broker, factory
    finally:
        factory.stopFactory()
        loop.wait(broker.stop())


def test_a_pubrec_settles_durably_before_the_pubrel_goes_out(tmp_path: Path) -> None:
    """Outgoing QoS 2: when the PUBREL is written, the entry's settlement is in the state
    store already (not at the end of the turn): a kill -9 right after the client saw the
    PUBREL must not bring the message back as a new PUBLISH."""
    from logbus.core.state import queue_entries_prefix
    from logbus.gateway.mqtt import Properties

    with _gateway(tmp_path) as (loop, broker, factory):
        sub = Client(factory, loop)
        sub.send(Connect("keeper", 5, clean_start=False, properties=Properties(session_expiry_interval=600)))
        sub.send(Subscribe(1, (Subscription("t/#", 2),)))
        pub = Client(factory, loop)
        pub.send(Connect("pub", 5))
        pub.send(Publish("t/x", b"once", 2, packet_id=9))
        loop.run_until(lambda: any(isinstance(p, Publish) for p in sub.received_all()))
        delivered = next(p for p in sub.seen if isinstance(p, Publish))
        queue = factory.room.sessions["keeper"].queue
        prefix = queue_entries_prefix("/", queue)
        loop.run_until(lambda: not broker.queue_store.pending)
        assert broker.state is not None and list(broker.state.scan_prefix("queues", prefix))  # journaled
        sub.send(PubRec(delivered.packet_id))
        assert [p for p in sub.received_all() if isinstance(p, PubRel)]  # written...
        assert list(broker.state.scan_prefix("queues", prefix)) == []  # ...after the settlement is stored
        sub.drop()
        pub.drop()


def test_a_restored_qos2_message_whose_entry_is_gone_is_released(tmp_path: Path) -> None:
    """After a crash between a PUBREC's settlement and its session record: the record
    still names the message, its entry is gone; reconnecting sends only the PUBREL."""
    from logbus.core.queues.service import QueueSettings
    from logbus.gateway.mqtt import Properties
    from logbus.gateway.mqtt.session import Session

    with _gateway(tmp_path) as (loop, broker, factory):
        room = factory.room
        s = Session("gone", "mqtt-session:gone", version=5, expiry=600)
        s.restored[("mqtt-session:gone", 7)] = (5, 2)  # its queue holds no entry 7
        s.restored[("mqtt-session:gone", 8)] = (6, 1)  # QoS 1: nothing to release
        vhost = broker.vhost("/")
        assert vhost is not None
        vhost.service.create(s.queue, QueueSettings(), durable=True)
        vhost.router.add_queue(s.queue)
        room.sessions["gone"] = s
        assert room.released_gone(s) == [5]
        assert s.outbound.in_flight[5].state == "released" and ("mqtt-session:gone", 8) in s.restored
        c = Client(factory, loop)
        c.send(Connect("gone", 5, clean_start=False, properties=Properties(session_expiry_interval=600)))
        got = c.received_all()
        assert [p.packet_id for p in got if isinstance(p, PubRel)] == [5]
        c.drop()


def test_an_offline_session_holds_no_table_its_connection_grew(tmp_path: Path) -> None:
    """A kept session whose connection ends: its in-flight table is made anew at the
    size of what is left and its remembered copies go (issue 30: a thousand offline
    sessions each held the tables of their last connection)."""
    import sys

    from logbus.gateway.mqtt import Properties

    with _gateway(tmp_path) as (loop, broker, factory):
        sub = Client(factory, loop)
        sub.send(Connect("keeper", 5, clean_start=False, properties=Properties(session_expiry_interval=600)))
        sub.send(Subscribe(1, (Subscription("t/#", 1), Subscription("u/#", 1))))  # two: copies kept per topic
        pub = Client(factory, loop)
        pub.send(Connect("pub", 5))
        for i in range(30):
            pub.send(Publish("t/x", b"m%d" % i, 1, packet_id=i + 1))
        loop.run_until(lambda: sum(isinstance(p, Publish) for p in sub.received_all()) >= 20)
        s = factory.room.sessions["keeper"]
        grown = sys.getsizeof(s.outbound.in_flight)
        assert len(s.outbound.in_flight) >= 20 and s.subscriptions._copies
        sub.drop()
        assert not s.outbound.in_flight and sys.getsizeof(s.outbound.in_flight) < grown
        assert not s.subscriptions._copies
        pub.drop()


@pytest.mark.pure_only  # counts the calls by replacing MqttRoom.publish_many (compiled)
def test_the_publishes_of_a_turn_are_published_together(tmp_path: Path) -> None:
    """Decision 0033: what every connection read in one turn is published by one
    ``publish_many`` at its end, and each publisher gets its own PUBACKs, in its order."""
    with _gateway(tmp_path) as (loop, broker, factory):
        sub = Client(factory, loop)
        sub.send(Connect("sub", 5))
        sub.send(Subscribe(1, (Subscription("fleet/#", 1),)))
        pubs = [Client(factory, loop) for _ in range(3)]
        for i, p in enumerate(pubs):
            p.send(Connect(f"d{i}", 5))
        loop.run_until(lambda: all(any(isinstance(x, ConnAck) for x in c.received_all()) for c in [sub, *pubs]))
        calls: list[int] = []
        publish_many = factory.room.publish_many

        def counted(items: Any, *args: Any) -> Any:
            calls.append(len(items))
            return publish_many(items, *args)

        factory.room.publish_many = counted  # type: ignore[method-assign]
        pubs[0].protocol.dataReceived(encode(Publish("fleet/0", b"a0", 1, packet_id=1), 5)
                                      + encode(Publish("fleet/0", b"b0", 1, packet_id=2), 5))
        for i, p in enumerate(pubs[1:], 1):  # three reads in one turn
            p.send(Publish(f"fleet/{i}", b"a%d" % i, 1, packet_id=1))
        assert calls == []  # not before the end of the turn
        loop.run_until(lambda: all(sum(isinstance(x, PubAck) for x in p.received_all()) >= (2 if i == 0 else 1)
                                   for i, p in enumerate(pubs)))
        assert calls == [4]
        assert [x.packet_id for x in pubs[0].seen if isinstance(x, PubAck)] == [1, 2]
        loop.run_until(lambda: sum(isinstance(x, Publish) for x in sub.received_all()) == 4)
        got = [x.payload for x in sub.seen if isinstance(x, Publish)]
        assert sorted(got) == [b"a0", b"a1", b"a2", b"b0"] and got.index(b"a0") < got.index(b"b0")


def test_a_subscribe_after_a_publish_in_one_read_comes_after_it(tmp_path: Path) -> None:
    """A read's PUBLISH waits for the end of the turn; the SUBSCRIBE read after it waits
    with it, so the message, published before the subscription existed, does not come
    back (as Mosquitto handles the two in order; the PUBACK itself waits for the sync, so
    it may come after the SUBACK)."""
    with _gateway(tmp_path) as (loop, broker, factory):
        c = Client(factory, loop)
        c.send(Connect("c", 5))
        loop.run_until(lambda: any(isinstance(x, ConnAck) for x in c.received_all()))
        c.protocol.dataReceived(encode(Publish("t/x", b"before", 1, packet_id=1), 5)
                                + encode(Subscribe(2, (Subscription("t/#", 1),)), 5))
        loop.run_until(lambda: any(isinstance(x, SubAck) for x in c.received_all())
                       and any(isinstance(x, PubAck) for x in c.seen))
        c.send(Publish("t/x", b"after", 1, packet_id=3))
        loop.run_until(lambda: any(isinstance(x, Publish) for x in c.received_all()))
        assert [x.payload for x in c.seen if isinstance(x, Publish)] == [b"after"]


def test_publishes_and_deliveries_leave_no_cyclic_garbage(tmp_path: Path) -> None:
    """Decision 0053: the per-message path makes no reference cycles. A cycle per turn (a
    closure compiled by mypyc and the environment it closes over refer to each other)
    kept every turn's publishes alive until a collection, which then came every few
    hundred messages and stalled the reactor for milliseconds. With the collector off,
    QoS 1 publishes, their deliveries and both sides' acks, and a collection must find
    (almost) nothing."""
    with _gateway(tmp_path) as (loop, broker, factory):
        sub = Client(factory, loop)
        sub.send(Connect("sub", 5))
        sub.send(Subscribe(1, (Subscription("fleet/#", 1),)))
        pub = Client(factory, loop)
        pub.send(Connect("dev", 5))
        loop.run_until(lambda: all(any(isinstance(x, ConnAck) for x in c.received_all()) for c in [sub, pub]))

        def burst(first: int, n: int) -> None:
            for i in range(first, first + n):
                pub.send(Publish("fleet/1", b"m%d" % i, 1, packet_id=i % 65535 + 1))
                loop.run_until(lambda: any(isinstance(x, PubAck) for x in pub.received()))
            for _ in range(100):
                loop.run_once(block=0.001)
                got = [x for x in sub.received() if isinstance(x, Publish)]
                for p in got:
                    sub.send(PubAck(p.packet_id))
                if not got and not sub.protocol.machine.out:
                    break

        burst(0, 50)  # caches and first-use objects made before the count
        gc.collect()
        gc.disable()
        try:
            burst(50, 200)
            found = gc.collect()
        finally:
            gc.enable()
        assert found < 50, f"{found} objects in reference cycles after 200 messages"
