"""AMQP 0-9-1, broker side, sans I/O: the protocol header, framing, content assembly
and the frames the broker sends.

    decoder = Decoder(max_message_size=128 << 20)
    try:
        events = decoder.feed(data)
    except BadProtocolHeader as e:      # write e.reply (our protocol header), close
        ...
    except AMQPConnectionError as e:    # e.events were decoded before the error;
        ...                             # send e.close_frame(), close the connection
    for event in events:                # Publish, Ack, Nack, Reject, MethodReceived,
        ...                             # ContentReceived, Heartbeat, ChannelFailed
    decoder.frame_max = tune_ok.frame_max   # once Connection.Tune-Ok has arrived

Theory of operation. A connection starts with ``AMQP\\x00\\x00\\x09\\x01``; anything
else is refused (the spec: answer with the header we speak, then close). Then
frames: ``type:u8 channel:u16 size:u32 payload 0xCE``. The size is checked against
frame_max (4096 until tuned; RabbitMQ lets a payload reach frame_max itself, not just
frame_max - 8, because clients get it wrong, and so do we) and the type against the
four known ones as soon as the 7 header bytes are in, before any payload is kept. A
frame cut short is kept as a list of chunks and joined once complete.

Methods: basic.publish/ack/nack/reject are decoded by hand (fastpath.py), every
other method by pamqp, except that the fields of methods carrying a field table are
read by fastpath walking pamqp's own field list (pamqp's table decoder is quadratic).
A content-bearing method (publish, return, deliver, get-ok) must be followed on its
channel by one content header and then body frames up to the declared size; any other
frame on that channel is UNEXPECTED_FRAME, as in RabbitMQ's rabbit_command_assembler.
Body frames are joined once, into one event per message. A publish whose header and
single body frame sit right behind it in the same buffer (the usual case) is decoded
in one step; anything unusual falls back to the per-channel state above.

Errors. Hard errors (frame errors, unexpected frames, unknown methods) raise
``AMQPConnectionError``; the decoder is then dead. Soft errors concern one message on
one channel (a body over max_message_size: PRECONDITION_FAILED, as RabbitMQ; too much
content pending on the connection: CONTENT_TOO_LARGE); they arrive in the event list
as ``ChannelFailed`` so that decoding goes on (raising would lose the events after it),
and the rest of that message is skipped without being buffered. Closing the channel
and ignoring its frames until Channel.Close-Ok is the state machine's work.

Events live in events.py, exceptions and reply codes in errors.py, the hand-written
encoders and decoders in fastpath.py; this module re-exports what a gateway needs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from pamqp import base, commands, frame

from .errors import (
    CHANNEL_ERROR,
    CONTENT_TOO_LARGE,
    FRAME_ERROR,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    PROTOCOL_HEADER,
    UNEXPECTED_FRAME,
    AMQPChannelError,
    AMQPConnectionError,
    AMQPError,
    AMQPProtocolError,
    BadProtocolHeader,
    LocalProtocolError,
    MalformedFrame,
)
from .events import (
    HEARTBEAT,
    Ack,
    ChannelFailed,
    ContentReceived,
    Event,
    Heartbeat,
    MethodReceived,
    Nack,
    Publish,
    Reject,
)
from .fastpath import (
    CONTENT_HEAD,
    EMPTY_PROPERTIES,
    EMPTY_PROPERTIES_RAW,
    FRAME_END,
    FRAME_HEAD,
    TAG_BITS,
    U32,
    Properties,
    PublishFields,
    decode_method_fields,
    decode_publish,
    encode_ack,
    encode_deliver,
    encode_get_ok,
    encode_nack,
    encode_properties,
    encode_return,
)
from .shapes import properties_of

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE", "EMPTY_PROPERTIES", "FRAME_MIN_SIZE", "HEARTBEAT_FRAME", "PROTOCOL_HEADER",
    "AMQPChannelError", "AMQPConnectionError", "AMQPError", "AMQPProtocolError", "Ack", "BadProtocolHeader",
    "ChannelFailed", "ContentReceived", "Decoder", "Event", "Heartbeat", "LocalProtocolError", "MethodReceived",
    "Nack", "Properties", "Publish", "Reject", "encode_ack", "encode_deliver", "encode_get_ok", "encode_method",
    "encode_nack", "encode_properties", "encode_return",
]  # fmt: skip

HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"
FRAME_MIN_SIZE = 4096
DEFAULT_MAX_MESSAGE_SIZE = 128 << 20  # RabbitMQ's max_message_size default

_PUBLISH, _ACK, _REJECT, _NACK = 0x003C0028, 0x003C0050, 0x003C005A, 0x003C0078
_CONTENT_METHODS = {_PUBLISH, 0x003C0032, 0x003C003C, 0x003C0047}  # publish, return, deliver, get-ok
_METHODS = cast(dict[int, type[base.Frame]], commands.INDEX_MAPPING)
_TABLE_METHODS = {index for index, cls in _METHODS.items() if any(cls.amqp_type(a) == "table" for a in cls.__slots__)}


# -- encoding -------------------------------------------------------------------------


def encode_method(channel: int, method: base.Frame) -> bytes:
    """A method frame, by pamqp. The hot ones have their own encoders (fastpath.py)."""
    return frame.marshal(method, channel)


# -- decoding -------------------------------------------------------------------------


class _Content:
    """A content-bearing method waiting for its header and body on one channel."""

    __slots__ = ("discard", "fields", "index", "parts", "properties", "raw", "remaining", "shape", "size")

    def __init__(self, index: int, fields: PublishFields | base.Frame) -> None:
        self.index = index
        self.fields = fields
        self.size = self.remaining = 0
        self.properties: Properties | None = None  # None until the header is in
        self.raw = self.shape = EMPTY_PROPERTIES_RAW
        self.parts: list[bytes | memoryview] = []
        self.discard = False


class Decoder:
    """Bytes in, events out. Memory is bounded by frame_max for a frame being read and
    by ``max_pending_content`` (declared body sizes of messages being assembled,
    2 * max_message_size unless given) for bodies."""

    def __init__(
        self, *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, max_pending_content: int | None = None,
        expect_protocol_header: bool = True,
    ) -> None:  # fmt: skip
        self.max_message_size = max_message_size
        self.max_pending_content = 2 * max_message_size if max_pending_content is None else max_pending_content
        self._frame_max = FRAME_MIN_SIZE
        self._greeting: bytes | None = b"" if expect_protocol_header else None
        self._parts: list[bytes] = []  # a frame cut short
        self._have = 0
        self._need = 0  # its whole size once its head is known, else 0
        self._content: dict[int, _Content] = {}
        self._pending = 0  # declared body sizes being assembled
        self._held = 0  # body bytes held for them
        self._events: list[Event] = []
        self._failed: AMQPProtocolError | None = None
        # handlers take (buffer, channel, payload start, payload end), return where the next frame starts
        self._types: dict[int, Callable[[bytes, int, int, int], int]] = {
            1: self._method, 2: self._header, 3: self._body, 8: self._heartbeat,
        }  # fmt: skip
        self._fast: dict[int, Callable[[bytes, int, int, int], int]] = {
            _PUBLISH: self._publish, _ACK: self._ack, _NACK: self._nack, _REJECT: self._reject,
        }  # fmt: skip

    @property
    def frame_max(self) -> int:
        return self._frame_max

    @frame_max.setter
    def frame_max(self, value: int) -> None:
        if not FRAME_MIN_SIZE <= value <= 0xFFFFFFFF:  # 0 ("no limit") included: pass our own limit
            raise LocalProtocolError(f"frame_max must be {FRAME_MIN_SIZE}..2**32-1, not {value}")
        self._frame_max = value

    @property
    def greeted(self) -> bool:
        """The protocol header has arrived (frames follow)."""
        return self._greeting is None

    def clear(self) -> None:
        """Forget unfinished frames and bodies (the connection is gone): freed now, not at
        the next collection of the connection's reference cycles."""
        self._parts, self._have, self._need = [], 0, 0
        self._content.clear()
        self._pending = self._held = 0
        self._events = []

    @property
    def assembling(self) -> bool:
        """A basic.publish is in progress: its method has arrived, its content has not."""
        return bool(self._content)

    @property
    def buffered(self) -> int:
        """Bytes held: a frame cut short and the bodies of messages not yet complete."""
        return self._have + self._held + len(self._greeting or b"")

    def feed(self, data: bytes) -> list[Event]:
        """The events ``data`` completes. A hard error raises BadProtocolHeader or
        AMQPConnectionError (its ``events``: what this call decoded before it); the
        decoder is then dead and raises the same error again."""
        if self._failed is not None:
            raise self._failed
        if type(data) is not bytes:
            data = bytes(data)
        events: list[Event] = []
        self._events = events
        try:
            pos = 0
            if self._greeting is not None:
                pos = self._read_greeting(data)
            if self._parts and pos < len(data):
                data, pos = self._resume(data, pos)
            if pos < len(data):
                self._frames(data, pos)
        except AMQPConnectionError as e:
            e.events = events
            self._failed = e
            raise
        except BadProtocolHeader as bad:  # not ``e``: mypyc types a name by its first except clause
            self._failed = bad
            raise
        return events

    def _read_greeting(self, data: bytes) -> int:
        assert self._greeting is not None
        take = min(8 - len(self._greeting), len(data))
        got = self._greeting + data[:take]
        if not PROTOCOL_HEADER.startswith(got):  # refuse as soon as a byte is wrong
            raise BadProtocolHeader(got)
        self._greeting = None if len(got) == 8 else got
        return take

    def _resume(self, data: bytes, pos: int) -> tuple[bytes, int]:
        """Add to the frame cut short; once complete, decode it and return the rest."""
        self._parts.append(data[pos:] if pos else data)
        self._have += len(data) - pos
        if not self._need:  # the head itself was cut short: start over from one buffer
            joined = b"".join(self._parts)
            self._parts, self._have = [], 0
            return joined, 0
        if self._have < self._need:
            return b"", 0
        last = self._parts.pop()
        cut = len(last) - (self._have - self._need)  # bytes of the new data in this frame
        self._parts.append(last[:cut])
        whole = b"".join(self._parts)
        self._parts, self._have, self._need = [], 0, 0
        self._frames(whole, 0)
        return data, len(data) - (len(last) - cut)

    def _frames(self, buf: bytes, pos: int) -> None:
        end = len(buf)
        types = self._types
        while end - pos >= 7:
            ftype, channel, size = FRAME_HEAD.unpack_from(buf, pos)
            if size > self._frame_max:
                raise AMQPConnectionError(
                    FRAME_ERROR, f"type {ftype}, all octets = <<>>: {{frame_too_large,{size},{self._frame_max - 8}}}"
                )
            handler = types.get(ftype)
            if handler is None:
                raise AMQPConnectionError(FRAME_ERROR, f"type {ftype}, channel {channel}: unknown_frame")
            fend = pos + 7 + size
            if fend >= end:
                break
            if buf[fend] != FRAME_END:
                text = f"type {ftype}, {_snippet(buf[pos + 7 : fend])}: {{invalid_frame_end_marker,{buf[fend]}}}"
                raise AMQPConnectionError(FRAME_ERROR, text)
            pos = handler(buf, channel, pos + 7, fend)
        if pos < end:
            tail = buf[pos:]
            self._parts, self._have = [tail], len(tail)
            self._need = 8 + U32.unpack_from(tail, 3)[0] if len(tail) >= 7 else 0

    # frame types

    def _heartbeat(self, buf: bytes, channel: int, p: int, end: int) -> int:
        if end != p:
            raise AMQPConnectionError(FRAME_ERROR, f"type 8, {_snippet(buf[p:end])}: unknown_frame")
        if channel:
            raise AMQPConnectionError(UNEXPECTED_FRAME, f"type 8, channel {channel}: heartbeat off channel 0")
        self._events.append(HEARTBEAT)
        return end + 1

    def _method(self, buf: bytes, channel: int, p: int, end: int) -> int:
        if channel in self._content:
            raise self._unexpected(channel, "method")
        if end - p < 4:
            raise AMQPConnectionError(FRAME_ERROR, f"type 1, {_snippet(buf[p:end])}: method frame too short")
        index = U32.unpack_from(buf, p)[0]
        try:
            fast = self._fast.get(index)
            if fast is not None and channel:
                return fast(buf, channel, p + 4, end)
            cls = _METHODS.get(index)
            if cls is None:
                raise AMQPConnectionError(
                    NOT_IMPLEMENTED, f"unknown method: class {index >> 16}, method {index & 0xFFFF}",
                    class_id=index >> 16, method_id=index & 0xFFFF,
                )  # fmt: skip
            if (index >> 16 == 10) != (channel == 0):
                where = "only allowed on channel 0" if channel else "not allowed on channel 0"
                raise AMQPConnectionError(
                    CHANNEL_ERROR, f"{cls.name} is {where}",
                    channel=channel, class_id=index >> 16, method_id=index & 0xFFFF,
                )  # fmt: skip
            method = cls.__new__(cls)  # pamqp's own unmarshal() sets every field
            if index in _TABLE_METHODS:
                decode_method_fields(method, buf, p + 4, end)
            else:
                try:
                    method.unmarshal(buf[p + 4 : end])
                except Exception as e:  # noqa: BLE001 (pamqp raises several kinds on short input)
                    raise MalformedFrame(f"cannot decode {cls.name}: {e!r}") from None
        except MalformedFrame as e:
            raise AMQPConnectionError(FRAME_ERROR, str(e), class_id=index >> 16, method_id=index & 0xFFFF) from None
        if index in _CONTENT_METHODS:
            self._content[channel] = _Content(index, method)
        else:
            self._events.append(MethodReceived(channel, method))
        return end + 1

    def _header(self, buf: bytes, channel: int, p: int, end: int) -> int:
        content = self._content.get(channel)
        if content is None or content.properties is not None:
            raise self._unexpected(channel, "content header")
        index = content.index
        if end - p < 14:
            raise AMQPConnectionError(FRAME_ERROR, "content header is cut short", class_id=60, method_id=index & 0xFFFF)
        class_id, weight, size = CONTENT_HEAD.unpack_from(buf, p)
        if class_id != 60:
            raise AMQPConnectionError(
                UNEXPECTED_FRAME, f"expected content header for class 60, got one for class {class_id} instead",
                class_id=60, method_id=index & 0xFFFF,
            )  # fmt: skip
        if weight:
            raise self._unexpected(channel, "weighted content header")
        try:
            content.properties, content.raw, content.shape = properties_of(buf, p + 12, end)
        except MalformedFrame as e:
            raise AMQPConnectionError(FRAME_ERROR, str(e), class_id=60, method_id=index & 0xFFFF) from None
        content.size = content.remaining = size
        if size > self.max_message_size:
            text = f"message size {size} is larger than configured max size {self.max_message_size}"
            self._refuse(channel, content, PRECONDITION_FAILED, text)
        elif size and self._pending + size > self.max_pending_content:
            text = f"message size {size} takes this connection's pending content past {self.max_pending_content}"
            self._refuse(channel, content, CONTENT_TOO_LARGE, text)
        elif size:
            self._pending += size
        else:
            del self._content[channel]
            self._complete(channel, content, b"")
        return end + 1

    def _body(self, buf: bytes, channel: int, p: int, end: int) -> int:
        content = self._content.get(channel)
        if content is None or content.properties is None:
            raise self._unexpected(channel, "content body")
        size = end - p
        if size > content.remaining:
            text = "content body frame exceeds remaining content size"
            raise AMQPConnectionError(FRAME_ERROR, text, class_id=60, method_id=content.index & 0xFFFF)
        content.remaining -= size
        if content.discard:
            if not content.remaining:
                del self._content[channel]
            return end + 1
        # A part is copied out of its buffer unless it fills half of it or more: then a
        # view saves a copy and holds at most twice the body bytes.
        part = buf[p:end] if 2 * size < len(buf) else memoryview(buf)[p:end]
        if content.remaining:
            content.parts.append(part)
            self._held += size
            return end + 1
        del self._content[channel]
        self._pending -= content.size
        if content.parts:
            content.parts.append(part)
            self._held -= content.size - size
            self._complete(channel, content, b"".join(content.parts))
        else:
            self._complete(channel, content, bytes(part))
        return end + 1

    # hot methods

    def _publish(self, buf: bytes, channel: int, p: int, end: int) -> int:
        fields = decode_publish(buf, p, end)
        # The usual case, the header and a one-frame body right behind in this buffer, is
        # decoded here in one go; anything else (and every error) takes the general path.
        h, n = end + 1, len(buf)
        if n - h >= 22:
            ftype, ch, size = FRAME_HEAD.unpack_from(buf, h)
            hend = h + 7 + size
            if ftype == 2 and ch == channel and 14 <= size <= self._frame_max and hend < n and buf[hend] == FRAME_END:
                class_id, weight, body_size = CONTENT_HEAD.unpack_from(buf, h + 7)
                b = hend + 1
                bend = b + 7 + body_size
                if (
                    class_id != 60 or weight or body_size > self.max_message_size
                    or self._pending + body_size > self.max_pending_content
                ):  # fmt: skip
                    pass  # the general path says what is wrong
                elif not body_size:
                    self._fast_publish(channel, fields, buf, h + 19, hend, b"")
                    return b
                elif (
                    bend < n and buf[bend] == FRAME_END and body_size <= self._frame_max
                    and FRAME_HEAD.unpack_from(buf, b) == (3, channel, body_size)
                ):  # fmt: skip
                    self._fast_publish(channel, fields, buf, h + 19, hend, buf[b + 7 : bend])
                    return bend + 1
        self._content[channel] = _Content(_PUBLISH, fields)
        return end + 1

    def _fast_publish(self, channel: int, fields: PublishFields, buf: bytes, p: int, end: int, body: bytes) -> None:
        props, raw, shape = properties_of(buf, p, end)
        exchange, routing_key, mandatory, immediate = fields
        self._events.append(Publish(channel, exchange, routing_key, mandatory, immediate, props, raw, body, shape))

    # basic.ack/nack/reject: delivery-tag:u64 bits:u8 and nothing else

    def _ack(self, buf: bytes, channel: int, p: int, end: int) -> int:
        if end - p != 9:
            raise MalformedFrame("basic.ack fields do not fill its frame")
        tag, bits = TAG_BITS.unpack_from(buf, p)
        self._events.append(Ack(channel, tag, bits & 1 != 0))
        return end + 1

    def _nack(self, buf: bytes, channel: int, p: int, end: int) -> int:
        if end - p != 9:
            raise MalformedFrame("basic.nack fields do not fill its frame")
        tag, bits = TAG_BITS.unpack_from(buf, p)
        self._events.append(Nack(channel, tag, bits & 1 != 0, bits & 2 != 0))
        return end + 1

    def _reject(self, buf: bytes, channel: int, p: int, end: int) -> int:
        if end - p != 9:
            raise MalformedFrame("basic.reject fields do not fill its frame")
        tag, bits = TAG_BITS.unpack_from(buf, p)
        self._events.append(Reject(channel, tag, bits & 1 != 0))
        return end + 1

    # content

    def _complete(self, channel: int, content: _Content, body: bytes) -> None:
        props = content.properties
        assert props is not None
        fields = content.fields
        if isinstance(fields, tuple):  # the fields of a basic.publish
            exchange, routing_key, mandatory, immediate = fields
            self._events.append(Publish(channel, exchange, routing_key, mandatory, immediate, props, content.raw, body,
                                        content.shape))
        else:
            self._events.append(ContentReceived(channel, fields, props, content.raw, body))

    def _refuse(self, channel: int, content: _Content, code: int, explanation: str) -> None:
        """A channel exception for this message; its body frames will be skipped."""
        error = AMQPChannelError(code, explanation, channel=channel, class_id=60, method_id=content.index & 0xFFFF)
        self._events.append(ChannelFailed(error))
        content.discard = True

    def _unexpected(self, channel: int, got: str) -> AMQPConnectionError:
        content = self._content.get(channel)
        if content is None:
            text = f"expected method frame, got {got} frame instead"
            return AMQPConnectionError(UNEXPECTED_FRAME, text, channel=channel)
        if content.properties is None:
            text = f"expected content header for class 60, got {got} frame instead"
        else:
            text = f"expected content body, got {got} frame instead"
        method_id = content.index & 0xFFFF
        return AMQPConnectionError(UNEXPECTED_FRAME, text, channel=channel, class_id=60, method_id=method_id)


def _snippet(payload: bytes) -> str:
    """RabbitMQ's way of quoting a bad frame in its error text."""
    if len(payload) <= 16:
        return f"all octets = <<{','.join(map(str, payload))}>>"
    return f"first 16 octets = <<{','.join(map(str, payload[:16]))}>>"
