"""The WebSocket server codec (RFC 6455) and its Twisted wrapper: the opening handshake and
each refusal, client frames however they are cut, every close code the decoder sends, the
server's frames byte for byte, and no input making the codec raise anything but its own
errors or hold more than its limits. The wrapper runs on Twisted's StringTransport."""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from logbus.gateway.websocket import (
    MAX_HEAD, Accepted, CloseReceived, Data, Event, HandshakeError, LocalProtocolError, Ping,
    ServerConnection, WebSocketError, WebSocketFactory, WebSocketProtocol, accept_key,
    frame_header,
)  # fmt: skip

KEY = "dGhlIHNhbXBsZSBub25jZQ=="
ACCEPT = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 section 1.3
MQTT = ("mqtt", "mqttv3.1")
FUZZ = settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])

BASE = {"Host": "broker", "Upgrade": "websocket", "Connection": "Upgrade",
        "Sec-WebSocket-Key": KEY, "Sec-WebSocket-Version": "13"}  # fmt: skip


def request(line: str = "GET /mqtt HTTP/1.1", extra: Sequence[tuple[str, str]] = (),
            **fields: str | None) -> bytes:  # fmt: skip
    """A request head: BASE with ``fields`` replacing (None: removing) its headers, then
    ``extra`` headers appended as they are."""
    headers = {**BASE, **{k.replace("_", "-"): v for k, v in fields.items()}}
    lines = [line] + [f"{k}: {v}" for k, v in headers.items() if v is not None]
    lines += [f"{k}: {v}" for k, v in extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def frame(opcode: int, payload: bytes = b"", fin: bool = True, mask: bytes | None = b"\x37\xfa\x21\x3d",
          rsv: int = 0, wide: int = 0) -> bytes:  # fmt: skip
    """A client frame; ``mask=None`` leaves it unmasked, ``wide`` forces a 2 or 8 byte length."""
    first = (0x80 if fin else 0) | rsv | opcode
    bit = 0 if mask is None else 0x80
    n = len(payload)
    if n < 126 and not wide:
        header = bytes((first, bit | n))
    elif n < 1 << 16 and wide != 8:
        header = struct.pack("!BBH", first, bit | 126, n)
    else:
        header = struct.pack("!BBQ", first, bit | 127, n)
    if mask is None:
        return header + payload
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def opened(max_message_size: int = 1 << 20) -> ServerConnection:
    codec = ServerConnection(MQTT, max_message_size)
    [event] = codec.feed(request())
    assert isinstance(event, Accepted)
    return codec


def refused(raw: bytes, codec: ServerConnection | None = None) -> WebSocketError:
    codec = codec or opened()
    with pytest.raises(WebSocketError) as e:
        codec.feed(raw)
    return e.value


def refused_head(raw: bytes, subprotocols: tuple[str, ...] = MQTT) -> HandshakeError:
    with pytest.raises(HandshakeError) as e:
        ServerConnection(subprotocols).feed(raw)
    return e.value


def bytewise(codec: ServerConnection, raw: bytes) -> list[Event]:
    return [event for i in range(len(raw)) for event in codec.feed(raw[i:i + 1])]


# -- the opening handshake --


def test_accept_key_of_the_rfc_example() -> None:
    assert accept_key(KEY) == ACCEPT


def test_accepted_response_golden() -> None:
    [event] = ServerConnection(MQTT).feed(request(Sec_WebSocket_Protocol="mqtt"))
    assert event == Accepted("/mqtt", "mqtt", (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n"))


def test_accept_of_a_random_key() -> None:
    key = base64.b64encode(os.urandom(16)).decode()
    [event] = ServerConnection().feed(request(Sec_WebSocket_Key=key))
    expected = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
    assert isinstance(event, Accepted) and b"Sec-WebSocket-Accept: " + expected + b"\r\n" in event.response


@pytest.mark.parametrize("offer, chosen", [
    (["mqtt"], "mqtt"),
    (["mqttv3.1"], "mqttv3.1"),
    (["mqttv3.1, mqtt"], "mqttv3.1"),  # the client's preference
    (["chat, mqtt"], "mqtt"),
    (["chat", "mqtt"], "mqtt"),  # offered in two header lines
    ([], None),  # no offer: accepted without a subprotocol, as Mosquitto does
])  # fmt: skip
def test_subprotocol_negotiation(offer: list[str], chosen: str | None) -> None:
    [event] = ServerConnection(MQTT).feed(request(extra=[("Sec-WebSocket-Protocol", v) for v in offer]))
    assert isinstance(event, Accepted) and event.subprotocol == chosen
    assert (b"Sec-WebSocket-Protocol" in event.response) == (chosen is not None)
    if chosen:
        assert f"Sec-WebSocket-Protocol: {chosen}\r\n".encode() in event.response


def test_an_offer_with_nothing_acceptable_is_refused() -> None:
    error = refused_head(request(Sec_WebSocket_Protocol="chat, MQTT"))  # names are case-sensitive
    assert error.status == 400 and "chat, MQTT" in error.reason
    assert refused_head(request(Sec_WebSocket_Protocol="mqtt"), ()).status == 400


def test_any_path_and_case_insensitive_headers() -> None:
    raw = (b"GET / HTTP/1.1\r\nUPGRADE: WebSocket\r\nconnection: keep-alive,  upgrade\r\n"
           b"sec-websocket-key:" + KEY.encode() + b"\r\nSEC-WEBSOCKET-VERSION:  13 \r\n\r\n")  # fmt: skip
    [event] = ServerConnection(MQTT).feed(raw)
    assert isinstance(event, Accepted) and event.path == "/" and event.subprotocol is None


@pytest.mark.parametrize("raw, reason", [
    (request("POST /mqtt HTTP/1.1"), "GET"),
    (request("GET /mqtt HTTP/1.0"), "HTTP/1.1"),
    (request("GET /mqtt"), "request line"),
    (request("GET  HTTP/1.1"), "request line"),
    (request(Upgrade=None), "Upgrade"),
    (request(Upgrade="h2c"), "Upgrade"),
    (request(Connection=None), "Connection"),
    (request(Connection="keep-alive"), "Connection"),
    (request(Sec_WebSocket_Version=None), "Version"),
    (request(Sec_WebSocket_Key=None), "Key"),
    (request(Sec_WebSocket_Key="not base64!!"), "Key"),
    (request(Sec_WebSocket_Key=base64.b64encode(b"x" * 15).decode()), "Key"),
    (request(Sec_WebSocket_Key=base64.b64encode(b"x" * 17).decode()), "Key"),
    (request(extra=[("Sec-WebSocket-Key", KEY)]), "Key"),  # two keys
    (request(extra=[("No colon here", "")]).replace(b"No colon here: ", b"No colon here"), "header"),
    (request(extra=[("Bad ", "x")]), "header"),  # space before the colon
    (request(extra=[("X-A", "1\r\n folded")]), "header"),  # obs-fold
])  # fmt: skip
def test_refusals_are_400(raw: bytes, reason: str) -> None:
    error = refused_head(raw)
    assert error.status == 400 and reason in error.reason
    response = error.response
    assert response.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    head, body = response.split(b"\r\n\r\n")
    assert b"\r\nConnection: close" in head and b"Content-Type: text/plain" in head
    assert body == (error.reason + "\n").encode() and f"Content-Length: {len(body)}".encode() in head
    assert b"Sec-WebSocket-Version" not in head


@pytest.mark.parametrize("version", ["8", "14", "13, 8"])
def test_another_version_is_426_naming_13(version: str) -> None:
    error = refused_head(request(Sec_WebSocket_Version=version))
    assert error.status == 426
    assert error.response.startswith(b"HTTP/1.1 426 Upgrade Required\r\n")
    assert b"\r\nSec-WebSocket-Version: 13\r\n" in error.response
    assert b"\r\nConnection: close\r\n" in error.response


def test_head_of_16_kib_accepted_one_more_byte_refused() -> None:
    base = request(extra=[("X-Pad", "")])
    fits = base.replace(b"X-Pad: ", b"X-Pad: " + b"a" * (MAX_HEAD - len(base)))
    assert len(fits) == MAX_HEAD
    assert isinstance(ServerConnection().feed(fits)[0], Accepted)
    assert refused_head(fits.replace(b"X-Pad: ", b"X-Pad: a")).status == 400


def test_endless_head_refused_at_the_limit_bytewise() -> None:
    codec = ServerConnection()
    codec.feed(b"GET / HTTP/1.1\r\nX: ")
    with pytest.raises(HandshakeError):
        for _ in range(MAX_HEAD):
            codec.feed(b"a")
            assert codec.buffered < MAX_HEAD
    with pytest.raises(HandshakeError):  # dead after an error
        codec.feed(request())


def test_handshake_cut_bytewise_then_frames_in_the_same_read() -> None:
    codec = ServerConnection(MQTT)
    events = bytewise(codec, request(Sec_WebSocket_Protocol="mqtt") + frame(2, b"\x10\x00"))
    assert isinstance(events[0], Accepted) and events[1:] == [Data(b"\x10\x00")]
    codec = ServerConnection(MQTT)
    events = codec.feed(request() + frame(2, b"abc") + frame(9, b"p"))
    assert events[1:] == [Data(b"abc"), Ping(b"p", b"\x8a\x01p")]


# -- client frames --


def test_lengths_of_7_16_and_64_bits() -> None:
    codec = opened()
    for n, wide in [(0, 0), (1, 0), (125, 0), (126, 0), (65535, 0), (65536, 0), (5, 2), (5, 8)]:
        payload = os.urandom(n)
        assert codec.feed(frame(2, payload, wide=wide)) == ([Data(payload)] if n else [])
    assert codec.buffered == 0


def test_fragments_pass_through_at_once_with_control_frames_between() -> None:
    codec = opened()
    assert codec.feed(frame(2, b"\x30\x05", fin=False)) == [Data(b"\x30\x05")]
    assert codec.feed(frame(9, b"hi")) == [Ping(b"hi", b"\x8a\x02hi")]
    assert codec.feed(frame(10, b"pong")) == []  # pongs are dropped
    assert codec.feed(frame(0, b"", fin=False) + frame(0, b"\x00\x01t", fin=False)) == [Data(b"\x00\x01t")]
    assert codec.feed(frame(0, b"xy")) == [Data(b"xy")]
    assert codec.feed(frame(2, b"next")) == [Data(b"next")]  # a new message may start


def test_frames_cut_bytewise_decode_as_whole() -> None:
    raw = frame(2, b"a" * 300, fin=False) + frame(9) + frame(0, b"b" * 70000) + frame(2, b"c")
    assert bytewise(opened(), raw) == opened().feed(raw) == [
        Data(b"a" * 300), Ping(b"", b"\x8a\x00"), Data(b"b" * 70000), Data(b"c")]


def test_close_is_echoed_then_the_rest_ignored() -> None:
    codec = opened()
    events = codec.feed(frame(2, b"x") + frame(8, b"\x03\xe8bye") + frame(2, b"late"))
    assert events == [Data(b"x"), CloseReceived(1000, "bye", b"\x88\x02\x03\xe8")]
    assert codec.state == "closed" and codec.buffered == 0
    assert codec.feed(frame(2, b"later")) == []
    with pytest.raises(LocalProtocolError):
        codec.send(b"x")


def test_close_without_a_code_and_after_ours() -> None:
    assert opened().feed(frame(8)) == [CloseReceived(None, "", b"\x88\x00")]
    codec = opened()
    assert codec.close(1001, "going away") == b"\x88\x0c\x03\xe9going away"
    assert codec.close() == b""
    with pytest.raises(LocalProtocolError):
        codec.send(b"x")
    assert codec.feed(frame(2, b"still read") + frame(8, b"\x03\xe9")) == [
        Data(b"still read"), CloseReceived(1001, "", b"")]  # no second close frame


@pytest.mark.parametrize("raw, code", [
    (frame(2, b"x", mask=None), 1002),
    (frame(1, b"text"), 1003),
    (frame(1, b"text", fin=False), 1003),
    *[(frame(2, b"x", rsv=rsv), 1002) for rsv in (0x40, 0x20, 0x10)],
    *[(frame(op, b"x"), 1002) for op in (3, 4, 5, 6, 7, 11, 12, 13, 14, 15)],
    (frame(9, b"x", fin=False), 1002),
    (frame(8, b"\x03\xe8", fin=False), 1002),
    (frame(9, b"x" * 126), 1002),
    (frame(10, b"x", wide=2), 1002),
    (frame(0, b"x"), 1002),  # continuation without a message
    (frame(2, b"x", fin=False) + frame(2, b"y"), 1002),  # a message inside a message
    (frame(2, b"x", fin=False) + frame(1, b"y"), 1003),
    (b"\x82\xff\x80" + bytes(7) + b"\x00" * 4, 1002),  # 64-bit length, top bit set
    (frame(8, b"\x03"), 1002),
    *[(frame(8, code.to_bytes(2, "big")), 1002) for code in (0, 999, 1004, 1005, 1006, 1015, 2999, 5000)],
    (frame(8, b"\x03\xe8\xff"), 1007),
    (frame(2, b"x" * 101), 1009),
    (frame(2, b"x" * 60, fin=False) + frame(0, b"y" * 41), 1009),
])  # fmt: skip
def test_errors_carry_their_close_code(raw: bytes, code: int) -> None:
    codec = opened(max_message_size=100)
    error = refused(raw, codec)
    assert error.code == code
    assert error.frame[:4] == b"\x88" + bytes([len(error.frame) - 2]) + code.to_bytes(2, "big")
    assert codec.close_sent and codec.close() == b""
    with pytest.raises(WebSocketError) as again:  # dead after an error
        codec.feed(frame(2, b"x"))
    assert again.value is error


def test_valid_close_codes() -> None:
    for code in (1000, 1001, 1002, 1003, 1007, 1011, 1014, 3000, 4999):
        [event] = opened().feed(frame(8, code.to_bytes(2, "big")))
        assert event == CloseReceived(code, "", b"\x88\x02" + code.to_bytes(2, "big"))


def test_errors_are_found_from_the_first_bytes() -> None:
    assert refused(b"\x82\x05").code == 1002  # unmasked: the mask bit is in the second byte
    assert refused(b"\x81\x85").code == 1003
    assert refused(b"\x89\x7e").code == 1002  # a control frame cannot be this long


def test_too_big_is_found_from_the_header_before_the_payload() -> None:
    codec = opened(max_message_size=1000)
    header = b"\x82\xfe" + (1001).to_bytes(2, "big")  # not even the mask yet
    assert refused(header, codec).code == 1009
    codec = opened(max_message_size=1000)
    assert refused(b"\x82\xff" + (1 << 62).to_bytes(8, "big"), codec).code == 1009
    codec = opened(max_message_size=1000)
    codec.feed(frame(2, b"a" * 1000)[:-1])
    assert codec.buffered == 4 + 4 + 1000 - 1  # header, mask, all but the last byte: within the limit
    assert codec.feed(frame(2, b"a" * 1000)[-1:]) == [Data(b"a" * 1000)]


def test_an_error_carries_the_events_before_it() -> None:
    codec = opened()
    error = refused(frame(2, b"ok") + frame(9, b"p") + frame(1, b"t"), codec)
    assert error.events == [Data(b"ok"), Ping(b"p", b"\x8a\x01p")]
    codec = ServerConnection(MQTT)
    with pytest.raises(WebSocketError) as e:
        codec.feed(request() + frame(2, b"x", mask=None))
    assert isinstance(e.value.events[0], Accepted) and len(e.value.events) == 1


# -- server frames --


@pytest.mark.parametrize("n, header", [
    (0, b"\x82\x00"), (125, b"\x82\x7d"), (126, b"\x82\x7e\x00\x7e"), (65535, b"\x82\x7e\xff\xff"),
    (65536, b"\x82\x7f\x00\x00\x00\x00\x00\x01\x00\x00"),
])  # fmt: skip
def test_server_frames_are_final_binary_unmasked(n: int, header: bytes) -> None:
    payload = os.urandom(n)
    assert opened().send(payload) == header + payload
    assert frame_header(2, n) == header


def test_send_or_close_before_the_handshake_is_our_mistake() -> None:
    codec = ServerConnection()
    with pytest.raises(LocalProtocolError):
        codec.send(b"x")
    with pytest.raises(LocalProtocolError):
        codec.close()
    with pytest.raises(LocalProtocolError):
        ServerConnection(max_message_size=0)


# -- Hypothesis --

messages = st.lists(st.binary(max_size=300), min_size=1, max_size=4)  # one message's fragments
controls = st.tuples(st.sampled_from([9, 10]), st.binary(max_size=125))


@FUZZ
@given(data=st.data())
def test_random_frame_sequences_round_trip(data: st.DataObject) -> None:
    raw, payloads, pings = b"", [], []
    for _ in range(data.draw(st.integers(0, 6))):
        fragments = data.draw(messages)
        for i, fragment in enumerate(fragments):
            mask = data.draw(st.binary(min_size=4, max_size=4))
            raw += frame(2 if i == 0 else 0, fragment, fin=i == len(fragments) - 1, mask=mask,
                         wide=data.draw(st.sampled_from([0, 2, 8])))  # fmt: skip
            payloads.append(fragment)
            if data.draw(st.booleans()):
                opcode, body = data.draw(controls)
                raw += frame(opcode, body, mask=data.draw(st.binary(min_size=4, max_size=4)))
                pings += [body] if opcode == 9 else []
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=10)))
    codec = opened()
    events = [e for a, b in zip([0, *cuts], [*cuts, len(raw)]) for e in codec.feed(raw[a:b])]
    assert b"".join(e.payload for e in events if isinstance(e, Data)) == b"".join(payloads)
    assert [e for e in events if isinstance(e, Ping)] == [Ping(p, frame_header(10, len(p)) + p) for p in pings]
    assert codec.buffered == 0


