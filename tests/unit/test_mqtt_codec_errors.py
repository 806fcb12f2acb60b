"""Every rule the MQTT decoder enforces, each with the reason code the 5.0 specification
asks for, and the encoder's refusals of what a version cannot say."""

from __future__ import annotations

import pytest

from logbus.gateway.mqtt import (
    MQTT_3_1_1, MQTT_5, Auth, Connect, Decoder, Disconnect, LocalProtocolError, MqttError,
    PubAck, Publish, Subscribe, Subscription, UnsubAck, UnsupportedProtocolVersion, decode,
    encode,
)  # fmt: skip
from logbus.gateway.mqtt.properties import Properties
from logbus.gateway.mqtt.wire import encode_vbi

MALFORMED, PROTOCOL, UNSUPPORTED, TOPIC_FILTER, TOPIC_NAME, ALIAS, TOO_LARGE = (
    0x81, 0x82, 0x84, 0x8F, 0x90, 0x94, 0x95)  # fmt: skip


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return len(raw).to_bytes(2, "big") + raw


def packet(first: int, *body: bytes) -> bytes:
    joined = b"".join(body)
    return bytes([first]) + encode_vbi(len(joined)) + joined


def refused(raw: bytes, version: int | None = MQTT_5) -> int:
    with pytest.raises(MqttError) as e:
        Decoder(version=version).feed(raw)
    return e.value.reason_code


# -- the fixed header --


@pytest.mark.parametrize("first", [0x60, 0x63, 0x80, 0x81, 0xA0, 0xA8, 0x41, 0x52, 0x71, 0x98,
                                   0xB4, 0xC1, 0xD2, 0xE8, 0xF1, 0x21])  # fmt: skip
def test_reserved_flag_bits(first: int) -> None:
    assert refused(bytes([first, 0])) == MALFORMED


def test_reserved_packet_types() -> None:
    assert refused(b"\x00\x00") == MALFORMED
    assert refused(b"\xf0\x00", MQTT_3_1_1) == MALFORMED  # AUTH does not exist in 3.1.1
    assert decode(b"\xf0\x00", MQTT_5) == [Auth()]


def test_remaining_length_of_five_bytes() -> None:
    assert refused(b"\x30\xff\xff\xff\xff\x01") == MALFORMED


def test_remaining_length_not_shortest() -> None:
    assert refused(b"\xc0\x80\x00") == MALFORMED


def test_packet_too_large_before_the_body_arrives() -> None:
    decoder = Decoder(max_packet_size=100, version=MQTT_5)
    with pytest.raises(MqttError) as e:
        decoder.feed(b"\x30\x80\x01")  # 128 bytes announced, none sent
    assert e.value.reason_code == TOO_LARGE
    decoder = Decoder(max_packet_size=100, version=MQTT_5)
    with pytest.raises(MqttError) as e:
        decoder.feed(b"\x30\xff\xff")  # the length is not even complete: already too large
    assert e.value.reason_code == TOO_LARGE
    assert decode(encode(Publish("t", b"x" * 95), MQTT_5), MQTT_5)  # 101 bytes, default limit
    assert Decoder(max_packet_size=101, version=MQTT_5).feed(encode(Publish("t", b"x" * 95), MQTT_5))


def test_first_packet_must_be_connect() -> None:
    assert refused(encode(Publish("a", b""), MQTT_5), None) == PROTOCOL


def test_an_error_kills_the_decoder() -> None:
    decoder = Decoder(version=MQTT_5)
    with pytest.raises(MqttError) as first:
        decoder.feed(b"\x00\x00")
    with pytest.raises(MqttError) as second:
        decoder.feed(encode(Publish("a", b""), MQTT_5))
    assert second.value is first.value


# -- PUBLISH --


def test_qos_3() -> None:
    assert refused(packet(0x36, s("a"), b"\x00\x01")) == MALFORMED


def test_dup_at_qos_0() -> None:
    assert refused(packet(0x38, s("a"), b"\x00"), MQTT_5) == MALFORMED


@pytest.mark.parametrize("version", [MQTT_3_1_1, MQTT_5])
def test_packet_identifier_0(version: int) -> None:
    props = b"\x00" if version == MQTT_5 else b""
    assert refused(packet(0x32, s("a"), b"\x00\x00", props), version) == MALFORMED
    assert refused(packet(0x82, b"\x00\x00", props, s("a"), b"\x00"), version) == MALFORMED
    assert refused(packet(0xA2, b"\x00\x00", props, s("a")), version) == MALFORMED


