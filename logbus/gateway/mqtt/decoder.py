"""Bytes in, MQTT packets out: the sans-I/O decoder for MQTT 3.1.1 (and 3.1) and 5.0.

Theory of operation
-------------------
A packet is a fixed header (one byte: type in the high nibble, flags in the low one; then
the Remaining Length, a Variable Byte Integer of 1 to 4 bytes) followed by exactly
Remaining Length bytes. ``Decoder.feed(data)`` appends ``data`` to what is left of the
last call and decodes every whole packet in it, in order:

1. read the fixed header; if it is not all there yet, stop (a fifth length byte, or a
   longer-than-needed length, is Malformed Packet at once: no need to wait);
2. check the packet's total size against ``max_packet_size`` before waiting for (and so
   buffering) its body: over it is Packet too large (0x95);
3. once the whole packet is there, decode it from a ``memoryview`` of the buffer; only
   the values handed out (strings, payloads) are copied.

What is kept between calls is at most one partial packet, so never more than
``max_packet_size`` bytes. When nothing is left over from the last call, ``data`` is
decoded where it lies and only its trailing partial packet is copied.

The body of every packet but CONNECT depends on the protocol version, which a server-side
decoder learns from the CONNECT (the first packet must be one: anything else first is a
Protocol Error) and a client-side decoder is given. ``version`` is set as soon as the
CONNECT's protocol name and level are read, so that after an error in the rest of it the
caller knows whether to answer with a 5.0 CONNACK and its reason code. The decoder enforces every rule that
the bytes of one packet show (see ``docs/mqtt.md``, "Codec"), raising ``MqttError`` with
the reason code the 5.0 specification asks for; the packets decoded before the bad one
travel on the error as ``packets``. After an error the decoder is dead: the connection
is to be closed, and ``feed`` raises the same error again. Rules that need the session
(packet identifiers in use, topic alias ranges, receive maximum, a second CONNECT, which
side may send which packet) are the session's.
"""

from __future__ import annotations

from typing import Callable

from . import reasons as R
from .packets import (
    Auth, ConnAck, Connect, Disconnect, Packet, PingReq, PingResp, PubAck, PubComp, Publish,
    PubRec, PubRel, SubAck, Subscribe, Subscription, UnsubAck, Unsubscribe, Will,
)  # fmt: skip
from .properties import NO_PROPERTIES, read_properties
from .reasons import MqttError, UnsupportedProtocolVersion, malformed, protocol_error
from .topics import check_topic_filter, check_topic_name
from .wire import (
    AUTH, CONNACK, CONNECT, DISCONNECT, MAX_VBI, MQTT_3_1, MQTT_3_1_1, MQTT_5, PINGREQ,
    PINGRESP, PUBACK, PUBCOMP, PUBLISH, PUBREC, PUBREL, SUBACK, SUBSCRIBE, UNSUBACK, UNSUBSCRIBE, WILL, Buffer,
    read_binary, read_string, read_u8, read_u16,
)  # fmt: skip

# the largest packet MQTT can frame: 1 type byte, 4 length bytes, the largest length
MAX_PACKET_SIZE = 1 + 4 + MAX_VBI
PROTOCOLS = {("MQTT", MQTT_5), ("MQTT", MQTT_3_1_1), ("MQIsdp", MQTT_3_1)}

BodyReader = Callable[[Buffer, int, int, int], Packet]