# frames near the valid ones: any opcode, FIN, reserved bits, mask or none, length form
near_frames = st.builds(
    frame, st.integers(0, 15), st.binary(max_size=200), st.booleans(),
    st.one_of(st.none(), st.binary(min_size=4, max_size=4)), st.sampled_from([0, 0, 0, 0x40]),
    st.sampled_from([0, 2, 8]),
)  # fmt: skip


@FUZZ
@given(chunks=st.lists(st.one_of(st.binary(max_size=200), near_frames), max_size=8),
       cuts=st.lists(st.integers(0, 1600), max_size=6), limit=st.integers(1, 300))  # fmt: skip
def test_arbitrary_bytes_after_the_handshake(chunks: list[bytes], cuts: list[int], limit: int) -> None:
    codec = opened(max_message_size=limit)
    raw = b"".join(chunks)
    bounds = sorted({0, len(raw), *(c for c in cuts if c < len(raw))})
    try:
        for a, b in zip(bounds, bounds[1:]):
            for event in codec.feed(raw[a:b]):
                assert isinstance(event, (Data, Ping, CloseReceived))
                assert not isinstance(event, Data) or len(event.payload) <= limit
            assert codec.buffered <= max(limit, 125) + 14
    except WebSocketError as e:
        assert e.code in (1002, 1003, 1007, 1009) and e.frame[0] == 0x88


