"""MQTT bytes known from the specifications' examples, and a few packets built by hand."""

from __future__ import annotations

import pytest

from logbus.gateway.mqtt import (
    MQTT_3_1, MQTT_3_1_1, MQTT_5, ConnAck, Connect, Decoder, Disconnect, PingReq, PingResp,
    PubAck, PubRel, Publish, SubAck, Subscribe, Subscription, UnsubAck, Will, decode, encode,
)  # fmt: skip
from logbus.gateway.mqtt.properties import Properties
from logbus.gateway.mqtt.wire import encode_vbi, read_string, read_vbi

# MQTT 5.0 table 1-1 (3.1.1 table 2.4): the bounds of each Variable Byte Integer size
REMAINING_LENGTHS = [
    (0, "00"), (127, "7F"), (128, "80 01"), (16_383, "FF 7F"), (16_384, "80 80 01"),
    (2_097_151, "FF FF 7F"), (2_097_152, "80 80 80 01"), (268_435_455, "FF FF FF 7F"),
]  # fmt: skip


@pytest.mark.parametrize(("value", "hex_"), REMAINING_LENGTHS)
def test_variable_byte_integers(value: int, hex_: str) -> None:
    raw = bytes.fromhex(hex_)
    assert encode_vbi(value) == raw
    assert read_vbi(raw, 0, len(raw)) == (value, len(raw))


@pytest.mark.parametrize(("value", "hex_"), REMAINING_LENGTHS)
def test_remaining_length_in_a_fixed_header(value: int, hex_: str) -> None:
    """A PUBLISH of each size decodes (the largest only as far as its header: the decoder
    waits for the body, holding just the header)."""
    if value < 3:
        return
    body = b"\x00\x01t" + b"\x00" + b"p" * (value - 4)  # topic "t", empty properties
    header = b"\x30" + bytes.fromhex(hex_)
    decoder = Decoder(version=MQTT_5)
    if value > 2_097_152:
        assert decoder.feed(header + body[:100]) == []
        assert decoder.buffered == len(header) + 100
        return
    assert encode(Publish("t", b"p" * (value - 4)), MQTT_5)[: len(header)] == header
    assert decoder.feed(header + body) == [Publish("t", b"p" * (value - 4))]


def test_utf8_string_example() -> None:
    """3.1.1 figure 1.3 / 5.0 figure 1-1: "A" then U+2A6D4."""
    assert read_string(bytes.fromhex("0005 41 F0AA9B94"), 0, 7) == ("A\U0002a6d4", 7)


def test_connect_variable_header_example_3_1_1() -> None:
    """3.1.1 figure 3.6: level 4, flags 0xCE (user name, password, will QoS 1, will,
    clean session), keep alive 10."""
    body = (bytes.fromhex("0004 4D515454 04 CE 000A") + b"\x00\x02id" + b"\x00\x01w" +
            b"\x00\x02hi" + b"\x00\x01u" + b"\x00\x02pw")  # fmt: skip
    packet = Connect("id", MQTT_3_1_1, True, 10, "u", b"pw", Will("w", b"hi", 1, False))
    raw = bytes([0x10, len(body)]) + body
    assert decode(raw) == [packet]
    assert encode(packet, MQTT_3_1_1) == raw


def test_connect_variable_header_example_5() -> None:
    """5.0 figure 3-7: level 5, flags 0xC2 (user name, password, clean start), keep alive
    10, properties: Session Expiry Interval 10."""
    body = (bytes.fromhex("0004 4D515454 05 C2 000A 05 11 0000000A") + b"\x00\x00" +
            b"\x00\x01u" + b"\x00\x00")  # fmt: skip
    packet = Connect("", MQTT_5, True, 10, "u", b"", None, Properties(session_expiry_interval=10))
    raw = bytes([0x10, len(body)]) + body
    assert decode(raw) == [packet]
    assert encode(packet, MQTT_5) == raw


