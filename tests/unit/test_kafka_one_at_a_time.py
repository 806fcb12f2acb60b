"""The Kafka shell reads one request at a time while an answer is pending (as Kafka
mutes a channel), closes a connection that gets no answer as a user within the handshake
timeout, and one with no complete request for the idle timeout.
A real broker on a temporary directory; the transport is Twisted's StringTransport and
the clock Twisted's task.Clock, so what is read, paused and written is seen exactly."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from logbus.core.broker import Broker
from logbus.gateway.kafka.protocol import KafkaFactory, KafkaProtocol
from tests.loop import LoopReactor

IDLE = 5.0
HANDSHAKE = 2.0
LOOPBACK = IPv4Address("TCP", "127.0.0.1", 40000)  # an anonymous client may act as a user from there


def request(correlation_id: int) -> bytes:
    r = ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1")
    r.with_header(correlation_id=correlation_id, client_id="test")
    body = bytes(r.encode(header=True))
    return struct.pack(">i", len(body)) + body


def answered(transport: StringTransport) -> list[int]:
    """The correlation ids of the responses written so far, in order."""
    data, ids = transport.value(), []
    while data:
        size = struct.unpack_from(">i", data)[0]
        ids.append(struct.unpack_from(">i", data, 4)[0])
        data = data[4 + size:]
    return ids


def count(counter: Any) -> float:
    """A prometheus_client Counter's value."""
    return float(counter._value.get())


class Setup:
    def __init__(self, tmp_path: Path) -> None:
        self.broker = Broker(tmp_path, reactor=LoopReactor())
        self.broker.start()
        self.clock = Clock()
        b = self.broker
        self.factory = KafkaFactory(b.doors, b.streams, b.topics, b.access, b.metrics, self.clock, 1 << 20, idle_timeout=IDLE)
        self.pending: list[tuple[Deferred[Any], Any]] = []
        self.factory.handlers.register(ApiVersionsRequest, ApiVersionsResponse, 0, 3, self._handle)

    def _handle(self, req: Any, caller: Any) -> Deferred[Any]:
        d: Deferred[Any] = Deferred()
        self.pending.append((d, req))
        return d

    def answer(self) -> None:
        d, req = self.pending.pop(0)
        d.callback(ApiVersionsResponse(error_code=0, api_keys=[], throttle_time_ms=0))

    def connect(self, peer: IPv4Address | None = None) -> tuple[KafkaProtocol, StringTransport]:
        proto = self.factory.buildProtocol(None)
        transport = StringTransport(peerAddress=peer)
        proto.makeConnection(transport)
        return proto, transport


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    s = Setup(tmp_path)
    yield s
    s.broker.stop()


def test_pipelined_requests_wait_for_the_answer_before_them(setup: Setup) -> None:
    proto, transport = setup.connect()
    proto.dataReceived(request(1) + request(2) + request(3))
    assert len(setup.pending) == 1  # only the first is handled
    assert transport.producerState == "paused"  # and the socket is not read meanwhile
    setup.answer()
    assert answered(transport) == [1] and len(setup.pending) == 1
    assert transport.producerState == "paused"
    setup.answer()
    assert answered(transport) == [1, 2] and len(setup.pending) == 1
    setup.answer()
    assert answered(transport) == [1, 2, 3] and not setup.pending
    assert transport.producerState == "producing"  # all answered: reading again


def test_a_client_waiting_for_each_answer_never_pauses_the_socket(setup: Setup) -> None:
    proto, transport = setup.connect()
    for i in range(3):
        proto.dataReceived(request(i))
        assert transport.producerState == "producing"
        setup.answer()
    assert answered(transport) == [0, 1, 2]


def test_a_read_during_a_pending_answer_pauses_until_it_is_answered(setup: Setup) -> None:
    proto, transport = setup.connect()
    proto.dataReceived(request(1))
    proto.dataReceived(request(2)[:5])  # a part of the next: nothing to hold yet
    assert transport.producerState == "producing"
    proto.dataReceived(request(2)[5:])
    assert transport.producerState == "paused" and len(setup.pending) == 1
    setup.answer()
    assert len(setup.pending) == 1 and answered(transport) == [1]
    setup.answer()
    assert answered(transport) == [1, 2] and transport.producerState == "producing"