@FUZZ
@given(chunks=st.lists(st.binary(max_size=3000), max_size=8),
       prefix=st.sampled_from([b"", b"GET / HTTP/1.1\r\n", request()[:-2]]))  # fmt: skip
def test_arbitrary_bytes_as_a_handshake(chunks: list[bytes], prefix: bytes) -> None:
    codec = ServerConnection(MQTT)
    try:
        for chunk in [prefix, *chunks]:
            codec.feed(chunk)
            assert codec.buffered <= MAX_HEAD + 3000
    except HandshakeError as e:
        assert e.status in (400, 426) and e.response.startswith(b"HTTP/1.1 4")
    except WebSocketError as e:
        assert e.code in (1002, 1003, 1007, 1009)


# -- the Twisted wrapper --


class Echo(Protocol):
    made = lost = 0
    transport: Any

    def connectionMade(self) -> None:
        self.made += 1

    def dataReceived(self, data: bytes) -> None:
        if data == b"quit":
            self.transport.loseConnection()
        elif data == b"seq":
            self.transport.writeSequence([b"a", b"b", b"c"])
        else:
            self.transport.write(data)

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:
        self.lost += 1


def connect(clock: Clock | None = None) -> tuple[WebSocketProtocol, Echo, StringTransport]:
    factory = WebSocketFactory(Factory.forProtocol(Echo), MQTT, 1000, clock=clock or Clock())
    proto = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1883))  # type: ignore[arg-type]
    assert proto is not None
    transport = StringTransport(peerAddress=IPv4Address("TCP", "10.0.0.7", 51000))
    proto.makeConnection(transport)
    return proto, proto.wrappedProtocol, transport  # type: ignore[return-value]


