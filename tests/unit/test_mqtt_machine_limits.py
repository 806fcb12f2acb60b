"""The server's limits in the MQTT session machine (gateway/mqtt/machine.py), joined in
memory with the codec's client side through the toy shell of test_mqtt_machine.py; no
broker, no reactor: messages in flight to the client (mqtt_max_inflight_messages, a 5.0
client's Receive Maximum capped by it), the server's Receive Maximum (told in CONNACK,
0x93 past it, 5.0 only), the session expiry cap (told in CONNACK, applied to DISCONNECT).
Hypothesis drives the first two against a simple model, and every limit met is told
(``limit_hit``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from logbus.core.types import Message
from logbus.gateway.mqtt.connect import NEVER_EXPIRES, ServerLimits
from logbus.gateway.mqtt.machine import EXPIRY_CAPPED, INFLIGHT_FULL, RECEIVE_MAXIMUM_HIT
from logbus.gateway.mqtt.packets import (
    ConnAck, Connect, Disconnect, PubAck, PubComp, Publish, PubRec, PubRel, SubAck, Subscribe, Subscription,
)  # fmt: skip
from logbus.gateway.mqtt.properties import Properties
from logbus.gateway.mqtt.mapping import message_from_publish
from logbus.gateway.mqtt.states import State
from tests.unit.test_mqtt_machine import Client, Shell, delivery


def attached(limits: ServerLimits, version: int, properties: Properties = Properties()) -> tuple[Shell, Client, list[str]]:
    shell = Shell(limits=limits)
    hits: list[str] = []
    shell.machine.limit_hit = hits.append
    client = Client(shell, version)
    [ack] = client.send(Connect("c", version, clean_start=version == 5, keep_alive=30, properties=properties))
    assert isinstance(ack, ConnAck) and ack.reason_code == 0
    return shell, client, hits


def message(i: int, qos: int = 1) -> Message:
    return message_from_publish("t/x", Publish("t/x", b"%d" % i, qos, packet_id=1), "pub", 0)


# -- in flight to the client --------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(version=st.sampled_from([4, 5]), max_inflight=st.integers(1, 8),
       client_max=st.none() | st.integers(1, 8),
       steps=st.lists(st.tuples(st.sampled_from(["deliver", "ack"]), st.integers(0, 100)), max_size=60))
def test_messages_in_flight_never_pass_the_limit(version: int, max_inflight: int, client_max: int | None,
                                                 steps: list[tuple[str, int]]) -> None:
    props = Properties(receive_maximum=client_max) if version == 5 else Properties()
    shell, client, hits = attached(ServerLimits(max_inflight=max_inflight), version, props)
    assert client.send(Subscribe(1, (Subscription("t/#", 1),))) == [SubAck(1, (1,))]
    m = shell.machine
    limit = min(max_inflight, client_max or 65535) if version == 5 else max_inflight
    in_flight: list[int] = []  # the model: packet ids sent and not acknowledged, in order
    fills = 0
    sent = 0
    for action, pick in steps:
        assert m.has_credit() == (len(in_flight) < limit)
        if action == "deliver" and m.has_credit():  # the queue service hands out only then
            m.deliver(delivery(message(sent)))
            sent += 1
            [p] = client.received()
            assert isinstance(p, Publish) and p.qos == 1
            in_flight.append(p.packet_id)
            fills += len(in_flight) == limit
        elif action == "ack" and in_flight:
            pid = in_flight.pop(pick % len(in_flight))
            client.send(PubAck(pid))
        assert len(in_flight) <= limit
        assert sorted(m.session.outbound.in_flight) == sorted(in_flight)  # type: ignore[union-attr]
    assert hits.count(INFLIGHT_FULL) == fills


# -- from the client: our Receive Maximum -------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(version=st.sampled_from([4, 5]), receive_maximum=st.integers(1, 6),
       steps=st.lists(st.tuples(st.sampled_from(["qos1", "qos2", "pubrel"]), st.integers(0, 100)), max_size=40))
def test_the_server_receive_maximum_holds_5_clients_only(version: int, receive_maximum: int,
                                                         steps: list[tuple[str, int]]) -> None:
    shell, client, hits = attached(ServerLimits(receive_maximum=receive_maximum), version)
    m = shell.machine
    awaiting: list[int] = []  # the model: QoS 2 ids PUBRECed, not yet released
    next_id = 1
    for action, pick in steps:
        if action == "pubrel":
            if awaiting:
                pid = awaiting.pop(pick % len(awaiting))
                assert client.send(PubRel(pid)) == [PubComp(pid)]
            continue
        qos = 1 if action == "qos1" else 2
        got = client.send(Publish("t/a", b"x", qos, packet_id=next_id))
        if version == 5 and qos == 2 and len(awaiting) >= receive_maximum:
            # one more than we announced unanswered: DISCONNECT 0x93 (MQTT 5 section 3.3.4)
            assert [(type(p), p.reason_code) for p in got] == [(Disconnect, 0x93)]
            assert m.state is State.CLOSED and hits == [RECEIVE_MAXIMUM_HIT]
            return
        assert got == [PubAck(next_id) if qos == 1 else PubRec(next_id)]  # answered once durable (at once here)
        if qos == 2:
            awaiting.append(next_id)
        next_id += 1
    assert m.state is State.CONNECTED and hits == []


def test_connack_tells_a_5_client_our_receive_maximum() -> None:
    shell = Shell(limits=ServerLimits(receive_maximum=20))
    [ack] = Client(shell, 5).send(Connect("c", 5, keep_alive=30))
    assert ack.properties.receive_maximum == 20
    [ack4] = Client(Shell(limits=ServerLimits(receive_maximum=20)), 4).send(Connect("c", 4, keep_alive=30))
    assert ack4 == ConnAck(False, 0)  # 3.1.1 has no properties to tell it


# -- session expiry -----------------------------------------------------------------------------


def test_the_session_expiry_cap_is_told_in_connack_and_applied_to_disconnect() -> None:
    limits = ServerLimits(max_session_expiry=60)
    shell, client, hits = attached(limits, 5, Properties(session_expiry_interval=600))
    acks = [r for r in shell.requests if type(r).__name__ == "Login"]
    assert acks and acks[0].accepted.session_expiry == 60
    assert shell.machine.session.expiry == 60  # type: ignore[union-attr]
    assert hits == [EXPIRY_CAPPED]
    client.send(Disconnect(properties=Properties(session_expiry_interval=3600)))
    assert shell.machine.session.expiry == 60 and hits == [EXPIRY_CAPPED, EXPIRY_CAPPED]  # type: ignore[union-attr]


def test_the_cap_in_connack_only_when_it_lowered_the_request() -> None:
    for asked, told in [(30, None), (60, None), (61, 60), (NEVER_EXPIRES, 60)]:
        shell = Shell(limits=ServerLimits(max_session_expiry=60))
        [ack] = Client(shell, 5).send(Connect("c", 5, clean_start=False, keep_alive=30,
                                              properties=Properties(session_expiry_interval=asked)))
        assert ack.properties.session_expiry_interval == told, asked


def test_a_3_1_1_persistent_session_is_held_to_the_cap() -> None:
    shell, _, hits = attached(ServerLimits(max_session_expiry=7200), 4)
    assert shell.machine.session.expiry == 7200 and hits == [EXPIRY_CAPPED]  # type: ignore[union-attr]
    shell, _, hits = attached(ServerLimits(), 4)  # no cap: kept until a clean connect
    assert shell.machine.session.expiry == NEVER_EXPIRES and hits == []  # type: ignore[union-attr]
