"""QoS 1 and QoS 2, both ways, through the MQTT session machine (gateway/mqtt/machine.py)
joined in memory with the codec's client side: the client's packets are encoded with
``encode``, the server's bytes decoded with a client-side ``Decoder``; the toy shell of
test_mqtt_machine.py stands in for the room. No broker, no reactor, no Twisted.

Both directions of one exchange are checked together: two machines, a publisher and a
subscriber, with what the publisher's batches publish delivered to the subscriber's
machine, as the room's queue would."""

from __future__ import annotations

from logbus.gateway.mqtt.connect import ServerLimits
from logbus.gateway.mqtt.packets import (
    Connect, Disconnect, PubAck, PubComp, Publish, PubRec, PubRel, SubAck, Subscribe, Subscription,
)  # fmt: skip
from logbus.gateway.mqtt.properties import Properties
from logbus.gateway.mqtt.requests import QUICK_ACK, Dispatch, PublishBatch, SaveSession, Settle
from logbus.gateway.mqtt.session import Token
from logbus.gateway.mqtt.states import State
from logbus.gateway.mqtt.machine import STREAMING_GAP_MS
from tests.unit.test_mqtt_machine import NOW_MS, Client, Shell, connected, delivery

KEPT = Properties(session_expiry_interval=600)


def subscriber(qos: int, version: int = 5, **kw: object) -> tuple[Shell, Client]:
    shell = Shell(**kw)  # type: ignore[arg-type]
    client = Client(shell, version)
    client.send(Connect("sub", version, properties=KEPT if version == 5 else Properties()))
    assert client.send(Subscribe(1, (Subscription("t/#", qos),))) == [SubAck(1, (qos,))]
    return shell, client


def pass_on(publisher: Shell, to: Shell) -> list[Settle | SaveSession | None]:
    """What the publisher published so far, handed to the subscriber's machine as its
    queue would; the requests ``deliver`` returned."""
    out = [to.machine.deliver(delivery(message)) for message in publisher.published]
    publisher.published.clear()
    return out


# -- client to server ---------------------------------------------------------------------------


def test_qos1_publishes_are_answered_once_durable_in_their_order() -> None:
    shell, client = connected(auto_durable=False)
    got = client.send(*(Publish("t/a", b"%d" % i, 1, packet_id=10 + i) for i in range(4)))
    assert got == []  # nothing before the log says durable
    [batch] = [r for r in client.requests if isinstance(r, PublishBatch)]  # one batch for the read
    assert [p.packet_id for p in batch.items] == [10, 11, 12, 13]
    assert client.requests[-1] is QUICK_ACK  # the read started answers waiting (decision 0017)
    m = shell.machine
    m.durable(batch.items, 2, 3, None)  # the later partition first: held back
    assert client.received() == []
    m.durable(batch.items, 0, 1, None)
    assert client.received() == [PubAck(10), PubAck(11), PubAck(12), PubAck(13)]
    assert m.answers_waiting == 0
    got = client.send(Publish("t/a", b"again", 1, packet_id=10))  # the id is free again
    assert got == [] and client.requests[-1] is QUICK_ACK


def test_a_device_publishing_now_and_then_gets_no_quick_ack() -> None:
    """A read that comes long after the one before (a device sending once a second) has its
    TCP ACK ride on the PUBACK before the device sends again: no QuickAck, one system call
    less per message (decision 0032). Reads close together (a client streaming) keep it."""
    shell, client = connected(auto_durable=False)
    now = [NOW_MS + 1000]
    shell.machine.clock = lambda: now[0]
    client.send(Publish("t/a", b"alone", 1, packet_id=1))
    assert QUICK_ACK not in client.requests
    shell.machine.durable(shell.batches[-1], 0, 0, None)
    now[0] += STREAMING_GAP_MS  # the next read soon after: a client streaming
    client.requests.clear()
    client.send(Publish("t/a", b"next", 1, packet_id=2))
    assert client.requests[-1] is QUICK_ACK