def test_idle_connection_is_closed_after_the_timeout(setup: Setup) -> None:
    proto, transport = setup.connect()
    setup.clock.advance(IDLE - 0.1)
    assert not transport.disconnecting
    setup.clock.advance(0.1)
    assert transport.disconnecting


def test_requests_and_pending_answers_keep_a_connection(setup: Setup) -> None:
    proto, transport = setup.connect()
    setup.clock.advance(IDLE - 1)
    proto.dataReceived(request(1))  # a complete request: active
    setup.clock.advance(IDLE - 1)
    assert not transport.disconnecting
    setup.clock.advance(IDLE * 3)  # owed an answer all along: not idle
    assert not transport.disconnecting
    setup.answer()
    setup.clock.advance(IDLE - 0.5)
    assert not transport.disconnecting
    setup.clock.advance(1)
    assert transport.disconnecting


def test_a_request_never_completed_is_closed_by_the_idle_timeout(setup: Setup) -> None:
    proto, transport = setup.connect()
    frame = request(1)
    for i in range(len(frame) - 1):  # a byte a second, never the last
        proto.dataReceived(frame[i:i + 1])
        setup.clock.advance(1.0)
        if transport.disconnecting:
            break
    assert transport.disconnecting and setup.clock.seconds() <= IDLE + 1
    assert not setup.pending


def test_a_wider_window_handles_that_many_before_the_first_answer(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    try:
        s.factory.max_in_flight = 2
        proto, transport = s.connect()
        proto.dataReceived(request(1) + request(2) + request(3))
        assert len(s.pending) == 2 and transport.producerState == "paused"
        s.answer()
        assert len(s.pending) == 2 and answered(transport) == [1]  # the third taken up
        assert transport.producerState == "paused"  # two pending again
        s.answer()
        assert transport.producerState == "producing"  # nothing held, room for one more
        s.answer()
        assert answered(transport) == [1, 2, 3]
    finally:
        s.broker.stop()


def test_a_silent_connection_is_closed_at_the_handshake_timeout(setup: Setup) -> None:
    setup.factory.handshake_timeout = HANDSHAKE
    proto, transport = setup.connect(LOOPBACK)
    setup.clock.advance(HANDSHAKE - 0.1)
    assert not transport.disconnecting
    setup.clock.advance(0.2)
    assert transport.disconnecting and transport.value() == b""
    assert count(setup.factory.handshake_timeouts) == 1


def test_the_first_answer_as_a_user_ends_the_handshake(setup: Setup) -> None:
    setup.factory.handshake_timeout = HANDSHAKE
    proto, transport = setup.connect(LOOPBACK)  # acts as anonymous_user from the start
    proto.dataReceived(request(1))
    setup.clock.advance(HANDSHAKE * 2)  # owed an answer at the deadline: looked at again later
    assert not transport.disconnecting
    setup.answer()
    setup.clock.advance(IDLE - 0.5)  # past every handshake deadline: only the idle timeout now
    assert not transport.disconnecting and count(setup.factory.handshake_timeouts) == 0
    setup.clock.advance(1)
    assert transport.disconnecting and count(setup.factory.idle_closed) == 1


def test_an_answer_to_no_one_does_not_end_the_handshake(setup: Setup) -> None:
    """From beyond loopback a client must authenticate (SASL): its ApiVersions answered,
    it is still closed at the handshake timeout."""
    setup.factory.handshake_timeout = HANDSHAKE
    proto, transport = setup.connect(IPv4Address("TCP", "192.0.2.7", 40000))
    proto.dataReceived(request(1))
    setup.answer()
    assert answered(transport) == [1]
    setup.clock.advance(HANDSHAKE)
    assert transport.disconnecting and count(setup.factory.handshake_timeouts) == 1
