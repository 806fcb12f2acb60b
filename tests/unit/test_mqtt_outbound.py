"""The server-to-client half of a session (gateway/mqtt/outbound.py): packet ids, the
client's receive maximum and packet size, topic aliases, the QoS 1/2 hand-over and
resending; examples and a Hypothesis state machine against a model."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from logbus.core.queues.entry import Delivery, Entry
from logbus.gateway.mqtt.outbound import MAX_PACKET_ID, PUBLISHED, RELEASED, Outbound
from logbus.gateway.mqtt.reasons import PACKET_IDENTIFIER_NOT_FOUND


def m(queue: str = "q", seq: int = 0) -> Delivery:
    """A delivery from ``queue`` (its entry ``seq``), as the queue service hands it out."""
    return Delivery(queue, Entry(seq, "t", 0, seq, 1, deliveries=1), 1, "session")


def test_qos1_and_qos2_flows_give_back_their_deliveries() -> None:
    o = Outbound()
    m0, m1, m2 = m("q0"), m("m1"), m("m2")
    assert o.send(0, m0) == 0 and not o.in_flight and m0.tag == 0
    p1 = o.send(1, m1)
    p2 = o.send(2, m2)
    assert p1 != p2 and (m1.tag, m1.qos, m2.tag, m2.qos) == (p1, 1, p2, 2)
    assert o.puback(p2) is None  # a QoS 2 message is not PUBACKed
    assert o.puback(p1) is m1 and o.puback(p1) is None
    assert o.pubcomp(p2) is None  # no PUBREL sent yet
    assert o.pubrec(p2) == (0, None)
    assert [(f.tag, f.state) for f in o.resend()] == [(p2, RELEASED)]
    assert o.pubcomp(p2) is m2 and not o.in_flight
    assert o.pubrec(p2) == (PACKET_IDENTIFIER_NOT_FOUND, None)


def test_shrink_gives_back_the_table_and_keeps_what_is_in_flight() -> None:
    """An offline session keeps its outbound: the table a dict grew to while 20 messages
    were in flight goes with the connection (gateway/mqtt/room.py ``detach``)."""
    import sys

    o = Outbound()
    small = sys.getsizeof(o.in_flight)
    pids = [o.send(1, m(seq=i)) for i in range(20)]
    kept = m("kept")
    o.pubrec(o.send(2, kept))
    grown = sys.getsizeof(o.in_flight)
    for pid in pids:
        o.puback(pid)
    assert sys.getsizeof(o.in_flight) == grown  # a dict keeps its table as keys go
    o.shrink()
    assert small < sys.getsizeof(o.in_flight) <= sys.getsizeof({1: 1}) < grown
    assert [(f, f.state) for f in o.resend()] == [(kept, RELEASED)]


def test_a_refusing_pubrec_ends_the_flow() -> None:
    o = Outbound()
    d = m()
    pid = o.send(2, d)
    assert o.pubrec(pid, 0x87) == (0, d) and not o.in_flight


def test_the_clients_receive_maximum_and_packet_size() -> None:
    o = Outbound(receive_maximum=2, maximum_packet_size=100)
    o.send(1, m("a"))
    o.send(2, m("b"))
    assert not o.can_send(1) and not o.can_send(2) and o.can_send(0)
    assert o.fits(100) and not o.fits(101)
    assert Outbound().fits(10**9)


def test_packet_ids_go_round_and_skip_those_in_flight() -> None:
    o = Outbound()
    held = o.send(1, m("held"))
    for _ in range(MAX_PACKET_ID - 1):
        o.puback(o.send(1, m("x")))
    assert o.send(1, m("y")) != held  # the id after wrapping round is still taken: skipped
    assert {f.tag for f in o.in_flight.values()} == {held, held + 1}


def test_topic_aliases_reuse_and_replace_the_least_recently_used() -> None:
    o = Outbound(topic_alias_maximum=2)
    assert o.alias("a") == ("a", 1)
    assert o.alias("b") == ("b", 2)
    assert o.alias("a") == ("", 1)
    assert o.alias("c") == ("c", 2)  # b was the least recently used
    assert o.alias("b") == ("b", 1)
    assert Outbound().alias("a") == ("a", None)
    o.resend()  # a new connection: the client knows no alias
    assert o.alias("b") == ("b", 1)


class OutboundMachine(RuleBasedStateMachine):
    @initialize(maximum=st.integers(1, 5))
    def setup(self, maximum: int) -> None:
        self.o = Outbound(receive_maximum=maximum)
        self.maximum = maximum
        self.model: dict[int, tuple[int, str, Delivery]] = {}  # packet id -> (qos, state, delivery)
        self.order: list[int] = []
        self.tokens = 0

    @rule(qos=st.sampled_from([0, 1, 2]))
    def send(self, qos: int) -> None:
        assert self.o.can_send(qos) == (qos == 0 or len(self.model) < self.maximum)
        if not self.o.can_send(qos):
            return
        self.tokens += 1
        d = m(seq=self.tokens)
        pid = self.o.send(qos, d)
        if qos:
            assert 1 <= pid <= MAX_PACKET_ID and pid not in self.model
            self.model[pid] = (qos, PUBLISHED, d)
            self.order.append(pid)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def acknowledge(self, data: st.DataObject) -> None:
        pid = data.draw(st.sampled_from(sorted(self.model)))
        qos, state, token = self.model[pid]
        if qos == 1:
            assert self.o.puback(pid) is token
            self._done(pid)
        elif state == PUBLISHED:
            assert self.o.pubrec(pid) == (0, None)
            self.model[pid] = (qos, RELEASED, token)
        else:
            assert self.o.pubcomp(pid) is token
            self._done(pid)

    @rule(pid=st.integers(1, 8))
    def stray(self, pid: int) -> None:
        """Acknowledgements of ids not in that state change nothing."""
        entry = self.model.get(pid)
        if entry is None or entry[0] == 2:
            assert self.o.puback(pid) is None
        if entry is None or entry[1] != RELEASED:
            assert self.o.pubcomp(pid) is None

    def _done(self, pid: int) -> None:
        del self.model[pid]
        self.order.remove(pid)

    @invariant()
    def same_in_flight(self) -> None:
        assert [(f.tag, f.qos, f.state, f) for f in self.o.resend()] == \
            [(pid, *self.model[pid]) for pid in self.order]


test_outbound_against_model = OutboundMachine.TestCase