def test_qos1_answers_in_3_1_1_and_a_failed_append() -> None:
    shell, client = connected(4, auto_durable=False)
    client.send(Publish("t/a", b"1", 1, packet_id=1), Publish("t/a", b"2", 1, packet_id=2))
    [batch] = shell.batches
    shell.machine.durable(batch, 0, 0, None)
    shell.machine.durable(batch, 1, 1, OSError("disk"))
    assert client.received() == [PubAck(1)]  # 3.1.1: a failure cannot be told: closed
    assert shell.machine.state is State.CLOSED and shell.drain()[-1].reason.startswith("a refused publish")


def test_qos2_exactly_once_from_the_client() -> None:
    shell, client = connected(expiry=600)
    session = shell.machine.session
    assert session is not None
    assert client.send(Publish("t/a", b"once", 2, packet_id=7)) == [PubRec(7)]
    assert 7 in session.awaiting_rel and any(isinstance(r, SaveSession) for r in client.requests)
    # sent again before its PUBREL: PUBREC again, not published twice
    assert client.send(Publish("t/a", b"once", 2, dup=True, packet_id=7)) == [PubRec(7)]
    assert not any(isinstance(r, PublishBatch) for r in client.requests)
    assert len([m for m in shell.requests if isinstance(m, PublishBatch)]) == 1
    assert client.send(PubRel(7)) == [PubComp(7)]
    assert 7 not in session.awaiting_rel and any(isinstance(r, SaveSession) for r in client.requests)
    assert client.send(PubRel(7)) == [PubComp(7, 0x92)]  # no longer waiting
    assert client.send(Publish("t/a", b"new", 2, packet_id=7)) == [PubRec(7)]  # a new message


def test_receive_maximum_from_the_client() -> None:
    shell, client = connected(limits=ServerLimits(receive_maximum=2), auto_durable=False)
    got = client.send(*(Publish("t/a", b"x", 1, packet_id=i) for i in (1, 2, 3)))
    assert [(type(p), p.reason_code) for p in got] == [(Disconnect, 0x93)]
    assert shell.machine.state is State.CLOSED
    assert [p.packet_id for p in shell.batches[0]] == [1, 2]  # what came before the error goes out


def test_topic_aliases_from_the_client() -> None:
    shell, client = connected(limits=ServerLimits(topic_alias_maximum=4))
    client.send(Publish("t/long/name", b"1", 1, packet_id=1, properties=Properties(topic_alias=3)),
                Publish("", b"2", 1, packet_id=2, properties=Properties(topic_alias=3)))
    assert [m.envelope.mqtt_topic for m in shell.published] == ["t/long/name", "t/long/name"]
    got = client.send(Publish("", b"3", 1, packet_id=3, properties=Properties(topic_alias=2)))
    assert [(type(p), p.reason_code) for p in got] == [(Disconnect, 0x82)]


def test_a_refused_publish() -> None:
    class NoWriting:
        def may_publish(self, routing_key: str) -> bool:
            return False

        def may_subscribe(self, topic_filter: str) -> bool:
            return True

    shell, client = connected(access=NoWriting())
    assert client.send(Publish("t/a", b"x", 1, packet_id=4), Publish("t/a", b"x", 2, packet_id=5)) == [
        PubAck(4, 0x87), PubRec(5, 0x87)]
    assert shell.published == []
    shell, client = connected(4, access=NoWriting())
    assert client.send(Publish("t/a", b"x", 1, packet_id=4)) == [] and shell.machine.state is State.CLOSED


# -- server to client ---------------------------------------------------------------------------