def test_mqtt_3_1_connect() -> None:
    raw = bytes.fromhex("10 0F 0006 4D5149736470 03 02 003C 0001 63")
    assert decode(raw) == [Connect("c", MQTT_3_1, True, 60)]
    assert encode(Connect("c", MQTT_3_1, True, 60), MQTT_3_1) == raw


def test_publish_variable_header_example() -> None:
    """3.1.1 figure 3.11: topic "a/b", packet identifier 10."""
    raw = bytes.fromhex("32 09 0003 612F62 000A") + b"hi"
    assert decode(raw, MQTT_3_1_1) == [Publish("a/b", b"hi", 1, packet_id=10)]
    assert encode(Publish("a/b", b"hi", 1, packet_id=10), MQTT_3_1_1) == raw
    # in 5.0 an empty property block follows the packet identifier
    assert encode(Publish("a/b", b"hi", 1, packet_id=10), MQTT_5) == bytes.fromhex(
        "32 0A 0003 612F62 000A 00") + b"hi"


@pytest.mark.parametrize(("packet", "hex_"), [
    (PingReq(), "C0 00"),
    (PingResp(), "D0 00"),
    (Disconnect(), "E0 00"),
    (PubAck(1), "40 02 0001"),
    (PubRel(1), "62 02 0001"),
    (ConnAck(True, 0), "20 02 01 00"),
    (SubAck(7, (0, 1, 2, 0x80)), "90 06 0007 00010280"),
    (UnsubAck(7), "B0 02 0007"),
    (Subscribe(7, (Subscription("a/#", 1),)), "82 08 0007 0003 612F23 01"),
])  # fmt: skip
def test_hand_built_3_1_1(packet: object, hex_: str) -> None:
    raw = bytes.fromhex(hex_)
    assert encode(packet, MQTT_3_1_1) == raw  # type: ignore[arg-type]
    assert decode(raw, MQTT_3_1_1) == [packet]


@pytest.mark.parametrize(("packet", "hex_"), [
    (PubAck(1), "40 02 0001"),
    (PubAck(1, 0x10), "40 03 0001 10"),
    (PubAck(1, 0x10, Properties(reason_string="r")), "40 08 0001 10 04 1F 0001 72"),
    (Disconnect(0x04), "E0 01 04"),
    (ConnAck(False, 0, Properties(maximum_qos=1, retain_available=0)),
     "20 07 00 00 04 24 01 25 00"),
    (Subscribe(7, (Subscription("a", 2, True, True, 2),)), "82 07 0007 00 0001 61 2E"),
    (Publish("a", b"", 0, properties=Properties(
        user_properties=(("k", "v"), ("k", "w")), subscription_identifiers=(1, 300))),
     "30 17 0001 61 13 0B 01 0B AC02 26 0001 6B 0001 76 26 0001 6B 0001 77"),
    (UnsubAck(7, (0x00, 0x11)), "B0 05 0007 00 0011"),
])  # fmt: skip
def test_hand_built_5(packet: object, hex_: str) -> None:
    raw = bytes.fromhex(hex_)
    assert encode(packet, MQTT_5) == raw  # type: ignore[arg-type]
    assert decode(raw, MQTT_5) == [packet]


def test_longer_forms_decode_to_the_short_one() -> None:
    """A 5.0 acknowledgement or DISCONNECT may spell out reason 0 and an empty property
    block: the same packet as the two-byte form."""
    assert decode(bytes.fromhex("40 04 0001 00 00"), MQTT_5) == [PubAck(1)]
    assert decode(bytes.fromhex("E0 02 00 00"), MQTT_5) == [Disconnect()]
    assert decode(bytes.fromhex("F0 00"), MQTT_5)[0].reason_code == 0  # type: ignore[union-attr]


def test_empty_topic_with_a_topic_alias() -> None:
    raw = bytes.fromhex("30 07 0000 03 23 0005") + b"p"
    assert decode(raw, MQTT_5) == [Publish("", b"p", properties=Properties(topic_alias=5))]


def test_password_without_user_name_in_5() -> None:
    packet = Connect("c", MQTT_5, password=b"secret")
    assert decode(encode(packet, MQTT_5)) == [packet]
