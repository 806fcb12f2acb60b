"""The MQTT session machine (gateway/mqtt/machine.py), sans I/O: no broker, no reactor,
no Twisted. An in-memory shell here answers the machine's questions from plain data and
carries out its requests against a toy room (sessions, retained messages, a list of what
was published); a ``Client`` speaks to it as an MQTT client does, through the codec's
client side (packets encoded with ``encode``, the server's bytes read back with a
``Decoder`` given the version). Hypothesis drives every (state, packet type) pair, in
3.1.1 and 5.0: a pair ``TRANSITIONS`` lacks closes the connection with 0x82 (a 5.0
client is told with DISCONNECT, or CONNACK before its CONNECT is accepted; a 3.1.1
client is just closed), a pair it has never does. The QoS flows are in
test_mqtt_machine_qos.py."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbus.core.message import Message
from logbus.core.queues.queue import Receipt
from logbus.gateway.mqtt.connect import ServerLimits
from logbus.gateway.mqtt.decoder import Decoder
from logbus.gateway.mqtt.encoder import encode
from logbus.gateway.mqtt import reasons as R
from logbus.gateway.mqtt.machine import TRANSITIONS, Machine, UnexpectedPacket
from logbus.gateway.mqtt.packets import (
    Auth, ConnAck, Connect, Disconnect, Packet, PingReq, PingResp, PubAck, PubComp, Publish, PubRec, PubRel,
    SubAck, Subscribe, Subscription, UnsubAck, Unsubscribe, Will,
)  # fmt: skip
from logbus.gateway.mqtt.properties import Properties
from logbus.gateway.mqtt.reasons import LocalProtocolError
from logbus.gateway.mqtt.requests import (
    AddSubscriptions, ArmKeepAlive, Close, Consume, Detach, Dispatch, Login, MatchRetained, PublishBatch,
    QuickAck, RemoveSubscriptions, Retain, SaveSession, SetReading, Settle,
)  # fmt: skip
from logbus.gateway.mqtt.session import Session
from logbus.gateway.mqtt.states import State
from logbus.gateway.mqtt.wire import MQTT_5, PUBACK, PUBCOMP, PUBREC, PUBREL
from tests.unit import mqtt_strategies as S

NOW_MS = 1_700_000_000_000


class AllowAll:
    def may_publish(self, routing_key: str) -> bool:
        return True

    def may_subscribe(self, topic_filter: str) -> bool:
        return True


@dataclass
class Entry:
    topic: str = "amq.topic"
    deliveries: int = 1


@dataclass
class Delivery:
    """What the queue service hands a consumer (core.queues.service.Delivery's fields)."""

    queue: str
    entry: Entry
    message: Message
    receipt: Receipt


class Shell:
    """One connection's machine with its shell; ``auto_durable``: every publish batch is
    durable as soon as it is appended (else ``durable`` says when)."""

    def __init__(self, *, limits: ServerLimits = ServerLimits(), access: Any = None, expiry: int | None = None,
                 auto_durable: bool = True, refuse: tuple[int, str] | None = None) -> None:
        self.machine = Machine(limits=limits, clock=lambda: NOW_MS, new_client_id=lambda: "assigned-1",
                               peer="test")
        self.access = access or AllowAll()
        self.refuse = refuse  # the login's refusal
        self.expiry = expiry  # the session's, when attached (None: the CONNECT's)
        self.auto_durable = auto_durable
        self.requests: list[Any] = []  # every request handed out, in order
        self.batches: list[list[Any]] = []  # the publish batches, not yet durable
        self.published: list[Message] = []
        self.settled: list[tuple[Any, bool]] = []
        self.retained: dict[str, Any] = {}
        self.closed = ""

    def feed(self, data: bytes) -> list[Any]:
        """The requests of one read, carried out."""
        self.machine.receive_data(data)
        return self.drain()

    def feed_packets(self, *packets: Packet) -> list[Any]:
        self.machine.receive_packets(list(packets))
        return self.drain()

    def drain(self) -> list[Any]:
        out = []
        m = self.machine
        while (r := m.next_request()) is not None:
            out.append(r)
            self.requests.append(r)
            if isinstance(r, Login):
                if self.refuse is not None:
                    m.login_refused(*self.refuse)
                else:
                    acc = r.accepted
                    expiry = acc.session_expiry if self.expiry is None else self.expiry
                    s = Session(acc.client_id, "mqtt-session:" + acc.client_id, acc.version, expiry, "guest")
                    s.outbound.receive_maximum = acc.receive_maximum
                    s.outbound.maximum_packet_size = acc.maximum_packet_size
                    s.outbound.topic_alias_maximum = acc.topic_alias_maximum
                    m.attached(s, False, "guest", self.access)
            elif isinstance(r, AddSubscriptions):
                m.subscribed([r.session.subscriptions.subscribe(sub, r.subscription_id, r.filtered)
                              for sub in r.subscriptions])
            elif isinstance(r, RemoveSubscriptions):
                m.unsubscribed([r.session.subscriptions.unsubscribe(f) for f in r.topic_filters])
            elif isinstance(r, MatchRetained):
                m.retained_found([[rec for t, rec in self.retained.items() if t == f] for f in r.topic_filters])
            elif isinstance(r, PublishBatch):
                self.published += r.items
                m.routed(r.items, [], len(r.items), None)
                if self.auto_durable:
                    m.durable(r.items, 0, len(r.items) - 1, None)
                else:
                    self.batches.append(r.items)
            elif isinstance(r, Settle):
                self.settled.append((r.token, r.durably))
            elif isinstance(r, Close):
                self.closed = r.reason
            else:
                assert isinstance(r, (Retain, SaveSession, Consume, Dispatch, ArmKeepAlive, QuickAck, Detach,
                                      SetReading)), r
        return out

    def take_out(self) -> bytes:
        data = b"".join(self.machine.out)
        self.machine.out.clear()
        return data


class Client:
    """An MQTT client of ``version`` over a shell, through the codec's client side."""

    def __init__(self, shell: Shell, version: int = 5) -> None:
        self.shell = shell
        self.version = version
        self.decoder = Decoder(version=version)
        self.requests: list[Any] = []

    def send(self, *packets: Packet) -> list[Packet]:
        """Send ``packets`` in one read; what the server wrote back."""
        self.requests = self.shell.feed(b"".join(encode(p, self.version) for p in packets))
        return self.received()

    def received(self) -> list[Packet]:
        return self.decoder.feed(self.shell.take_out())


_seq = itertools.count(1)


def delivery(message: Message, queue: str = "q") -> Delivery:
    seq = next(_seq)
    return Delivery(queue, Entry(), message, Receipt(seq, 1))


def connected(version: int = 5, **kw: Any) -> tuple[Shell, Client]:
    shell = Shell(**kw)
    client = Client(shell, version)
    [ack] = client.send(Connect("c", version, keep_alive=30))
    assert isinstance(ack, ConnAck) and ack.reason_code == 0
    assert shell.machine.state is State.CONNECTED
    return shell, client


# -- the machine alone ----------------------------------------------------------------------------


def test_importing_the_machine_loads_no_twisted() -> None:
    code = "import sys, logbus.gateway.mqtt.machine; print('twisted' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_connect_asks_login_then_consumes() -> None:
    shell = Shell()
    client = Client(shell, 5)
    [ack] = client.send(Connect("c", 5, keep_alive=10))
    assert ack == ConnAck(False, 0)
    kinds = [type(r) for r in client.requests]
    assert kinds == [Login, ArmKeepAlive, Consume]
    assert client.requests[1] == ArmKeepAlive(15.0)  # 1.5 times the keep alive
    assert shell.machine.session is not None and shell.machine.session.client_id == "c"


def test_a_refused_login_gets_its_connack_and_closes() -> None:
    for version, code in ((5, 0x86), (4, 4)):
        shell = Shell(refuse=(code, "bad user name or password"))
        client = Client(shell, version)
        [ack] = client.send(Connect("c", version, username="u", password=b"p"))
        assert ack.reason_code == code
        assert shell.closed and shell.machine.state is State.CLOSED
        assert not any(isinstance(r, Detach) for r in client.requests)  # never attached


def test_enhanced_authentication_is_refused_without_asking() -> None:
    shell = Shell()
    client = Client(shell, 5)
    [ack] = client.send(Connect("c", 5, properties=Properties(authentication_method="SCRAM")))
    assert ack.reason_code == 0x8C and not any(isinstance(r, Login) for r in client.requests)


def test_ping_subscribe_unsubscribe() -> None:
    shell, client = connected()
    assert client.send(PingReq()) == [PingResp()]
    assert client.send(Subscribe(1, (Subscription("a/+", 1),))) == [SubAck(1, (1,))]
    assert any(isinstance(r, Dispatch) for r in client.requests)
    assert client.send(Unsubscribe(2, ("a/+", "x"))) == [UnsubAck(2, (0, 0x11))]
    shell3, client3 = connected(4)
    assert client3.send(Unsubscribe(2, ("x",))) == [UnsubAck(2)]


def test_subscribe_refused_by_access_and_retained_sent() -> None:
    class NoReading(AllowAll):
        def may_subscribe(self, topic_filter: str) -> bool:
            return not topic_filter.startswith("secret")

    shell, client = connected(access=NoReading())
    from logbus.core.state_pb2 import RetainedRecord

    shell.retained["a/b"] = RetainedRecord(topic="a/b", payload=b"kept", qos=1)
    got = client.send(Subscribe(3, (Subscription("secret/#", 1), Subscription("a/b", 1))))
    assert got[0] == SubAck(3, (0x87, 1))
    assert isinstance(got[1], Publish) and (got[1].topic, got[1].payload, got[1].retain) == ("a/b", b"kept", True)
    assert isinstance(client.requests[0], AddSubscriptions) and client.requests[0].subscriptions == (
        Subscription("a/b", 1),)
    assert isinstance(client.requests[1], MatchRetained)


def test_disconnect_detaches_without_the_will() -> None:
    shell = Shell()
    client = Client(shell, 5)
    client.send(Connect("c", 5, will=Will("w", b"bye")))
    assert client.send(Disconnect()) == []
    detach = next(r for r in client.requests if isinstance(r, Detach))
    assert detach.will is None and client.requests[-1] == Close("disconnected by the client")
    assert shell.feed(encode(PingReq(), 5)) == [] and shell.take_out() == b""  # nothing after closed


def test_connection_lost_detaches_with_the_will() -> None:
    shell = Shell()
    client = Client(shell, 5)
    client.send(Connect("c", 5, will=Will("w", b"bye"), properties=Properties(session_expiry_interval=60)))
    shell.machine.connection_lost()
    [detach] = shell.drain()
    assert isinstance(detach, Detach) and detach.will == Will("w", b"bye")


@pytest.mark.parametrize("version", [4, 5])
def test_endings_told_to_5_clients_only(version: int) -> None:
    for end, code in (("take_over", 0x8E), ("kick", 0x98), ("shutdown", 0x8B), ("keep_alive_expired", 0x8D)):
        shell, client = connected(version)
        getattr(shell.machine, end)()
        out = shell.drain()
        assert isinstance(out[0], Detach) and isinstance(out[-1], Close)
        got = client.received()
        assert got == ([Disconnect(code)] if version == 5 else [])
        if end == "shutdown":
            assert out[0].will is None


@pytest.mark.parametrize("version", [4, 5])
def test_what_could_not_be_stored_is_not_sent_and_the_connection_closes(version: int) -> None:
    """The shell could not store what ``out`` speaks of (machine.storage_failed): none of
    it goes; a 5.0 client is told DISCONNECT 0x80, a 3.1.1 one is closed."""
    shell, client = connected(version)
    shell.machine.out.append(encode(PubRec(7), version))  # a PUBREC whose record was not stored
    shell.machine.storage_failed("its session state could not be stored")
    out = shell.drain()
    assert isinstance(out[0], Detach) and isinstance(out[-1], Close)
    got = client.received()
    assert got == ([Disconnect(R.UNSPECIFIED_ERROR, got[0].properties)] if version == 5 else [])
    if version == 5:
        assert got[0].properties.reason_string == "its session state could not be stored"


def test_a_decoder_error_comes_after_the_packets_before_it() -> None:
    shell, client = connected()
    out = shell.feed(encode(PingReq(), 5) + b"\x36\x02\x00\x00")  # PINGREQ, then a PUBLISH of QoS 3
    got = client.received()
    assert got[0] == PingResp() and isinstance(got[1], Disconnect) and got[1].reason_code == 0x81
    assert isinstance(out[-1], Close)


def test_a_session_expiry_set_after_0_is_a_protocol_error() -> None:
    shell, client = connected()
    got = client.send(Disconnect(properties=Properties(session_expiry_interval=10)))
    assert got == [Disconnect(0x82, Properties(reason_string="a session expiry interval in DISCONNECT after 0 "
                                                             "in CONNECT"))]


def test_an_unsupported_protocol_level_gets_a_connack_in_its_version() -> None:
    shell = Shell()
    shell.feed(b"\x10\x0d\x00\x04MQTT\x06\x02\x00\x00\x00\x01c")  # level 6
    assert Decoder(version=4).feed(shell.take_out()) == [ConnAck(False, 1)]
    assert shell.closed


def test_packets_after_the_connect_wait_for_the_login_and_go_with_its_refusal() -> None:
    """A password is checked off the reactor, so the Login may be answered turns later.
    A client may send packets before its CONNACK; none is acted on before the login is, and
    none after a refusal (MQTT 3.1.1 3.1.4, MQTT 5 3.1.4: "MUST NOT process any data sent
    by the Client after the CONNECT packet")."""
    m = Machine(clock=lambda: NOW_MS, new_client_id=lambda: "x")
    m.receive_data(encode(Connect("c", 5), 5) + encode(Publish("t", b"early", 1, packet_id=1), 5))
    assert isinstance(m.next_request(), Login)
    assert m.next_request() is None  # not answered yet: the PUBLISH waits
    m.receive_data(encode(Subscribe(2, (Subscription("a/+", 1),)), 5))  # a later read: waits too
    assert m.next_request() is None
    with pytest.raises(LocalProtocolError):  # an answer to a question not asked is the shell's bug
        m.subscribed([True])
    m.login_refused(0x87, "no")
    rest = []
    while (r := m.next_request()) is not None:
        rest.append(r)
    assert [type(r) for r in rest] == [Close]


# -- every (state, packet type) pair -------------------------------------------------------------

PACKET_TYPES = (Connect, ConnAck, Publish, PubAck, PubRec, PubRel, PubComp, Subscribe, SubAck, Unsubscribe,
                UnsubAck, PingReq, PingResp, Disconnect, Auth)
CLIENT_REACHABLE = (State.AWAITING_CONNECT, State.CONNECTED, State.CLOSED)


def of_type(cls: type, version: int) -> st.SearchStrategy[Packet]:
    """Valid packets of type ``cls`` (mqtt_strategies' own, one type at a time)."""
    v5 = version == MQTT_5
    ids = S.packet_ids
    by_type: dict[type, st.SearchStrategy[Any]] = {
        Connect: S.connects(version),
        ConnAck: st.builds(ConnAck, st.booleans(), S._codes(R.CONNACK_REASONS, R.CONNACK_RETURN_CODES, version)),
        Publish: S.publishes(version),
        PubAck: S._ack(PubAck, PUBACK, R.PUBACK_REASONS, version),
        PubRec: S._ack(PubRec, PUBREC, R.PUBREC_REASONS, version),
        PubRel: S._ack(PubRel, PUBREL, R.PUBREL_REASONS, version),
        PubComp: S._ack(PubComp, PUBCOMP, R.PUBCOMP_REASONS, version),
        Subscribe: st.builds(Subscribe, ids, st.lists(S.subscriptions(version), min_size=1, max_size=3).map(tuple)),
        SubAck: st.builds(SubAck, ids, st.just((0,))),
        Unsubscribe: st.builds(Unsubscribe, ids, st.just(("a/b",))),
        UnsubAck: st.builds(UnsubAck, ids, st.just((0,) if v5 else ())),
        PingReq: st.just(PingReq()),
        PingResp: st.just(PingResp()),
        Disconnect: st.builds(Disconnect, S._codes(R.DISCONNECT_REASONS, None, version)),
        # 5.0 only on the wire (3.1.1's decoder refuses the type); the machine refuses it anyway
        Auth: st.builds(Auth, st.sampled_from(sorted(R.AUTH_REASONS))),
    }
    return by_type[cls]


def in_state(state: State, version: int) -> tuple[Shell, Client]:
    if state is State.AWAITING_CONNECT:
        shell = Shell()
        return shell, Client(shell, version)
    shell, client = connected(version)
    if state is State.CLOSED:
        client.send(Disconnect())
    assert shell.machine.state is state
    return shell, client


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("state", CLIENT_REACHABLE, ids=lambda s: s.name)
@pytest.mark.parametrize("cls", PACKET_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_state_and_packet_type(version: int, state: State, cls: type, data: st.DataObject) -> None:
    packet = data.draw(of_type(cls, version))
    shell, client = in_state(state, version)
    m = shell.machine
    out = shell.feed_packets(packet)
    wire = client.received() if m.version == MQTT_5 or state is not State.AWAITING_CONNECT else []
    if state is State.CLOSED:  # dropped, whatever it is
        assert out == [] and wire == [] and m.error is None
        return
    if (state, cls) in TRANSITIONS:
        assert not isinstance(m.error, UnexpectedPacket)
        if m.error is not None:  # the handler's own objection to the packet's content
            assert m.error.reason_code != 0x82 or cls in (Publish, Disconnect), m.error
        return
    assert isinstance(m.error, UnexpectedPacket) and m.error.reason_code == 0x82
    assert isinstance(out[-1], Close) and m.state is State.CLOSED
    if state is State.CONNECTED:
        assert any(isinstance(r, Detach) for r in out)
        if version == MQTT_5:
            assert [(type(p), p.reason_code) for p in wire] == [(Disconnect, 0x82)]
        else:
            assert wire == []
    else:
        assert wire == []  # no CONNECT seen: no version to answer in


@pytest.mark.parametrize("version", [4, 5])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_packet_sequence_never_raises(version: int, data: st.DataObject) -> None:
    """Random client packets after a CONNECT: the machine answers or closes, nothing else;
    every PUBLISH it takes is answered in order once durable."""
    shell, client = connected(version)
    for p in data.draw(st.lists(S.any_packet(version), max_size=8)):
        shell.feed(encode(p, p.protocol_level if isinstance(p, Connect) else version))
        client.received()
        if shell.machine.state is State.CLOSED:
            break
    if shell.machine.state is State.CLOSED:
        assert shell.closed