@pytest.mark.parametrize("topic", ["a/+", "+", "a/#", "#", "a+b"])
def test_wildcard_in_a_topic_name(topic: str) -> None:
    assert refused(packet(0x30, s(topic), b"\x00")) == TOPIC_NAME
    assert refused(packet(0x30, s(topic)), MQTT_3_1_1) == TOPIC_NAME


def test_empty_topic_name() -> None:
    assert refused(packet(0x30, s(""), b"\x00")) == PROTOCOL  # 5.0: only with a topic alias
    assert refused(packet(0x30, s("")), MQTT_3_1_1) == TOPIC_NAME


@pytest.mark.parametrize("raw", [
    b"\xff", b"a\xc3", b"\xc0\x80",  # not UTF-8; overlong U+0000
    b"\xed\xa0\x80", b"\xed\xbf\xbf",  # surrogates U+D800, U+DFFF
    b"a\x00b",  # U+0000
    b"\xf4\x90\x80\x80",  # past U+10FFFF
])  # fmt: skip
def test_strings_must_be_well_formed_utf8_without_nul(raw: bytes) -> None:
    assert refused(packet(0x30, s(raw), b"\x00")) == MALFORMED
    connect = packet(0x10, s("MQTT"), b"\x04\x02\x00\x00", s(raw))
    assert refused(connect, None) == MALFORMED


def test_fields_running_past_the_packet() -> None:
    assert refused(packet(0x30, b"\x00\x05ab")) == MALFORMED
    assert refused(packet(0x32, s("a"), b"\x00")) == MALFORMED  # half a packet identifier
    assert refused(packet(0x30, s("a"), b"\x05\x01")) == MALFORMED  # property block


# -- properties --


def test_unknown_property() -> None:
    assert refused(packet(0x30, s("a"), b"\x02\x05\x00")) == MALFORMED


def test_property_not_allowed_in_this_packet() -> None:
    assert refused(packet(0x30, s("a"), b"\x03\x13\x00\x05")) == MALFORMED  # Server Keep Alive
    assert refused(packet(0x40, b"\x00\x01\x00", b"\x05\x11\x00\x00\x00\x01")) == MALFORMED


def test_duplicate_property() -> None:
    twice = b"\x02\x00\x00\x00\x01" * 2  # Message Expiry Interval
    assert refused(packet(0x30, s("a"), bytes([len(twice)]), twice)) == PROTOCOL


def test_repeatable_properties() -> None:
    users = b"\x26" + s("k") + s("v") + b"\x26" + s("k") + s("v")
    ids = b"\x0b\x01\x0b\x02"
    [p] = decode(packet(0x30, s("a"), encode_vbi(len(users + ids)), users + ids), MQTT_5)
    assert p.properties == Properties(user_properties=(("k", "v"),) * 2,  # type: ignore[union-attr]
                                      subscription_identifiers=(1, 2))  # fmt: skip
    # but one subscription identifier in a SUBSCRIBE
    assert refused(packet(0x82, b"\x00\x01\x04", ids, s("a"), b"\x00")) == PROTOCOL


@pytest.mark.parametrize(("props", "code"), [
    (b"\x01\x02", PROTOCOL),  # Payload Format Indicator 2
    (b"\x0b\x00", PROTOCOL),  # Subscription Identifier 0
    (b"\x23\x00\x00", ALIAS),  # Topic Alias 0
])  # fmt: skip
def test_property_values_in_publish(props: bytes, code: int) -> None:
    assert refused(packet(0x30, s("a"), bytes([len(props)]), props)) == code


@pytest.mark.parametrize(("props", "code"), [
    (b"\x17\x02", PROTOCOL),  # Request Problem Information 2
    (b"\x19\x03", PROTOCOL),  # Request Response Information 3
    (b"\x21\x00\x00", PROTOCOL),  # Receive Maximum 0
    (b"\x27\x00\x00\x00\x00", PROTOCOL),  # Maximum Packet Size 0
    (b"\x16" + s(b"data"), PROTOCOL),  # Authentication Data without a method
    (b"\x01\x00", MALFORMED),  # a will property in the CONNECT's own block
])  # fmt: skip
def test_property_values_in_connect(props: bytes, code: int) -> None:
    connect = packet(0x10, s("MQTT"), b"\x05\x02\x00\x00", bytes([len(props)]), props, s("c"))
    assert refused(connect, None) == code


def test_will_property_block() -> None:
    will = packet(0x10, s("MQTT"), b"\x05\x06\x00\x00\x00", s("c"), b"\x02\x13\x00", s("w"), s(""))
    assert refused(will, None) == MALFORMED  # Server Keep Alive is no will property


# -- CONNECT --


