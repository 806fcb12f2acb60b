"""MQTT data representations (section 1.5 of both 3.1.1 and 5.0), read from and written to
bytes. Nothing else in the MQTT gateway packs these.

    Two Byte Integer      big-endian u16
    Four Byte Integer     big-endian u32
    Variable Byte Integer 7 bits a byte, low group first, bit 7 = "more follows"; at most 4
                          bytes (max 268,435,455) and, in 5.0 words [MQTT-1.5.5-1], the fewest
                          bytes that can hold the value: a longer form is malformed
    UTF-8 Encoded String  u16 length + that many bytes of well-formed UTF-8 with no U+0000
                          and no surrogate (U+D800..U+DFFF) [MQTT-1.5.4-1, -2]
    Binary Data           u16 length + that many bytes
    UTF-8 String Pair     two UTF-8 Encoded Strings (5.0 user properties)

Readers take ``(buf, pos, end)`` where ``buf`` is a ``memoryview`` (or bytes) holding the
packet and ``end`` is where the packet ends; a field that runs past ``end`` is a Malformed
Packet, never "need more data": the codec only reads a packet once all of it is there.
Writers raise ``LocalProtocolError`` for a value the format cannot carry.
"""

from __future__ import annotations

import struct
from typing import Union

from .reasons import LocalProtocolError, malformed

Buffer = Union[bytes, bytearray, memoryview]

U8 = struct.Struct("!B")
U16 = struct.Struct("!H")
U32 = struct.Struct("!I")
MAX_VBI = 268_435_455
MAX_U16 = 0xFFFF

# control packet types: the high nibble of the fixed header's first byte (0 is reserved,
# and stands here for a CONNECT's will, whose properties have their own table)
WILL, CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 0, 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH = range(8, 16)

# protocol levels (the CONNECT's Protocol Level byte)
MQTT_3_1, MQTT_3_1_1, MQTT_5 = 3, 4, 5


def encode_vbi(value: int) -> bytes:
    if value < 0x80:
        if value < 0:
            raise LocalProtocolError(f"variable byte integer {value} is negative")
        return _SMALL_VBI[value]
    if value > MAX_VBI:
        raise LocalProtocolError(f"variable byte integer {value} exceeds {MAX_VBI}")
    out = bytearray()
    while True:
        digit = value & 0x7F
        value >>= 7
        if value:
            out.append(digit | 0x80)
        else:
            out.append(digit)
            return bytes(out)


_SMALL_VBI = [bytes((i,)) for i in range(0x80)]


def read_vbi(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the variable byte integer at ``pos``."""
    value = 0
    shift = 0
    for i in range(4):
        if pos >= end:
            raise malformed("variable byte integer runs past the end of the packet")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if byte == 0 and i:
                raise malformed("variable byte integer not in its shortest form")
            return value, pos
        shift += 7
    raise malformed("variable byte integer longer than 4 bytes")


def read_u8(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    if pos >= end:
        raise malformed("byte runs past the end of the packet")
    return buf[pos], pos + 1


def read_u16(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise malformed("two byte integer runs past the end of the packet")
    return (buf[pos] << 8) | buf[pos + 1], pos + 2


def read_u32(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    if pos + 4 > end:
        raise malformed("four byte integer runs past the end of the packet")
    return U32.unpack_from(buf, pos)[0], pos + 4


def read_binary(buf: Buffer, pos: int, end: int) -> tuple[bytes, int]:
    if pos + 2 > end:
        raise malformed("binary data length runs past the end of the packet")
    stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
    if stop > end:
        raise malformed("binary data runs past the end of the packet")
    return bytes(buf[pos + 2 : stop]), stop


def read_string(buf: Buffer, pos: int, end: int) -> tuple[str, int]:
    if pos + 2 > end:
        raise malformed("string length runs past the end of the packet")
    stop = pos + 2 + ((buf[pos] << 8) | buf[pos + 1])
    if stop > end:
        raise malformed("string runs past the end of the packet")
    try:
        text = str(buf[pos + 2 : stop], "utf-8")
    except UnicodeDecodeError as e:
        # Python's strict UTF-8 also refuses encoded surrogates and overlong forms
        raise malformed(f"string is not well-formed UTF-8 ({e.reason})") from None
    if "\x00" in text:
        raise malformed("string contains U+0000")
    return text, stop


def encode_binary(value: bytes) -> bytes:
    if len(value) > MAX_U16:
        raise LocalProtocolError(f"binary data of {len(value)} bytes exceeds {MAX_U16}")
    return U16.pack(len(value)) + value


def encode_string(value: str) -> bytes:
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raise LocalProtocolError(f"string {value!r} holds a surrogate") from None
    if len(raw) > MAX_U16:
        raise LocalProtocolError(f"string of {len(raw)} bytes exceeds {MAX_U16}")
    if "\x00" in value:
        raise LocalProtocolError("string contains U+0000")
    return U16.pack(len(raw)) + raw
