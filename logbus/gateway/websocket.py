"""The server side of WebSocket (RFC 6455): a sans-I/O codec, and the Twisted wrapper that
serves another protocol (MQTT over WebSocket) behind it.

Theory of operation
-------------------
``ServerConnection.feed(data)`` returns the events the bytes complete, in order, in one of
three states:

1. HANDSHAKE: the bytes are an HTTP/1.1 request head, kept until its blank line (at most
   ``MAX_HEAD`` bytes). It must be ``GET <any path> HTTP/1.1`` with ``Upgrade: websocket``,
   an ``upgrade`` token in ``Connection``, ``Sec-WebSocket-Version: 13`` (another version
   is 426 Upgrade Required) and a ``Sec-WebSocket-Key`` that is the base64 of 16 bytes.
   The first subprotocol the client offers that we accept is chosen; an offer with none
   we accept is refused, no offer at all accepted without one (as Mosquitto does). Success
   is ``Accepted``, carrying the 101; a refusal raises ``HandshakeError``, carrying the
   400/426 response. Bytes after the head are frames.
2. OPEN: the bytes are client frames. A header is checked as soon as its bytes are there:
   reserved bits or opcodes, an unmasked frame, a fragmented or over 125 bytes control
   frame, a continuation with no message open or a new message while one is, a 64-bit
   length with the top bit set are 1002; a text frame is 1003 (MQTT over WebSocket is
   binary only, MQTT 5.0 section 6.0); a message whose length so far passes
   ``max_message_size`` is 1009, before its payload is buffered. A whole frame's payload
   is unmasked and handed out: binary or continuation as ``Data`` at once, without
   waiting for the end of the message (the MQTT decoder reassembles packets across
   frames: message boundaries are not packet boundaries); a ping as ``Ping`` carrying the
   pong; a close as ``CloseReceived`` carrying the close frame echoing its code. Pongs are
   dropped; lengths not in their shortest form are accepted.
3. CLOSED: after the peer's close further bytes are ignored. After an error
   (``HandshakeError``, or ``WebSocketError`` carrying the close code, its close frame and
   the events decoded before it) the codec is dead, ``feed`` raises the same error again
   and the connection is to be closed.

What is kept between calls is one partial request head or frame: at most ``MAX_HEAD``, or
``max_message_size`` + 14, bytes. ``send(data)`` is one final, unmasked binary frame;
``close(code)`` our close frame, after which ``send`` is a ``LocalProtocolError``.

``WebSocketFactory(inner_factory, subprotocols, max_message_size)`` wraps a factory. Its
protocol is the inner protocol's transport, and connects it only once the 101 is written:
the inner protocol reads and writes payload bytes, and its ``loseConnection`` sends the
close frame 1000 first.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from twisted.internet.interfaces import IAddress, IProtocol, IProtocolFactory
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.python.failure import Failure
from zope.interface import directlyProvides, providedBy  # type: ignore[import-untyped]

log = logging.getLogger(__name__)

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_HEAD = 16 * 1024
DEFAULT_MAX_MESSAGE_SIZE = 1 << 20
DEFAULT_HANDSHAKE_TIMEOUT = 10.0

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
# close codes (RFC 6455 section 7.4.1)
NORMAL, PROTOCOL_ERROR, UNSUPPORTED_DATA, INVALID_DATA, TOO_BIG = 1000, 1002, 1003, 1007, 1009
# the codes a close frame may carry: 1004-1006 and 1015 are reserved, 1016-2999 unassigned
_VALID_CLOSE = frozenset([*range(1000, 1004), *range(1007, 1015), *range(3000, 5000)])
_STATUS = {400: "Bad Request", 426: "Upgrade Required"}

HANDSHAKE, OPEN, CLOSED = "handshake", "open", "closed"


@dataclass(frozen=True, slots=True)
class Accepted:
    """The handshake succeeded: write ``response``, then the connection is open."""

    path: str
    subprotocol: str | None
    response: bytes


@dataclass(frozen=True, slots=True)
class Data:
    """Payload bytes of a binary message (one frame's worth, maybe a fragment)."""

    payload: bytes


@dataclass(frozen=True, slots=True)
class Ping:
    payload: bytes
    reply: bytes  # the pong frame to write


@dataclass(frozen=True, slots=True)
class CloseReceived:
    """The peer closed: write ``reply`` (empty if we sent our close first), then close."""

    code: int | None
    reason: str
    reply: bytes


Event = Accepted | Data | Ping | CloseReceived


class HandshakeError(Exception):
    """The opening handshake is refused: write ``response`` and close the connection."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason

    @property
    def response(self) -> bytes:
        body = (self.reason + "\n").encode()
        extra = "Sec-WebSocket-Version: 13\r\n" if self.status == 426 else ""
        return (f"HTTP/1.1 {self.status} {_STATUS[self.status]}\r\n{extra}"
                f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n").encode() + body  # fmt: skip


class WebSocketError(Exception):
    """The peer broke RFC 6455: write ``frame`` (the close frame with ``code``), then close."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code} {reason}")
        self.code = code
        self.reason = reason
        self.events: list[Event] = []  # decoded before the error

    @property
    def frame(self) -> bytes:
        return close_frame(self.code, self.reason)


