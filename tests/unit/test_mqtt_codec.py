"""The MQTT codec as a whole: every packet type round-trips in 3.1.1 and 5.0, a stream
decodes the same however it is cut, and no input makes the decoder raise anything but
``MqttError`` or hold more than its packet size limit."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbus.gateway.mqtt import (
    MQTT_3_1_1, MQTT_5, Connect, Decoder, MqttError, Packet, Publish, decode, encode,
)  # fmt: skip
from logbus.gateway.mqtt.properties import Properties

from .mqtt_strategies import any_packet, connects, packets

VERSIONS = [MQTT_3_1_1, MQTT_5]
SLOW = settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
STREAMS = settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow])


def wire_version(packet: Packet, version: int) -> int:
    return packet.protocol_level if isinstance(packet, Connect) else version


@pytest.mark.parametrize("version", VERSIONS)
@SLOW
@given(data=st.data())
def test_every_packet_round_trips(version: int, data: st.DataObject) -> None:
    packet = data.draw(any_packet(version))
    raw = encode(packet, wire_version(packet, version))
    assert decode(raw, version) == [packet]
    # the encoding is canonical: decoding then encoding gives the same bytes
    assert encode(decode(raw, version)[0], wire_version(packet, version)) == raw


@pytest.mark.parametrize("version", VERSIONS)
@STREAMS
@given(data=st.data())
def test_a_session_decodes_the_same_however_it_is_cut(version: int, data: st.DataObject) -> None:
    connect = data.draw(connects(version))
    rest = data.draw(st.lists(packets(version), max_size=8))
    stream = encode(connect, connect.protocol_level) + b"".join(encode(p, version) for p in rest)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    decoder = Decoder()
    out: list[Packet] = []
    for a, b in zip([0, *cuts], [*cuts, len(stream)]):
        out += decoder.feed(stream[a:b])
    assert out == [connect, *rest]
    assert decoder.version == connect.protocol_level and decoder.buffered == 0


def test_a_byte_at_a_time() -> None:
    stream = b"".join(encode(p, MQTT_5) for p in (
        Connect("c", properties=Properties(session_expiry_interval=60)),
        Publish("a/b", b"x" * 300, 1, packet_id=1),
        Publish("a/b", b"", 0),
    ))  # fmt: skip
    decoder = Decoder()
    out = [p for i in range(len(stream)) for p in decoder.feed(stream[i : i + 1])]
    assert [type(p).__name__ for p in out] == ["Connect", "Publish", "Publish"]
    assert out[1].payload == b"x" * 300  # type: ignore[union-attr]


def _feed_all(decoder: Decoder, chunks: list[bytes]) -> None:
    """Feed until the decoder refuses; only MqttError may escape, and between calls the
    decoder holds less than one packet of its limit."""
    for chunk in chunks:
        try:
            decoder.feed(chunk)
        except MqttError as e:
            assert 0 <= e.reason_code <= 0xFF
            with pytest.raises(MqttError) as again:
                decoder.feed(b"\x00")
            assert again.value is e
            return
        assert decoder.buffered <= decoder.max_packet_size


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=64), max_size=8), st.integers(2, 200))
def test_arbitrary_bytes_before_connect(chunks: list[bytes], limit: int) -> None:
    _feed_all(Decoder(max_packet_size=limit), chunks)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=300)
@given(chunks=st.lists(st.binary(max_size=64), max_size=8), limit=st.integers(2, 200))
def test_arbitrary_bytes_after_connect(version: int, chunks: list[bytes], limit: int) -> None:
    decoder = Decoder(max_packet_size=max(limit, 40))
    assert decoder.feed(encode(Connect("c", version), version)) == [Connect("c", version)]
    _feed_all(decoder, chunks)


@pytest.mark.parametrize("version", VERSIONS)
@STREAMS
@given(data=st.data())
def test_valid_streams_with_bytes_changed(version: int, data: st.DataObject) -> None:
    """Near-valid input reaches deeper than random bytes: change a few bytes of a valid
    session and the decoder still answers with packets or an MqttError, nothing else."""
    packets_ = [data.draw(connects(version)), *data.draw(st.lists(packets(version), max_size=5))]
    stream = bytearray(b"".join(encode(p, wire_version(p, version)) for p in packets_))
    for _ in range(data.draw(st.integers(1, 4))):
        stream[data.draw(st.integers(0, len(stream) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(stream)))
    _feed_all(Decoder(max_packet_size=data.draw(st.integers(64, 4096))),
              [bytes(stream[:cut]), bytes(stream[cut:])])  # fmt: skip


def test_packets_before_an_error_travel_on_it() -> None:
    good = encode(Publish("a", b"1"), MQTT_5)
    decoder = Decoder(version=MQTT_5)
    with pytest.raises(MqttError) as e:
        decoder.feed(good + good + b"\x36\x00")  # QoS 3
    assert e.value.reason_code == 0x81
    assert e.value.packets == [Publish("a", b"1"), Publish("a", b"1")]