class Decoder:
    """``feed(data) -> list[Packet]``; see the module's theory of operation."""

    def __init__(self, max_packet_size: int = MAX_PACKET_SIZE, version: int | None = None) -> None:
        if not 2 <= max_packet_size <= MAX_PACKET_SIZE:
            raise R.LocalProtocolError(f"max_packet_size {max_packet_size} out of range")
        self.max_packet_size = max_packet_size
        self.version = version  # None until a CONNECT says (server side)
        self._pending = bytearray()
        self._error: MqttError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for a packet not yet whole."""
        return len(self._pending)

    def feed(self, data: bytes) -> list[Packet]:
        if self._error is not None:
            raise self._error
        if self._pending:
            self._pending += data
            buf: Buffer = self._pending
        else:
            buf = data
        packets: list[Packet] = []
        try:
            used = self._decode_all(buf, packets)
        except MqttError as e:
            self._pending = bytearray()  # a view in the traceback may pin the old one
            e.packets = list(packets)
            self._error = e
            raise
        if buf is self._pending:
            del self._pending[:used]
        elif used < len(data):
            self._pending = bytearray(memoryview(data)[used:])
        return packets

    def _decode_all(self, data: Buffer, out: list[Packet]) -> int:
        """Append every whole packet of ``data`` to ``out``; the bytes used."""
        buf = memoryview(data)
        size = len(buf)
        pos = 0
        limit = self.max_packet_size
        while pos + 2 <= size:
            # fixed header: the Remaining Length's first byte, inline for the common case
            byte = buf[pos + 1]
            if byte < 0x80:
                length, start = byte, pos + 2
            else:
                length, start = 0, pos + 1
                shift = 0
                while True:
                    if start >= size:
                        # the shortest length these bytes can still become: bound the buffer
                        if start - pos + 1 + length + (1 << shift) > limit:
                            raise MqttError(R.PACKET_TOO_LARGE, f"packet over the limit {limit}")
                        return pos
                    byte = buf[start]
                    start += 1
                    length |= (byte & 0x7F) << shift
                    if byte < 0x80:
                        break
                    shift += 7
                    if shift == 28:
                        raise malformed("remaining length longer than 4 bytes")
                if byte == 0:
                    raise malformed("remaining length not in its shortest form")
            end = start + length
            if end - pos > limit:
                raise MqttError(R.PACKET_TOO_LARGE, f"packet of {end - pos} bytes, limit {limit}")
            if end > size:
                return pos
            out.append(self._decode_one(buf[pos], buf, start, end))
            pos = end
        return pos

    def _decode_one(self, first: int, buf: Buffer, start: int, end: int) -> Packet:
        kind = first >> 4
        version = self.version
        if kind == PUBLISH and version is not None:
            return _read_publish(first & 0x0F, buf, start, end, version)
        if version is None:
            if kind != CONNECT:
                raise protocol_error(f"packet type {kind} before CONNECT")
        if first & 0x0F != _FLAGS.get(kind, 0):
            raise malformed(f"packet type {kind} with reserved flags 0x{first & 0x0F:X}")
        if kind == CONNECT:
            if self.version is None:
                # known before the rest is checked: a broken 5.0 CONNECT is answered with a
                # 5.0 CONNACK carrying the reason code
                self.version = _connect_level(buf, start, end)
            return _read_connect(buf, start, end)
        reader = _BODIES.get(kind)
        if reader is None or (kind == AUTH and version != MQTT_5):
            raise malformed(f"reserved packet type {kind}")
        assert version is not None
        return reader(buf, start, end, version)


def decode(data: bytes, version: int | None = None) -> list[Packet]:
    """Every packet of ``data``, which must end on a packet boundary (tests, tools)."""
    decoder = Decoder(version=version)
    packets = decoder.feed(data)
    if decoder.buffered:
        raise malformed(f"{decoder.buffered} bytes of an incomplete packet")
    return packets


_FLAGS = {PUBREL: 0b0010, SUBSCRIBE: 0b0010, UNSUBSCRIBE: 0b0010}


def _exact(pos: int, end: int, what: str) -> None:
    if pos != end:
        raise malformed(f"{end - pos} bytes after the end of the {what}")


def _packet_id(buf: Buffer, pos: int, end: int, what: str) -> tuple[int, int]:
    packet_id, pos = read_u16(buf, pos, end)
    if not packet_id:
        raise malformed(f"{what} with packet identifier 0")
    return packet_id, pos


def _read_publish(flags: int, buf: Buffer, pos: int, end: int, version: int) -> Publish:
    qos = (flags >> 1) & 3
    if qos == 3:
        raise malformed("PUBLISH with QoS 3")
    if flags & 8 and not qos:
        raise malformed("PUBLISH with DUP set at QoS 0")
    topic, pos = read_string(buf, pos, end)
    packet_id = 0
    if qos:
        packet_id, pos = _packet_id(buf, pos, end, "PUBLISH")
    props = NO_PROPERTIES
    if version == MQTT_5:
        props, pos = read_properties(buf, pos, end, PUBLISH)
        if not topic and props.topic_alias is None:
            raise protocol_error("PUBLISH with an empty topic name and no topic alias")
    elif not topic:
        raise MqttError(R.TOPIC_NAME_INVALID, "PUBLISH with an empty topic name")
    check_topic_name(topic)
    return Publish(topic, bytes(buf[pos:end]), qos, bool(flags & 1), bool(flags & 8),
                   packet_id, props)  # fmt: skip


def _connect_level(buf: Buffer, pos: int, end: int) -> int | None:
    """The protocol level of the CONNECT at ``pos`` if it is one this codec speaks."""
    try:
        name, pos = read_string(buf, pos, end)
        level, pos = read_u8(buf, pos, end)
    except MqttError:
        return None
    return level if (name, level) in PROTOCOLS else None


def _read_connect(buf: Buffer, pos: int, end: int) -> Connect:
    name, pos = read_string(buf, pos, end)
    level, pos = read_u8(buf, pos, end)
    if (name, level) not in PROTOCOLS:
        raise UnsupportedProtocolVersion(level, name)
    flags, pos = read_u8(buf, pos, end)
    if flags & 0x01:
        raise malformed("CONNECT with the reserved flag set")
    has_will, will_qos, will_retain = flags & 0x04, (flags >> 3) & 3, bool(flags & 0x20)
    has_password, has_username = flags & 0x40, flags & 0x80
    if not has_will and (will_qos or will_retain):
        raise malformed("CONNECT with will QoS or will retain but no will")
    if will_qos == 3:
        raise malformed("CONNECT with will QoS 3")
    if has_password and not has_username and level != MQTT_5:
        raise malformed("CONNECT with a password but no user name")
    keep_alive, pos = read_u16(buf, pos, end)
    props = NO_PROPERTIES
    if level == MQTT_5:
        props, pos = read_properties(buf, pos, end, CONNECT)
    client_id, pos = read_string(buf, pos, end)
    will = None
    if has_will:
        will_props = NO_PROPERTIES
        if level == MQTT_5:
            will_props, pos = read_properties(buf, pos, end, WILL)
        topic, pos = read_string(buf, pos, end)
        if not topic:
            raise MqttError(R.TOPIC_NAME_INVALID, "will with an empty topic name")
        check_topic_name(topic)
        payload, pos = read_binary(buf, pos, end)
        will = Will(topic, payload, will_qos, will_retain, will_props)
    username = password = None
    if has_username:
        username, pos = read_string(buf, pos, end)
    if has_password:
        password, pos = read_binary(buf, pos, end)
    _exact(pos, end, "CONNECT")
    return Connect(client_id, level, bool(flags & 0x02), keep_alive, username, password, will,
                   props)  # fmt: skip


def _reason(code: int, valid: frozenset[int], what: str) -> int:
    if code not in valid:
        raise malformed(f"{what} with reason code 0x{code:02X}")
    return code


def _read_connack(buf: Buffer, pos: int, end: int, version: int) -> ConnAck:
    flags, pos = read_u8(buf, pos, end)
    if flags & 0xFE:
        raise malformed("CONNACK with reserved flags set")
    code, pos = read_u8(buf, pos, end)
    props = NO_PROPERTIES
    if version == MQTT_5:
        _reason(code, R.CONNACK_REASONS, "CONNACK")
        props, pos = read_properties(buf, pos, end, CONNACK)
    else:
        _reason(code, R.CONNACK_RETURN_CODES, "CONNACK")
    _exact(pos, end, "CONNACK")
    return ConnAck(bool(flags), code, props)


def _ack_reader(cls: type[PubAck | PubRec | PubRel | PubComp], kind: int,
                valid: frozenset[int]) -> BodyReader:  # fmt: skip
    what = cls.__name__.upper()

    def read(buf: Buffer, pos: int, end: int, version: int) -> Packet:
        packet_id, pos = read_u16(buf, pos, end)
        if pos == end:
            return cls(packet_id)
        if version != MQTT_5:
            raise malformed(f"{end - pos} bytes after the end of the {what}")
        code = _reason(buf[pos], valid, what)
        props = NO_PROPERTIES
        if pos + 1 < end:
            props, pos = read_properties(buf, pos + 1, end, kind)
            _exact(pos, end, what)
        return cls(packet_id, code, props)

    return read


def _read_subscribe(buf: Buffer, pos: int, end: int, version: int) -> Subscribe:
    packet_id, pos = _packet_id(buf, pos, end, "SUBSCRIBE")
    v5 = version == MQTT_5
    props = NO_PROPERTIES
    if v5:
        props, pos = read_properties(buf, pos, end, SUBSCRIBE)
    subscriptions = []
    while pos < end:
        topic_filter, pos = read_string(buf, pos, end)
        options, pos = read_u8(buf, pos, end)
        qos = options & 3
        if v5:
            if options & 0xC0:
                raise malformed("SUBSCRIBE with reserved option bits set")
            if qos == 3:
                raise protocol_error("SUBSCRIBE with maximum QoS 3")
            retain_handling = options >> 4
            if retain_handling == 3:
                raise protocol_error("SUBSCRIBE with retain handling 3")
            share = check_topic_filter(topic_filter, True)
            no_local = bool(options & 0x04)
            if no_local and share is not None:
                raise protocol_error("SUBSCRIBE with no local on a shared subscription")
            subscriptions.append(Subscription(topic_filter, qos, no_local, bool(options & 0x08),
                                              retain_handling))  # fmt: skip
        else:
            if options & 0xFC or qos == 3:
                raise malformed(f"SUBSCRIBE with requested QoS byte 0x{options:02X}")
            check_topic_filter(topic_filter, False)
            subscriptions.append(Subscription(topic_filter, qos))
    if not subscriptions:
        raise protocol_error("SUBSCRIBE with no topic filter")
    return Subscribe(packet_id, tuple(subscriptions), props)


def _read_suback(buf: Buffer, pos: int, end: int, version: int) -> SubAck:
    packet_id, pos = read_u16(buf, pos, end)
    props = NO_PROPERTIES
    valid = R.SUBACK_RETURN_CODES
    if version == MQTT_5:
        props, pos = read_properties(buf, pos, end, SUBACK)
        valid = R.SUBACK_REASONS
    codes = tuple(_reason(code, valid, "SUBACK") for code in bytes(buf[pos:end]))
    return SubAck(packet_id, codes, props)


def _read_unsubscribe(buf: Buffer, pos: int, end: int, version: int) -> Unsubscribe:
    packet_id, pos = _packet_id(buf, pos, end, "UNSUBSCRIBE")
    props = NO_PROPERTIES
    if version == MQTT_5:
        props, pos = read_properties(buf, pos, end, UNSUBSCRIBE)
    filters = []
    while pos < end:
        topic_filter, pos = read_string(buf, pos, end)
        check_topic_filter(topic_filter, version == MQTT_5)
        filters.append(topic_filter)
    if not filters:
        raise protocol_error("UNSUBSCRIBE with no topic filter")
    return Unsubscribe(packet_id, tuple(filters), props)


def _read_unsuback(buf: Buffer, pos: int, end: int, version: int) -> UnsubAck:
    packet_id, pos = read_u16(buf, pos, end)
    if version != MQTT_5:
        _exact(pos, end, "UNSUBACK")
        return UnsubAck(packet_id)
    props, pos = read_properties(buf, pos, end, UNSUBACK)
    codes = tuple(_reason(code, R.UNSUBACK_REASONS, "UNSUBACK") for code in bytes(buf[pos:end]))
    return UnsubAck(packet_id, codes, props)


def _empty_reader(packet: Packet) -> BodyReader:
    def read(buf: Buffer, pos: int, end: int, version: int) -> Packet:
        _exact(pos, end, type(packet).__name__.upper())
        return packet

    return read


def _read_disconnect(buf: Buffer, pos: int, end: int, version: int) -> Disconnect:
    if pos == end:
        return _DISCONNECT
    if version != MQTT_5:
        raise malformed(f"{end - pos} bytes after the end of the DISCONNECT")
    code = _reason(buf[pos], R.DISCONNECT_REASONS, "DISCONNECT")
    props = NO_PROPERTIES
    if pos + 1 < end:
        props, pos = read_properties(buf, pos + 1, end, DISCONNECT)
        _exact(pos, end, "DISCONNECT")
    return Disconnect(code, props)


def _read_auth(buf: Buffer, pos: int, end: int, version: int) -> Auth:
    if pos == end:
        return Auth()
    code = _reason(buf[pos], R.AUTH_REASONS, "AUTH")
    props = NO_PROPERTIES
    if pos + 1 < end:
        props, pos = read_properties(buf, pos + 1, end, AUTH)
        _exact(pos, end, "AUTH")
    return Auth(code, props)


_DISCONNECT = Disconnect()
_BODIES: dict[int, BodyReader] = {
    CONNACK: _read_connack,
    PUBACK: _ack_reader(PubAck, PUBACK, R.PUBACK_REASONS),
    PUBREC: _ack_reader(PubRec, PUBREC, R.PUBREC_REASONS),
    PUBREL: _ack_reader(PubRel, PUBREL, R.PUBREL_REASONS),
    PUBCOMP: _ack_reader(PubComp, PUBCOMP, R.PUBCOMP_REASONS),
    SUBSCRIBE: _read_subscribe,
    SUBACK: _read_suback,
    UNSUBSCRIBE: _read_unsubscribe,
    UNSUBACK: _read_unsuback,
    PINGREQ: _empty_reader(PingReq()),
    PINGRESP: _empty_reader(PingResp()),
    DISCONNECT: _read_disconnect,
    AUTH: _read_auth,
}
