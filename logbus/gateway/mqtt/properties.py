"""MQTT 5.0 properties (section 2.2.2): the table of identifiers, their data types and the
packets that may carry each, and the reader and writer of a property block.

A property block is a Variable Byte Integer length, then properties, each a Variable Byte
Integer identifier (all defined ones fit in one byte) and a value of the identifier's type.
The decoder enforces, from the bytes alone:

- an identifier that is unknown or not valid in this packet: Malformed Packet (2.2.2.2);
- a value running past the block: Malformed Packet;
- a property given twice, other than User Property (and Subscription Identifier in
  PUBLISH), or a value the spec rules out (a flag other than 0 or 1, Receive Maximum,
  Maximum Packet Size or Subscription Identifier 0, Authentication Data without
  Authentication Method): Protocol Error;
- Topic Alias 0: Topic Alias invalid (3.3.2.3.4).

Properties are one frozen ``Properties`` value with a field per property, ``None`` when
absent; User Property (ordered, repeatable) is a tuple of pairs, Subscription Identifier
a tuple of ints. A block with nothing in it decodes to the shared ``NO_PROPERTIES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from . import wire
from .reasons import (
    LocalProtocolError,
    MqttError,
    TOPIC_ALIAS_INVALID,
    malformed,
    protocol_error,
)
from .wire import (
    AUTH, CONNACK, CONNECT, DISCONNECT, PUBACK, PUBCOMP, PUBLISH, PUBREC, PUBREL, SUBACK,
    SUBSCRIBE, UNSUBACK, UNSUBSCRIBE, WILL,
)  # fmt: skip

BYTE, U16, U32, VBI, STRING, BINARY, PAIR = "byte", "u16", "u32", "vbi", "string", "binary", "pair"


class Spec(NamedTuple):
    ident: int
    name: str  # the ``Properties`` field
    kind: str  # one of BYTE .. PAIR
    packets: frozenset[int]  # packet types (and WILL) that may carry it


def _spec(ident: int, name: str, kind: str, *packets: int) -> Spec:
    return Spec(ident, name, kind, frozenset(packets))


_ACKS = (PUBACK, PUBREC, PUBREL, PUBCOMP)
_EVERY = (CONNECT, CONNACK, PUBLISH, WILL, *_ACKS, SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK,
          DISCONNECT, AUTH)  # fmt: skip

# MQTT 5.0 table 2-4
SPECS: dict[int, Spec] = {s.ident: s for s in (
    _spec(0x01, "payload_format_indicator", BYTE, PUBLISH, WILL),
    _spec(0x02, "message_expiry_interval", U32, PUBLISH, WILL),
    _spec(0x03, "content_type", STRING, PUBLISH, WILL),
    _spec(0x08, "response_topic", STRING, PUBLISH, WILL),
    _spec(0x09, "correlation_data", BINARY, PUBLISH, WILL),
    _spec(0x0B, "subscription_identifiers", VBI, PUBLISH, SUBSCRIBE),
    _spec(0x11, "session_expiry_interval", U32, CONNECT, CONNACK, DISCONNECT),
    _spec(0x12, "assigned_client_identifier", STRING, CONNACK),
    _spec(0x13, "server_keep_alive", U16, CONNACK),
    _spec(0x15, "authentication_method", STRING, CONNECT, CONNACK, AUTH),
    _spec(0x16, "authentication_data", BINARY, CONNECT, CONNACK, AUTH),
    _spec(0x17, "request_problem_information", BYTE, CONNECT),
    _spec(0x18, "will_delay_interval", U32, WILL),
    _spec(0x19, "request_response_information", BYTE, CONNECT),
    _spec(0x1A, "response_information", STRING, CONNACK),
    _spec(0x1C, "server_reference", STRING, CONNACK, DISCONNECT),
    _spec(0x1F, "reason_string", STRING, CONNACK, *_ACKS, SUBACK, UNSUBACK, DISCONNECT, AUTH),
    _spec(0x21, "receive_maximum", U16, CONNECT, CONNACK),
    _spec(0x22, "topic_alias_maximum", U16, CONNECT, CONNACK),
    _spec(0x23, "topic_alias", U16, PUBLISH),
    _spec(0x24, "maximum_qos", BYTE, CONNACK),
    _spec(0x25, "retain_available", BYTE, CONNACK),
    _spec(0x26, "user_properties", PAIR, *_EVERY),
    _spec(0x27, "maximum_packet_size", U32, CONNECT, CONNACK),
    _spec(0x28, "wildcard_subscription_available", BYTE, CONNACK),
    _spec(0x29, "subscription_identifier_available", BYTE, CONNACK),
    _spec(0x2A, "shared_subscription_available", BYTE, CONNACK),
)}  # fmt: skip

BY_NAME: dict[str, Spec] = {s.name: s for s in SPECS.values()}
# identifiers each packet type (and WILL) may carry
ALLOWED: dict[int, frozenset[int]] = {
    packet: frozenset(s.ident for s in SPECS.values() if packet in s.packets) for packet in _EVERY
}
REPEATABLE = frozenset({0x26})  # and 0x0B, in PUBLISH only
# byte properties whose only values are 0 and 1 (every byte property: Maximum QoS too)
FLAGS = frozenset(s.ident for s in SPECS.values() if s.kind == BYTE)
NONZERO = frozenset({0x0B, 0x21, 0x27})  # Subscription Identifier, Receive Maximum, Max Packet Size


@dataclass(frozen=True, slots=True)
class Properties:
    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: tuple[int, ...] = ()
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_properties: tuple[tuple[str, str], ...] = ()
    maximum_packet_size: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None


NO_PROPERTIES = Properties()
EMPTY_BLOCK = b"\x00"


def _read_pair(buf: wire.Buffer, pos: int, end: int) -> tuple[tuple[str, str], int]:
    key, pos = wire.read_string(buf, pos, end)
    value, pos = wire.read_string(buf, pos, end)
    return (key, value), pos


_READERS: dict[str, Callable[[wire.Buffer, int, int], tuple[Any, int]]] = {
    BYTE: wire.read_u8, U16: wire.read_u16, U32: wire.read_u32, VBI: wire.read_vbi,
    STRING: wire.read_string, BINARY: wire.read_binary, PAIR: _read_pair,
}  # fmt: skip


def read_properties(buf: wire.Buffer, pos: int, end: int, packet: int) -> tuple[Properties, int]:
    """(properties, position after the block) of the block at ``pos`` in a packet of type
    ``packet`` (``WILL`` for a CONNECT's will properties)."""
    length, pos = wire.read_vbi(buf, pos, end)
    stop = pos + length
    if stop > end:
        raise malformed("property block runs past the end of the packet")
    if not length:
        return NO_PROPERTIES, pos
    allowed = ALLOWED[packet]
    found: dict[str, Any] = {}
    while pos < stop:
        ident, pos = wire.read_vbi(buf, pos, stop)
        if ident not in allowed:
            where = "unknown" if ident not in SPECS else "not valid in this packet"
            raise malformed(f"property 0x{ident:02X} {where}")
        spec = SPECS[ident]
        value, pos = _READERS[spec.kind](buf, pos, stop)
        if ident in FLAGS and value > 1:
            raise protocol_error(f"{spec.name} {value} is neither 0 nor 1")
        if ident in NONZERO and not value:
            raise protocol_error(f"{spec.name} 0")
        if ident == 0x23 and not value:
            raise MqttError(TOPIC_ALIAS_INVALID, "topic alias 0")
        if ident in REPEATABLE or (ident == 0x0B and packet == PUBLISH):
            found.setdefault(spec.name, []).append(value)
        elif spec.name in found:
            raise protocol_error(f"{spec.name} given twice")
        else:
            found[spec.name] = [value] if ident == 0x0B else value
    if "authentication_data" in found and "authentication_method" not in found:
        raise protocol_error("authentication data without an authentication method")
    for name in ("user_properties", "subscription_identifiers"):
        if name in found:
            found[name] = tuple(found[name])
    return Properties(**found), stop


def _u(limit: int) -> Callable[[int], bytes]:
    size = wire.U8 if limit == 0xFF else wire.U16 if limit == 0xFFFF else wire.U32

    def write(value: int) -> bytes:
        if not 0 <= value <= limit:
            raise LocalProtocolError(f"property value {value} out of range 0..{limit}")
        return size.pack(value)

    return write


def _write_pair(pair: tuple[str, str]) -> bytes:
    return wire.encode_string(pair[0]) + wire.encode_string(pair[1])


_WRITERS: dict[str, Callable[[Any], bytes]] = {
    BYTE: _u(0xFF), U16: _u(0xFFFF), U32: _u(0xFFFFFFFF), VBI: wire.encode_vbi,
    STRING: wire.encode_string, BINARY: wire.encode_binary, PAIR: _write_pair,
}  # fmt: skip
_ORDER = [(s.ident, s.name, _WRITERS[s.kind], s.kind in (PAIR, VBI)) for s in SPECS.values()]


def encode_properties(props: Properties, packet: int) -> bytes:
    """The property block (length included) of ``props`` in a packet of type ``packet``."""
    if props is NO_PROPERTIES or props == NO_PROPERTIES:
        return EMPTY_BLOCK
    allowed = ALLOWED[packet]
    out = bytearray()
    for ident, name, write, many in _ORDER:
        value = getattr(props, name)
        if value is None or value == ():
            continue
        if ident not in allowed:
            raise LocalProtocolError(f"property {name} is not valid in packet type {packet}")
        if ident == 0x0B and packet != PUBLISH and len(value) > 1:
            raise LocalProtocolError("a SUBSCRIBE carries one subscription identifier")
        for item in value if many else (value,):
            if ident in NONZERO and not item:
                raise LocalProtocolError(f"property {name} 0")
            out.append(ident)
            out += write(item)
    return wire.encode_vbi(len(out)) + out