def connect(level: int, flags: int, *payload: bytes, name: str = "MQTT") -> bytes:
    props = b"\x00" if level == 5 else b""
    return packet(0x10, s(name), bytes([level, flags]), b"\x00\x3c", props, *payload)


@pytest.mark.parametrize(("level", "name"), [(6, "MQTT"), (2, "MQTT"), (3, "MQTT"),
                                             (4, "MQIsdp"), (4, "MQTX")])  # fmt: skip
def test_unsupported_protocol(level: int, name: str) -> None:
    with pytest.raises(UnsupportedProtocolVersion) as e:
        Decoder().feed(connect(level, 0x02, s("c"), name=name))
    assert e.value.reason_code == UNSUPPORTED and e.value.return_code == 1
    assert e.value.level == level


def test_other_errors_have_no_return_code() -> None:
    with pytest.raises(MqttError) as e:
        Decoder().feed(connect(4, 0x03, s("c")))
    assert e.value.return_code is None


@pytest.mark.parametrize("level", [4, 5])
def test_connect_flags(level: int) -> None:
    will = (b"\x00" if level == 5 else b"") + s("w") + s("m")
    assert refused(connect(level, 0x03, s("c")), None) == MALFORMED  # reserved bit
    assert refused(connect(level, 0x0A, s("c")), None) == MALFORMED  # will QoS, no will
    assert refused(connect(level, 0x22, s("c")), None) == MALFORMED  # will retain, no will
    assert refused(connect(level, 0x1E, s("c"), will), None) == MALFORMED  # will QoS 3
    assert decode(connect(level, 0x16, s("c"), will))[0].will.qos == 2  # type: ignore[union-attr]
    assert refused(connect(level, 0x06, s("c"), b"\x00" if level == 5 else b"", s("w+"), s("m")),
                   None) == TOPIC_NAME  # fmt: skip
    assert refused(connect(level, 0x02, s("c"), b"extra"), None) == MALFORMED
    assert refused(connect(level, 0x82, s("c")), None) == MALFORMED  # user name flag, no name


def test_password_without_user_name() -> None:
    assert refused(connect(4, 0x42, s("c"), s("pw")), None) == MALFORMED
    assert decode(connect(5, 0x42, s("c"), s("pw")))[0].password == b"pw"  # type: ignore[union-attr]


@pytest.mark.parametrize(("level", "raw"), [
    (5, connect(5, 0x03, s("c"))),
    (5, packet(0x10, s("MQTT"), b"\x05\x02\x00\x00\x02\x17\x05", s("c"))),
    (4, connect(4, 0x42, s("c"), s("pw"))),
    (None, connect(6, 0x02, s("c"))),
])  # fmt: skip
def test_a_broken_connect_still_tells_its_version(level: int | None, raw: bytes) -> None:
    """So that the answer to a broken 5.0 CONNECT is a 5.0 CONNACK with the reason code."""
    decoder = Decoder()
    with pytest.raises(MqttError):
        decoder.feed(raw)
    assert decoder.version == level


def test_connect_sets_the_version_once() -> None:
    decoder = Decoder()
    raw = connect(4, 0x02, s("c"))
    assert decoder.feed(raw + raw)[1] == Connect("c", 4, True, 60)
    assert decoder.version == 4  # a second CONNECT is the session's protocol error


# -- SUBSCRIBE / UNSUBSCRIBE --


def subscribe(topic_filter: str, options: int, version: int = MQTT_5) -> bytes:
    props = b"\x00" if version == MQTT_5 else b""
    return packet(0x82, b"\x00\x01", props, s(topic_filter), bytes([options]))


def test_subscribe_without_filters() -> None:
    assert refused(packet(0x82, b"\x00\x01\x00")) == PROTOCOL
    assert refused(packet(0x82, b"\x00\x01"), MQTT_3_1_1) == PROTOCOL
    assert refused(packet(0xA2, b"\x00\x01\x00")) == PROTOCOL
    assert refused(packet(0xA2, b"\x00\x01"), MQTT_3_1_1) == PROTOCOL


def test_subscription_options_5() -> None:
    assert refused(subscribe("a", 0x40)) == MALFORMED  # reserved bits
    assert refused(subscribe("a", 0x03)) == PROTOCOL  # QoS 3
    assert refused(subscribe("a", 0x30)) == PROTOCOL  # retain handling 3
    assert refused(subscribe("$share/g/a", 0x04)) == PROTOCOL  # no local, shared
    [p] = decode(subscribe("$share/g/a", 0x2A), MQTT_5)
    assert p == Subscribe(1, (Subscription("$share/g/a", 2, False, True, 2),))


