"""MQTT packets built by hand for the bad-input tests (test_mqtt_bad_input.py): what no
codec of ours would encode, and the 5.0 reason code each one must be answered with."""

from __future__ import annotations

from logbus.gateway.mqtt.wire import encode_vbi

# reason codes (MQTT 5.0 section 2.4)
MALFORMED, PROTOCOL_ERROR, UNSUPPORTED_VERSION = 0x81, 0x82, 0x84
BAD_LOGIN, NOT_AUTHORIZED, FILTER_INVALID, NAME_INVALID = 0x86, 0x87, 0x8F, 0x90
PACKET_ID_NOT_FOUND, ALIAS_INVALID, TOO_LARGE = 0x92, 0x94, 0x95


# -- building bad packets by hand ---------------------------------------------------------------


def packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + encode_vbi(len(body)) + body


def string(b: bytes) -> bytes:
    return len(b).to_bytes(2, "big") + b


def props(version: int) -> bytes:
    """An empty property block (5.0), nothing in 3.1.1."""
    return b"\x00" if version == 5 else b""


def publish_bytes(version: int, topic: bytes, qos: int = 0, packet_id: int = 1, flags: int | None = None) -> bytes:
    pid = packet_id.to_bytes(2, "big") if qos else b""
    return packet(0x30 | (qos << 1 if flags is None else flags), string(topic) + pid + props(version) + b"payload")


def subscribe_bytes(version: int, topic_filter: bytes, options: int = 1, packet_id: int = 1, first: int = 0x82) -> bytes:
    return packet(first, packet_id.to_bytes(2, "big") + props(version) + string(topic_filter) + bytes([options]))


def malformed_cases(version: int) -> list[tuple[str, bytes, int]]:
    """(what, bytes, the 5.0 reason code) of bad packets from a connected client."""
    v = version
    cases = [
        ("remaining length over 4 bytes", b"\xc0\x80\x80\x80\x80\x01", MALFORMED),
        ("remaining length longer than its shortest form", b"\xc0\x80\x00", MALFORMED),
        ("reserved packet type 0", b"\x00\x00", MALFORMED),
        ("PINGREQ with reserved flags", b"\xc1\x00", MALFORMED),
        ("PINGREQ with a byte after it", b"\xc0\x01\x00", MALFORMED),
        ("PUBREL with flags 0", b"\x60\x02\x00\x01", MALFORMED),
        ("SUBSCRIBE with flags 0", subscribe_bytes(v, b"a/b", first=0x80), MALFORMED),
        ("PUBLISH with QoS 3", publish_bytes(v, b"a/b", flags=0b0110), MALFORMED),
        ("PUBLISH with DUP at QoS 0", publish_bytes(v, b"a/b", flags=0b1000), MALFORMED),
        ("PUBLISH topic running past the packet", packet(0x30, b"\x00\x0aa"), MALFORMED),
        ("PUBLISH QoS 1 cut in its packet id", packet(0x32, string(b"a/b") + b"\x00"), MALFORMED),
        ("SUBSCRIBE without its options byte", packet(0x82, b"\x00\x01" + props(v) + string(b"a/b")), MALFORMED),
        ("topic not UTF-8", publish_bytes(v, b"a/\xff\xfe"), MALFORMED),
        ("topic with a surrogate", publish_bytes(v, b"a/\xed\xa0\x80"), MALFORMED),
        ("topic with U+0000", publish_bytes(v, b"a/\x00"), MALFORMED),
        ("PUBLISH QoS 1 with packet id 0", publish_bytes(v, b"a/b", qos=1, packet_id=0), MALFORMED),
        ("PUBLISH QoS 2 with packet id 0", publish_bytes(v, b"a/b", qos=2, packet_id=0), MALFORMED),
        ("SUBSCRIBE with packet id 0", subscribe_bytes(v, b"a/b", packet_id=0), MALFORMED),
        ("PUBLISH topic with +", publish_bytes(v, b"a/+/b"), NAME_INVALID),
        ("PUBLISH topic with #", publish_bytes(v, b"a/#", qos=1), NAME_INVALID),
        ("filter a/#/b", subscribe_bytes(v, b"a/#/b"), FILTER_INVALID),
        ("filter a+/b", subscribe_bytes(v, b"a+/b"), FILTER_INVALID),
        ("empty filter", subscribe_bytes(v, b""), FILTER_INVALID),
        ("SUBSCRIBE without a filter", packet(0x82, b"\x00\x01" + props(v)), PROTOCOL_ERROR),
        ("UNSUBSCRIBE with flags 0", packet(0xA0, b"\x00\x01" + props(v) + string(b"a/b")), MALFORMED),
        ("UNSUBSCRIBE filter a/#/b", packet(0xA2, b"\x00\x01" + props(v) + string(b"a/#/b")), FILTER_INVALID),
        ("UNSUBSCRIBE without a filter", packet(0xA2, b"\x00\x01" + props(v)), PROTOCOL_ERROR),
        ("empty topic", publish_bytes(v, b""), PROTOCOL_ERROR if v == 5 else NAME_INVALID),
    ]
    if v == 5:
        cases += [
            ("subscription options with reserved bits", subscribe_bytes(v, b"a/b", options=0xC1), MALFORMED),
            ("unknown property", packet(0x30, string(b"a/b") + b"\x02\x7f\x00"), MALFORMED),
            ("topic alias 0", packet(0x30, string(b"a/b") + b"\x03\x23\x00\x00"), ALIAS_INVALID),
        ]
    else:
        cases += [("requested QoS 3", subscribe_bytes(v, b"a/b", options=3), MALFORMED)]
    return cases
