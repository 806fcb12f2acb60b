"""MQTT packets out as bytes: ``encode(packet, version)`` for 3.1.1 (and 3.1) and 5.0.

The encoder writes what it is given in the shortest form the version allows (a 5.0
acknowledgement with reason 0 and no properties is two bytes, as the spec recommends), and
refuses with ``LocalProtocolError`` only what the version cannot say: a 5.0 field in a
3.1.1 packet, a value out of its range, a packet over 268,435,455 bytes of body. It does
not re-check topic rules or reason-code tables: the broker builds its packets from values
it already checked. PUBLISH and the acknowledgements are the hot path: one join, one copy
of the payload, precomputed headers.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from .packets import (
    Auth, ConnAck, Connect, Disconnect, Packet, PingReq, PingResp, PubAck, PubComp, Publish,
    PubRec, PubRel, SubAck, Subscribe, UnsubAck, Unsubscribe,
)  # fmt: skip
from .properties import EMPTY_BLOCK, NO_PROPERTIES, Properties, encode_properties
from .reasons import LocalProtocolError
from .wire import (
    AUTH, CONNACK, CONNECT, DISCONNECT, MQTT_3_1, MQTT_3_1_1, MQTT_5, PUBACK, PUBCOMP, PUBLISH, PUBREC,
    PUBREL, SUBACK, SUBSCRIBE, U16, UNSUBACK, UNSUBSCRIBE, WILL, encode_binary, encode_string,
    encode_vbi,
)  # fmt: skip

_ACK = struct.Struct("!BBH")  # fixed header with remaining length 2, packet identifier


def encode(packet: Packet, version: int) -> bytes:
    """The bytes of ``packet`` for a peer speaking ``version`` (3, 4 or 5)."""
    try:
        writer = _WRITERS[type(packet)]
    except KeyError:
        raise LocalProtocolError(f"not an MQTT packet: {packet!r}") from None
    if version not in _VERSIONS:
        raise LocalProtocolError(f"no MQTT protocol level {version}")
    return writer(packet, version)


_VERSIONS = frozenset({MQTT_3_1, MQTT_3_1_1, MQTT_5})


def _frame(first: int, *parts: bytes) -> bytes:
    length = sum(map(len, parts))
    return b"".join((bytes((first,)), encode_vbi(length), *parts))


def _props(props: Properties, kind: int, version: int) -> bytes:
    """The property block in 5.0; nothing in 3.1.1, which has no properties to carry."""
    if version == MQTT_5:
        return encode_properties(props, kind)
    if props is not NO_PROPERTIES and props != NO_PROPERTIES:
        raise LocalProtocolError(f"properties in an MQTT {version} packet type {kind}")
    return b""


def _u16(value: int, what: str) -> bytes:
    if not 1 <= value <= 0xFFFF:
        raise LocalProtocolError(f"{what} {value} out of range 1..65535")
    return U16.pack(value)


def _byte(value: int, what: str) -> bytes:
    if not 0 <= value <= 0xFF:
        raise LocalProtocolError(f"{what} {value} out of range 0..255")
    return bytes((value,))


def _version_5(version: int, what: str) -> None:
    if version != MQTT_5:
        raise LocalProtocolError(f"{what} needs MQTT 5, not {version}")


def _publish(p: Publish, version: int) -> bytes:
    return encode_publish(p.topic, p.payload, p.qos, p.retain, p.dup, p.packet_id, p.properties, version)


def encode_publish(topic: str, payload: bytes, qos: int, retain: bool, dup: bool, packet_id: int,
                   props: Properties, version: int) -> bytes:
    """A PUBLISH from its fields (the delivery hot path: no Publish is built)."""
    if not 0 <= qos <= 2:
        raise LocalProtocolError(f"PUBLISH with QoS {qos}")
    head = encode_string(topic)
    if qos:
        head += _u16(packet_id, "packet identifier")
    elif packet_id or dup:
        raise LocalProtocolError("a QoS 0 PUBLISH has no packet identifier and no DUP")
    if version == MQTT_5:
        head += EMPTY_BLOCK if props is NO_PROPERTIES else encode_properties(props, PUBLISH)
    elif props is not NO_PROPERTIES and props != NO_PROPERTIES:
        raise LocalProtocolError(f"properties in an MQTT {version} PUBLISH")
    first = 0x30 | (dup << 3) | (qos << 1) | retain
    return b"".join((bytes((first,)), encode_vbi(len(head) + len(payload)), head, payload))


def _ack_writer(kind: int, flags: int) -> Callable[[Any, int], bytes]:
    first = (kind << 4) | flags

    def write(p: PubAck | PubRec | PubRel | PubComp, version: int) -> bytes:
        if p.reason_code == 0 and p.properties is NO_PROPERTIES and 0 < p.packet_id <= 0xFFFF:
            return _ACK.pack(first, 2, p.packet_id)
        packet_id = _u16(p.packet_id, "packet identifier")
        if version != MQTT_5:
            if p.reason_code:
                raise LocalProtocolError(f"reason code in an MQTT {version} acknowledgement")
            _props(p.properties, kind, version)
            return _ACK.pack(first, 2, p.packet_id)
        if p.properties == NO_PROPERTIES:
            if not p.reason_code:
                return _ACK.pack(first, 2, p.packet_id)
            return _frame(first, packet_id, _byte(p.reason_code, "reason code"))
        return _frame(first, packet_id, _byte(p.reason_code, "reason code"),
                      encode_properties(p.properties, kind))  # fmt: skip

    return write


def _connect(p: Connect, version: int) -> bytes:
    if version != p.protocol_level:
        raise LocalProtocolError(f"CONNECT at level {p.protocol_level} encoded as {version}")
    name = b"\x00\x06MQIsdp" if version == MQTT_3_1 else b"\x00\x04MQTT"
    flags = (p.clean_start << 1) | ((p.password is not None) << 6) | ((p.username is not None) << 7)
    if p.password is not None and p.username is None and version != MQTT_5:
        raise LocalProtocolError(f"a password without a user name in MQTT {version}")
    payload = [encode_string(p.client_id)]
    will = p.will
    if will is not None:
        if not 0 <= will.qos <= 2:
            raise LocalProtocolError(f"will with QoS {will.qos}")
        flags |= 0x04 | (will.qos << 3) | (will.retain << 5)
        payload += [_props(will.properties, WILL, version), encode_string(will.topic),
                    encode_binary(will.payload)]  # fmt: skip
    if p.username is not None:
        payload.append(encode_string(p.username))
    if p.password is not None:
        payload.append(encode_binary(p.password))
    if not 0 <= p.keep_alive <= 0xFFFF:
        raise LocalProtocolError(f"keep alive {p.keep_alive} out of range")
    return _frame(CONNECT << 4, name, bytes((version, flags)), U16.pack(p.keep_alive),
                  _props(p.properties, CONNECT, version), *payload)  # fmt: skip


def _connack(p: ConnAck, version: int) -> bytes:
    return _frame(CONNACK << 4, bytes((p.session_present,)), _byte(p.reason_code, "reason code"),
                  _props(p.properties, CONNACK, version))  # fmt: skip


def _subscribe(p: Subscribe, version: int) -> bytes:
    if not p.subscriptions:
        raise LocalProtocolError("SUBSCRIBE with no topic filter")
    parts = [_u16(p.packet_id, "packet identifier"), _props(p.properties, SUBSCRIBE, version)]
    for s in p.subscriptions:
        if not 0 <= s.qos <= 2 or not 0 <= s.retain_handling <= 2:
            raise LocalProtocolError(f"subscription options {s!r}")
        options = s.qos | (s.no_local << 2) | (s.retain_as_published << 3) | (s.retain_handling << 4)
        if options > 3 and version != MQTT_5:
            raise LocalProtocolError(f"MQTT 5 subscription options in MQTT {version}: {s!r}")
        parts += [encode_string(s.topic_filter), bytes((options,))]
    return _frame((SUBSCRIBE << 4) | 2, *parts)


def _codes(codes: tuple[int, ...]) -> bytes:
    if not all(0 <= c <= 0xFF for c in codes):
        raise LocalProtocolError(f"reason codes {codes} out of range")
    return bytes(codes)


def _suback(p: SubAck, version: int) -> bytes:
    return _frame(SUBACK << 4, _u16(p.packet_id, "packet identifier"),
                  _props(p.properties, SUBACK, version), _codes(p.reason_codes))  # fmt: skip


def _unsubscribe(p: Unsubscribe, version: int) -> bytes:
    if not p.topic_filters:
        raise LocalProtocolError("UNSUBSCRIBE with no topic filter")
    return _frame((UNSUBSCRIBE << 4) | 2, _u16(p.packet_id, "packet identifier"),
                  _props(p.properties, UNSUBSCRIBE, version),
                  *map(encode_string, p.topic_filters))  # fmt: skip


def _unsuback(p: UnsubAck, version: int) -> bytes:
    if version != MQTT_5 and p.reason_codes:
        raise LocalProtocolError(f"reason codes in an MQTT {version} UNSUBACK")
    return _frame(UNSUBACK << 4, _u16(p.packet_id, "packet identifier"),
                  _props(p.properties, UNSUBACK, version), _codes(p.reason_codes))  # fmt: skip


def _reason_only(kind: int, p: Disconnect | Auth, version: int) -> bytes:
    if p.properties == NO_PROPERTIES:
        if not p.reason_code:
            return bytes((kind << 4, 0))
        _version_5(version, f"reason code in packet type {kind}")
        return bytes((kind << 4, 1, _byte(p.reason_code, "reason code")[0]))
    _version_5(version, f"properties in packet type {kind}")
    return _frame(kind << 4, _byte(p.reason_code, "reason code"), encode_properties(p.properties, kind))


def _auth(p: Auth, version: int) -> bytes:
    _version_5(version, "AUTH")
    return _reason_only(AUTH, p, version)


_WRITERS: dict[type, Callable[[Any, int], bytes]] = {
    Publish: _publish,
    PubAck: _ack_writer(PUBACK, 0),
    PubRec: _ack_writer(PUBREC, 0),
    PubRel: _ack_writer(PUBREL, 2),
    PubComp: _ack_writer(PUBCOMP, 0),
    Connect: _connect,
    ConnAck: _connack,
    Subscribe: _subscribe,
    SubAck: _suback,
    Unsubscribe: _unsubscribe,
    UnsubAck: _unsuback,
    PingReq: lambda p, v: b"\xc0\x00",
    PingResp: lambda p, v: b"\xd0\x00",
    Disconnect: lambda p, v: _reason_only(DISCONNECT, p, v),
    Auth: _auth,
}