def handshaken() -> tuple[WebSocketProtocol, Echo, StringTransport]:
    proto, echo, transport = connect()
    assert echo.made == 0  # not before the handshake
    proto.dataReceived(request(Sec_WebSocket_Protocol="mqtt"))
    assert transport.value().startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    assert echo.made == 1
    transport.clear()
    return proto, echo, transport


def test_wrapper_echoes_a_binary_frame() -> None:
    proto, echo, transport = handshaken()
    proto.dataReceived(frame(2, b"\x10\x0c"))
    assert transport.value() == b"\x82\x02\x10\x0c"
    transport.clear()
    proto.dataReceived(frame(2, b"seq"))
    assert transport.value() == b"\x82\x03abc"  # writeSequence: one frame
    assert echo.transport is proto and proto.getPeer() == IPv4Address("TCP", "10.0.0.7", 51000)
    assert not transport.disconnecting


def test_wrapper_handshake_failure_is_400_and_closed() -> None:
    proto, echo, transport = connect()
    proto.dataReceived(request(Upgrade=None))
    assert transport.value().startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert transport.disconnecting
    proto.connectionLost(Failure(Exception("gone")))
    assert echo.made == echo.lost == 0  # never connected, so never told of the loss


def test_wrapper_inner_lose_connection_sends_close_1000() -> None:
    proto, echo, transport = handshaken()
    proto.dataReceived(frame(2, b"quit") + frame(2, b"after"))
    assert transport.value() == b"\x88\x02\x03\xe8" and transport.disconnecting
    proto.write(b"dropped")
    assert transport.value() == b"\x88\x02\x03\xe8"
    proto.connectionLost(Failure(Exception("closed")))
    assert echo.lost == 1