def test_qos1_to_the_client_and_its_puback() -> None:
    pub, pub_client = connected()
    sub, sub_client = subscriber(1)
    pub_client.send(Publish("t/x", b"hello", 1, packet_id=3))
    assert pass_on(pub, sub) == [None]
    [p] = sub_client.received()
    assert (p.topic, p.payload, p.qos, p.dup) == ("t/x", b"hello", 1, False)
    session = sub.machine.session
    assert session is not None and list(session.outbound.in_flight) == [p.packet_id]
    sub_client.send(PubAck(p.packet_id))
    [(token, durably)] = sub.settled
    assert isinstance(token, Token) and not durably and session.outbound.in_flight == {}
    assert isinstance(sub_client.requests[-1], Dispatch)  # room for more: handed out at the end of the read
    sub_client.send(PubAck(p.packet_id))  # again: ignored
    assert len(sub.settled) == 1


def test_the_clients_receive_maximum_holds_deliveries_back() -> None:
    sub = Shell()
    client = Client(sub, 5)
    client.send(Connect("sub", 5, properties=Properties(receive_maximum=2)))
    client.send(Subscribe(1, (Subscription("t/#", 1),)))
    pub, pub_client = connected()
    for i in range(1, 3):
        pub_client.send(Publish("t/x", b"%d" % i, 1, packet_id=i))
        assert sub.machine.has_credit()
        pass_on(pub, sub)
    assert not sub.machine.has_credit()
    first, _ = client.received()
    client.send(PubAck(first.packet_id))
    assert sub.machine.has_credit()
    sub.machine.pause()  # the socket's buffer is full
    assert not sub.machine.has_credit()
    assert sub.machine.resume() and sub.machine.has_credit()


def test_qos2_to_the_client() -> None:
    pub, pub_client = connected()
    sub, sub_client = subscriber(2)
    pub_client.send(Publish("t/x", b"twice? no", 2, packet_id=9))
    [save] = pass_on(pub, sub)
    assert isinstance(save, SaveSession)  # the record keeps QoS 2 state
    [p] = sub_client.received()
    assert p.qos == 2
    session = sub.machine.session
    assert session is not None
    assert sub_client.send(PubRec(p.packet_id)) == [PubRel(p.packet_id)]
    [(token, durably)] = sub.settled
    assert durably and isinstance(token, Token)  # settled, and stored, before the PUBREL goes out
    kinds = [type(r) for r in sub_client.requests]
    assert kinds.index(Settle) < kinds.index(SaveSession)
    assert session.outbound.in_flight[p.packet_id].state == "released"
    assert sub_client.send(PubComp(p.packet_id)) == []
    assert session.outbound.in_flight == {} and isinstance(sub_client.requests[-1], Dispatch)
    assert len(sub.settled) == 1  # the PUBCOMP settles nothing more


def test_qos2_refused_by_the_client() -> None:
    pub, pub_client = connected()
    sub, sub_client = subscriber(2)
    pub_client.send(Publish("t/x", b"no", 2, packet_id=9))
    pass_on(pub, sub)
    [p] = sub_client.received()
    assert sub_client.send(PubRec(p.packet_id, 0x80)) == []  # no PUBREL: the flow ends
    [(token, durably)] = sub.settled
    assert not durably


def test_the_qos_is_the_lower_of_publish_and_subscription() -> None:
    for pub_qos, sub_qos in ((2, 1), (1, 2), (0, 2), (2, 0)):
        pub, pub_client = connected()
        sub, sub_client = subscriber(sub_qos, version=4)
        pub_client.send(Publish("t/x", b"m", pub_qos, packet_id=1 if pub_qos else 0))
        pass_on(pub, sub)
        [p] = sub_client.received()
        assert p.qos == min(pub_qos, sub_qos)
        if p.qos == 1:
            sub_client.send(PubAck(p.packet_id))
        elif p.qos == 2:
            assert sub_client.send(PubRec(p.packet_id)) == [PubRel(p.packet_id)]
            sub_client.send(PubComp(p.packet_id))
        session = sub.machine.session
        assert session is not None and session.outbound.in_flight == {}