class LocalProtocolError(Exception):
    """The codec was asked for something its state forbids (our mistake, not the peer's)."""


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for the client's ``Sec-WebSocket-Key``."""
    return base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()


def frame_header(opcode: int, length: int) -> bytes:
    """The header of an unmasked final frame (the server's)."""
    if length < 126:
        return bytes((0x80 | opcode, length))
    if length < 1 << 16:
        return struct.pack("!BBH", 0x80 | opcode, 126, length)
    return struct.pack("!BBQ", 0x80 | opcode, 127, length)


def binary_frame(data: bytes) -> bytes:
    return frame_header(BINARY, len(data)) + data


def close_frame(code: int | None, reason: str = "") -> bytes:
    text = reason.encode()[:123].decode(errors="ignore").encode()  # 125 bytes at most
    body = b"" if code is None else code.to_bytes(2, "big") + text
    return frame_header(CLOSE, len(body)) + body


def unmask(data: bytes | memoryview, mask: bytes) -> bytes:
    """``data`` XOR the repeated 4-byte ``mask`` (its own inverse), in C via big ints."""
    n = len(data)
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")


def _tokens(values: list[str]) -> list[str]:
    return [t.strip() for v in values for t in v.split(",") if t.strip()]


def handshake(head: bytes, subprotocols: Sequence[str]) -> Accepted:
    """The ``Accepted`` for a request head (ending in its blank line) or ``HandshakeError``."""
    lines = head.decode("latin-1").split("\r\n")[:-2]
    request = lines[0].split(" ")
    if len(request) != 3 or not request[1]:
        raise HandshakeError(400, "malformed request line")
    method, path, version = request
    if method != "GET":
        raise HandshakeError(400, "method must be GET")
    if version != "HTTP/1.1":
        raise HandshakeError(400, "protocol must be HTTP/1.1")
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or line[0] in " \t":
            raise HandshakeError(400, "malformed header line")
        headers.setdefault(name.lower(), []).append(value.strip(" \t"))
    if "websocket" not in (t.lower() for t in _tokens(headers.get("upgrade", []))):
        raise HandshakeError(400, "Upgrade: websocket missing")
    if "upgrade" not in (t.lower() for t in _tokens(headers.get("connection", []))):
        raise HandshakeError(400, "Connection: upgrade missing")
    versions = headers.get("sec-websocket-version", [])
    if not versions:
        raise HandshakeError(400, "Sec-WebSocket-Version missing")
    if versions != ["13"]:
        raise HandshakeError(426, "Sec-WebSocket-Version must be 13")
    keys = headers.get("sec-websocket-key", [])
    try:
        if len(keys) != 1 or len(base64.b64decode(keys[0], validate=True)) != 16:
            raise ValueError
    except ValueError:
        raise HandshakeError(400, "Sec-WebSocket-Key must be the base64 of 16 bytes") from None
    offered = _tokens(headers.get("sec-websocket-protocol", []))
    chosen = next((p for p in offered if p in subprotocols), None)
    if offered and chosen is None:
        raise HandshakeError(400, f"no subprotocol of {', '.join(offered)} is supported")
    response = ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Accept: {accept_key(keys[0])}\r\n")  # fmt: skip
    if chosen is not None:
        response += f"Sec-WebSocket-Protocol: {chosen}\r\n"
    return Accepted(path, chosen, (response + "\r\n").encode("latin-1"))