def test_subscription_options_3_1_1() -> None:
    assert refused(subscribe("a", 0x04, MQTT_3_1_1), MQTT_3_1_1) == MALFORMED
    assert refused(subscribe("a", 0x03, MQTT_3_1_1), MQTT_3_1_1) == MALFORMED


@pytest.mark.parametrize("topic_filter", ["", "a/#/b", "a#", "#/a", "a/b#", "a+", "+a/b", "a/++",
                                          "$share//a", "$share/g", "$share/g+/a", "$share/#/a",
                                          "$share/g/"])  # fmt: skip
def test_invalid_topic_filters(topic_filter: str) -> None:
    assert refused(subscribe(topic_filter, 0)) == TOPIC_FILTER
    assert refused(packet(0xA2, b"\x00\x01\x00", s(topic_filter))) == TOPIC_FILTER


@pytest.mark.parametrize("topic_filter", ["#", "+", "/", "a/+/#", "+/+", "$SYS/#", "a/b/c",
                                          "$share/g/#", "$share/g/+/x"])  # fmt: skip
def test_valid_topic_filters(topic_filter: str) -> None:
    assert decode(subscribe(topic_filter, 0), MQTT_5)


def test_share_names_mean_nothing_in_3_1_1() -> None:
    assert decode(subscribe("$share/g", 0x00, MQTT_3_1_1), MQTT_3_1_1)
    assert refused(subscribe("$share/g", 0x00)) == TOPIC_FILTER


# -- acknowledgements, DISCONNECT, AUTH --


@pytest.mark.parametrize("raw", [
    "40 03 0001 05",  # PUBACK: no such reason
    "62 03 0001 10",  # PUBREL: 0x10 is a PUBACK reason only
    "90 03 0001 03",  # SUBACK: 3
    "B0 04 0001 00 92",  # UNSUBACK
    "E0 01 84",  # DISCONNECT: 0x84 is a CONNACK reason only
    "F0 01 01",  # AUTH
    "20 02 00 01",  # CONNACK: 3.1.1's return code 1 is no 5.0 reason
    "20 02 02 00",  # CONNACK: reserved acknowledge flags
])  # fmt: skip
def test_reason_codes_outside_the_packets_table(raw: str) -> None:
    assert refused(bytes.fromhex(raw)) == MALFORMED


@pytest.mark.parametrize("raw", ["40 03 0001 00", "E0 01 00", "B0 03 0001 00", "20 02 00 06",
                                 "90 03 0001 03", "C0 01 00", "D0 01 00"])  # fmt: skip
def test_3_1_1_bodies_have_no_extras(raw: str) -> None:
    assert refused(bytes.fromhex(raw), MQTT_3_1_1) == MALFORMED


def test_trailing_bytes_after_properties() -> None:
    assert refused(bytes.fromhex("40 05 0001 00 00 FF")) == MALFORMED
    assert refused(bytes.fromhex("E0 03 00 00 FF")) == MALFORMED


# -- the encoder --


@pytest.mark.parametrize("packet_", [
    PubAck(1, 0x10), PubAck(1, 0, Properties(reason_string="r")), Disconnect(0x8E), Auth(),
    UnsubAck(1, (0,)), Publish("a", b"", properties=Properties(content_type="x")),
    Subscribe(1, (Subscription("a", 0, no_local=True),)),
    Connect("c", MQTT_3_1_1, password=b"p"),
])  # fmt: skip
def test_encoding_5_0_fields_in_3_1_1_is_refused(packet_: object) -> None:
    with pytest.raises(LocalProtocolError):
        encode(packet_, MQTT_3_1_1)  # type: ignore[arg-type]


@pytest.mark.parametrize("packet_", [
    Publish("a", b"", 3, packet_id=1), Publish("a", b"", 1), Publish("a", b"", 0, packet_id=1),
    Publish("a", b"", 0, dup=True), PubAck(0), PubAck(70_000), Subscribe(1, ()),
    Publish("a", b"", properties=Properties(topic_alias=70_000)),
    Publish("a", b"", properties=Properties(session_expiry_interval=1)),
    Publish("a", b"", properties=Properties(subscription_identifiers=(0,))),
    Publish("a\x00", b""), Publish("\ud800", b""), Publish("a" * 65_536, b""),
    Connect("c", MQTT_3_1_1),  # encoded as 5
])  # fmt: skip
def test_encoder_refuses_what_the_wire_cannot_say(packet_: object) -> None:
    with pytest.raises(LocalProtocolError):
        encode(packet_, MQTT_5)  # type: ignore[arg-type]


def test_encoder_refuses_unknown_versions() -> None:
    with pytest.raises(LocalProtocolError):
        encode(Connect("c", 6), 6)
    with pytest.raises(LocalProtocolError):
        encode(PubAck(1), 2)
