"""The client-to-server half of a session (gateway/mqtt/inbound.py): topic aliases, the
receive maximum and QoS 2 exactly-once, by examples and by a Hypothesis state machine
against a simple model."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from logbus.gateway.mqtt import MqttError, Properties, Publish
from logbus.gateway.mqtt.inbound import Inbound
from logbus.gateway.mqtt.reasons import (
    PACKET_IDENTIFIER_NOT_FOUND,
    PROTOCOL_ERROR,
    RECEIVE_MAXIMUM_EXCEEDED,
    TOPIC_ALIAS_INVALID,
)


def pub(topic: str, qos: int = 0, pid: int = 0, alias: int | None = None) -> Publish:
    return Publish(topic, b"x", qos, packet_id=pid, properties=Properties(topic_alias=alias))


def code(f: object) -> int:
    with pytest.raises(MqttError) as info:
        f()  # type: ignore[operator]
    return info.value.reason_code


def test_topic_aliases() -> None:
    i = Inbound(topic_alias_maximum=2)
    assert i.publish(pub("a/b", alias=1)) == "a/b"
    assert i.publish(pub("", alias=1)) == "a/b"
    assert i.publish(pub("c", alias=1)) == "c"  # set again
    assert i.publish(pub("", alias=1)) == "c"
    assert code(lambda: i.publish(pub("", alias=2))) == PROTOCOL_ERROR  # never set
    assert code(lambda: i.publish(pub("x", alias=3))) == TOPIC_ALIAS_INVALID  # above our maximum
    assert code(lambda: Inbound().publish(pub("x", alias=1))) == TOPIC_ALIAS_INVALID  # we allowed none


def test_receive_maximum_counts_what_we_have_not_answered() -> None:
    i = Inbound(receive_maximum=2)
    p1, p2, p3 = pub("t", 1, 1), pub("t", 2, 2), pub("t", 1, 3)
    i.publish(p1)
    i.publish(p2)
    assert code(lambda: i.publish(p3)) == RECEIVE_MAXIMUM_EXCEEDED
    i.answered(p1.qos, p1.packet_id)  # PUBACK sent
    i.publish(p3)
    i.answered(p2.qos, p2.packet_id)  # PUBREC sent: still outstanding until PUBCOMP
    assert code(lambda: i.publish(pub("t", 1, 4))) == RECEIVE_MAXIMUM_EXCEEDED
    assert i.release(2) == 0  # PUBCOMP
    i.publish(pub("t", 1, 4))
    i.publish(pub("t", 0))  # QoS 0 is never counted


def test_qos2_is_published_once_and_released_once() -> None:
    i = Inbound()
    p = pub("t", 2, 7)
    assert i.publish(p) is not None
    i.answered(p.qos, p.packet_id)  # PUBREC
    assert i.publish(Publish("t", b"x", 2, dup=True, packet_id=7)) is None  # resent: not again
    assert i.release(7) == 0
    assert i.release(7) == PACKET_IDENTIFIER_NOT_FOUND
    assert i.publish(p) is not None  # the id is free: a new message


class InboundMachine(RuleBasedStateMachine):
    """Model: outstanding ids (QoS 1 until answered, QoS 2 until released), ids awaiting
    PUBREL; a QoS 2 publish of an awaiting id is a duplicate."""

    @initialize(maximum=st.integers(1, 4))
    def setup(self, maximum: int) -> None:
        self.i = Inbound(receive_maximum=maximum)
        self.maximum = maximum
        self.qos: dict[int, int] = {}  # outstanding id -> its QoS
        self.awaiting: set[int] = set()
        self.published: list[int] = []

    @rule(qos=st.sampled_from([1, 2]), pid=st.integers(1, 6))
    def publish(self, qos: int, pid: int) -> None:
        p = pub("t", qos, pid)
        if qos == 2 and pid in self.awaiting:
            assert self.i.publish(p) is None
            return
        if pid not in self.qos and len(self.qos) >= self.maximum:
            assert code(lambda: self.i.publish(p)) == RECEIVE_MAXIMUM_EXCEEDED
            return
        assert self.i.publish(p) is not None
        self.qos[pid] = qos
        self.published.append(pid)

    @rule(pid=st.integers(1, 6))
    def answer(self, pid: int) -> None:
        qos = self.qos.get(pid)
        if qos is None or pid in self.awaiting:
            return
        self.i.answered(qos, pid)
        if qos == 1:
            del self.qos[pid]
        else:
            self.awaiting.add(pid)

    @rule(pid=st.integers(1, 6))
    def release(self, pid: int) -> None:
        if pid in self.awaiting:
            assert self.i.release(pid) == 0
            self.awaiting.discard(pid)
            del self.qos[pid]
        else:
            assert self.i.release(pid) == PACKET_IDENTIFIER_NOT_FOUND


test_inbound_against_model = InboundMachine.TestCase


@pytest.mark.parametrize("props", [Properties(subscription_identifiers=(3,)), Properties(response_topic="r/+"),
                                   Properties(response_topic="r/#")])
def test_properties_a_client_may_not_send_in_publish(props: Properties) -> None:
    with pytest.raises(MqttError) as e:
        Inbound().publish(Publish("t", b"", 1, packet_id=1, properties=props))
    assert e.value.reason_code == 0x82