class ServerConnection:
    """``feed(data) -> list[Event]``, ``send(data) -> bytes``; see the theory of operation."""

    def __init__(self, subprotocols: Sequence[str] = (),
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:  # fmt: skip
        if max_message_size < 1:
            raise LocalProtocolError(f"max_message_size {max_message_size} out of range")
        self.subprotocols = tuple(subprotocols)
        self.max_message_size = max_message_size
        self.state = HANDSHAKE
        self.close_sent = False
        self._pending = bytearray()
        self._fragmented = False  # a binary message is open, awaiting continuations
        self._message_size = 0  # its bytes so far
        self._error: HandshakeError | WebSocketError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for a request head or a frame not yet whole."""
        return len(self._pending)

    def feed(self, data: bytes) -> list[Event]:
        if self._error is not None:
            raise self._error
        events: list[Event] = []
        try:
            if self.state == HANDSHAKE:
                data = self._handshake(data, events)
            if self.state != OPEN or not data:
                return events
            if self._pending:
                self._pending += data
                used = self._frames(self._pending, events)
                del self._pending[:used]
            else:
                used = self._frames(data, events)
                self._pending = bytearray(memoryview(data)[used:])
            if self.state == CLOSED:
                self._pending = bytearray()
        except (HandshakeError, WebSocketError) as e:
            self._pending = bytearray()
            self.state = CLOSED
            self._error = e
            if isinstance(e, WebSocketError):
                e.events = events
                self.close_sent = True
            raise
        return events

    def send(self, data: bytes) -> bytes:
        """``data`` as one binary frame."""
        if self.state != OPEN or self.close_sent:
            raise LocalProtocolError(f"send on a connection {self.state}")
        return binary_frame(data)

    def close(self, code: int = NORMAL, reason: str = "") -> bytes:
        """Our close frame, or nothing if one was sent already."""
        if self.state == HANDSHAKE:
            raise LocalProtocolError("close before the handshake")
        if self.close_sent:
            return b""
        self.close_sent = True
        return close_frame(code, reason)

    def _handshake(self, data: bytes, events: list[Event]) -> bytes:
        """Buffer the request head; once whole, handshake and return the bytes after it."""
        start = max(0, len(self._pending) - 3)
        self._pending += data
        end = self._pending.find(b"\r\n\r\n", start, MAX_HEAD)
        if end < 0:
            if len(self._pending) >= MAX_HEAD:
                raise HandshakeError(400, f"request head over {MAX_HEAD} bytes")
            return b""
        head, rest = bytes(self._pending[:end + 4]), bytes(self._pending[end + 4:])
        self._pending = bytearray()
        events.append(handshake(head, self.subprotocols))
        self.state = OPEN
        return rest

    def _frames(self, data: bytes | bytearray, out: list[Event]) -> int:
        """Append the events of every whole frame of ``data`` to ``out``; the bytes used."""
        buf = memoryview(data)
        size = len(buf)
        pos = 0
        while self.state == OPEN and pos + 2 <= size:
            first, second = buf[pos], buf[pos + 1]
            opcode, length = first & 0x0F, second & 0x7F
            if first & 0x70:
                raise WebSocketError(PROTOCOL_ERROR, "reserved bits set")
            if opcode == TEXT:
                raise WebSocketError(UNSUPPORTED_DATA, "text frames are not supported")
            if opcode not in _OPCODES:
                raise WebSocketError(PROTOCOL_ERROR, f"reserved opcode {opcode}")
            if not second & 0x80:
                raise WebSocketError(PROTOCOL_ERROR, "unmasked client frame")
            if opcode >= CLOSE:
                if not first & 0x80:
                    raise WebSocketError(PROTOCOL_ERROR, "fragmented control frame")
                if length > 125:
                    raise WebSocketError(PROTOCOL_ERROR, "control frame over 125 bytes")
            elif opcode == CONTINUATION and not self._fragmented:
                raise WebSocketError(PROTOCOL_ERROR, "continuation without a message")
            elif opcode == BINARY and self._fragmented:
                raise WebSocketError(PROTOCOL_ERROR, "new message inside a fragmented one")
            start = pos + 2
            if length >= 126:
                width = 2 if length == 126 else 8
                if start + width > size:
                    break
                length = int.from_bytes(buf[start:start + width], "big")
                start += width
                if length >> 63:
                    raise WebSocketError(PROTOCOL_ERROR, "64-bit length with its top bit set")
            if opcode < CLOSE and self._message_size + length > self.max_message_size:
                raise WebSocketError(TOO_BIG, f"message over {self.max_message_size} bytes")
            end = start + 4 + length
            if end > size:
                break
            payload = unmask(buf[start + 4:end], bytes(buf[start:start + 4]))
            pos = end
            _OPCODES[opcode](self, bool(first & 0x80), payload, out)
        return pos

    def _data(self, fin: bool, payload: bytes, out: list[Event]) -> None:
        self._fragmented = not fin
        self._message_size = 0 if fin else self._message_size + len(payload)
        if payload:
            out.append(Data(payload))

    def _close(self, fin: bool, payload: bytes, out: list[Event]) -> None:
        code: int | None = None
        if len(payload) == 1:
            raise WebSocketError(PROTOCOL_ERROR, "close frame with a 1-byte body")
        if payload:
            code = int.from_bytes(payload[:2], "big")
            if code not in _VALID_CLOSE:
                raise WebSocketError(PROTOCOL_ERROR, f"close code {code}")
        try:
            reason = payload[2:].decode()
        except UnicodeDecodeError:
            raise WebSocketError(INVALID_DATA, "close reason not UTF-8") from None
        self.state = CLOSED
        reply = b"" if self.close_sent else close_frame(code)
        self.close_sent = True
        out.append(CloseReceived(code, reason, reply))

    def _ping(self, fin: bool, payload: bytes, out: list[Event]) -> None:
        out.append(Ping(payload, frame_header(PONG, len(payload)) + payload))


# opcode -> what a whole frame of it does (the header checks are in _frames); a missing
# opcode is reserved (1002), except TEXT, refused first (1003)
_OPCODES = {
    CONTINUATION: ServerConnection._data,
    BINARY: ServerConnection._data,
    CLOSE: ServerConnection._close,
    PING: ServerConnection._ping,
    PONG: lambda self, fin, payload, out: None,
}


class WebSocketProtocol(ProtocolWrapper):
    """Runs a ``ServerConnection`` and is the transport of the wrapped protocol, which is
    connected once the handshake succeeds and sees only payload bytes."""

    def __init__(self, factory: WebSocketFactory, wrappedProtocol: IProtocol) -> None:
        super().__init__(factory, wrappedProtocol)
        self.codec = ServerConnection(factory.subprotocols, factory.max_message_size)
        # twisted's transports and protocols are zope interfaces, whose methods mypy cannot
        # call without the mypy-zope plugin: both are Any here
        self.inner: Any = wrappedProtocol
        self.inner_connected = False
        self._open = False  # between the 101 and our close frame (or the HTTP error)
        self._timeout: Any = None  # IDelayedCall
        self._ws_factory = factory

    def makeConnection(self, transport: Any) -> None:
        # ProtocolWrapper.makeConnection without connecting the wrapped protocol
        directlyProvides(self, providedBy(transport))
        Protocol.makeConnection(self, transport)
        self.factory.registerProtocol(self)
        factory = self._ws_factory
        if factory.handshake_timeout is not None:
            self._timeout = factory.clock.callLater(factory.handshake_timeout, self._handshake_timed_out)

    @property
    def _out(self) -> Any:
        return self.transport

    def dataReceived(self, data: bytes) -> None:
        if self.disconnecting:
            return
        try:
            events = self.codec.feed(data)
        except HandshakeError as e:
            self._out.write(e.response)
            self._shut()
            return
        except WebSocketError as e:
            self._handle(e.events)
            if not self.disconnecting:
                self._out.write(e.frame)
                self._shut()
            return
        self._handle(events)

    def _handle(self, events: list[Event]) -> None:
        for event in events:
            if self.disconnecting:
                return
            if isinstance(event, Data):
                self.inner.dataReceived(event.payload)
            elif isinstance(event, Accepted):
                self._cancel_timeout()
                self._out.write(event.response)
                self._open = self.inner_connected = True
                self.inner.makeConnection(self)
            elif isinstance(event, Ping):
                self._out.write(event.reply)
            else:
                self._out.write(event.reply)
                self._shut()

    def _handshake_timed_out(self) -> None:
        self._timeout = None
        factory = self._ws_factory
        log.info("WebSocket %s: no complete upgrade within %.1f s (handshake_timeout_ms): closed",
                 self._out.getPeer(), factory.handshake_timeout)
        if factory.on_handshake_timeout is not None:
            factory.on_handshake_timeout()
        self._shut()

    def _shut(self) -> None:
        self._cancel_timeout()
        self._open = False
        self.disconnecting = 1
        self._out.loseConnection()

    # the wrapped protocol's transport

    def write(self, data: bytes) -> None:
        # not codec.send: after a peer's error the events before it are still delivered,
        # and what the wrapped protocol answers to them goes out before our close frame
        if self._open and data:
            self._out.write(binary_frame(data))

    def writeSequence(self, data: Iterable[bytes]) -> None:
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        if self.disconnecting:
            return
        if self.codec.state != HANDSHAKE:
            self._out.write(self.codec.close(NORMAL))
        self._shut()

    def _cancel_timeout(self) -> None:
        if self._timeout is not None and self._timeout.active():
            self._timeout.cancel()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._cancel_timeout()
        self.factory.unregisterProtocol(self)
        if self.inner_connected:
            self.inner_connected = False
            self.inner.connectionLost(reason)


class WebSocketFactory(WrappingFactory[WebSocketProtocol]):
    """Serves ``wrapped_factory``'s protocol over WebSocket, e.g.
    ``WebSocketFactory(mqtt_factory, ("mqtt", "mqttv3.1"), max_message_size)``.
    A client that has not finished the handshake within ``handshake_timeout`` seconds
    (None: no limit) is disconnected, logged and told to ``on_handshake_timeout``; ``clock``
    defaults to the global reactor."""

    protocol = WebSocketProtocol

    def __init__(self, wrapped_factory: IProtocolFactory | Factory[Any],
                 subprotocols: Sequence[str] = (), max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
                 clock: Any = None, on_handshake_timeout: Callable[[], None] | None = None) -> None:  # fmt: skip
        super().__init__(wrapped_factory)
        if max_message_size < 1:
            raise LocalProtocolError(f"max_message_size {max_message_size} out of range")
        self.subprotocols = tuple(subprotocols)
        self.max_message_size = max_message_size
        self.handshake_timeout = handshake_timeout
        self.on_handshake_timeout = on_handshake_timeout  # counts it, say
        if clock is None:
            from twisted.internet import reactor as clock
        self.clock = clock  # IReactorTime

    def buildProtocol(  # type: ignore[override]
        self, addr: IAddress | None
    ) -> WebSocketProtocol | None:
        """None, refusing the connection, when the wrapped factory refuses it."""
        inner = self.wrappedFactory.buildProtocol(addr)
        return None if inner is None else WebSocketProtocol(self, inner)