def test_wrapper_protocol_error_and_peer_close_and_ping() -> None:
    proto, echo, transport = handshaken()
    proto.dataReceived(frame(9, b"p"))
    assert transport.value() == b"\x8a\x01p"
    transport.clear()
    proto.dataReceived(frame(2, b"ok") + frame(1, b"text"))
    assert transport.value() == b"\x82\x02ok" + b"\x88\x1f\x03\xebtext frames are not supported"
    assert transport.disconnecting
    proto, echo, transport = handshaken()
    proto.dataReceived(frame(8, b"\x03\xe9"))
    assert transport.value() == b"\x88\x02\x03\xe9" and transport.disconnecting


def test_wrapper_handshake_timeout() -> None:
    clock = Clock()
    proto, echo, transport = connect(clock)
    clock.advance(9.9)
    assert not transport.disconnecting
    clock.advance(0.2)
    assert transport.disconnecting and echo.made == 0
    clock = Clock()
    proto, echo, transport = connect(clock)
    proto.dataReceived(request())
    clock.advance(60)
    assert not transport.disconnecting and not clock.getDelayedCalls()


def test_wrapper_frames_in_the_handshake_read_and_host() -> None:
    proto, echo, transport = connect()
    proto.dataReceived(request() + frame(2, b"early"))
    head, frames = transport.value().split(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 ") and b"Sec-WebSocket-Protocol" not in head
    assert frames == b"\x82\x05early"
    assert proto.getHost() == transport.getHost()
    proto.connectionLost(Failure(Exception("gone")))
    assert echo.made == echo.lost == 1
