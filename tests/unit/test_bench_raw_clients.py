"""The hand-made framing of the bench's cheap latency clients (bench/mqtt_raw.py),
checked against the broker's own MQTT encoder and decoder: a packet split anywhere
across reads is found whole, and nothing is taken before it is complete."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logbus.gateway.mqtt.decoder import decode
from logbus.gateway.mqtt.encoder import encode_publish
from logbus.gateway.mqtt.packets import Publish
from logbus.gateway.mqtt.properties import NO_PROPERTIES
from logbus.gateway.mqtt.wire import MQTT_3_1_1 as MQTT_311
from tests.bench_path import bench_on_path


@pytest.fixture(scope="module")
def raw() -> Iterator[Any]:
    with bench_on_path():
        import mqtt_raw
        yield mqtt_raw


@given(n=st.integers(0, 268_435_455))
def test_remaining_length_is_mqtt_varint(raw: Any, n: int) -> None:
    encoded = raw.remaining_length(n)
    assert 1 <= len(encoded) <= 4
    value, mult = 0, 1
    for i, digit in enumerate(encoded):
        value += (digit & 0x7F) * mult
        mult *= 128
        assert bool(digit & 0x80) == (i < len(encoded) - 1)
    assert value == n


class _Conn:
    """``RawMqtt.packets`` on a buffer of our own, without a socket."""

    def __init__(self, raw: Any) -> None:
        self.buf = bytearray()
        self.packets = raw.RawMqtt.packets.__get__(self)


@given(bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=5),
       cuts=st.lists(st.integers(0, 2000), max_size=6))
def test_packets_found_whole_across_any_split(raw: Any, bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(raw.packet(0x32, b) for b in bodies)
    conn = _Conn(raw)
    got: list[tuple[int, bytes]] = []
    pos = 0
    for cut in sorted({min(c, len(stream)) for c in cuts} | {len(stream)}):
        conn.buf += stream[pos:cut]
        pos = cut
        got += conn.packets()
    assert got == [(0x32, b) for b in bodies]
    assert not conn.buf


@given(topic=st.text(min_size=1, max_size=40).filter(lambda t: "\0" not in t and "+" not in t and "#" not in t),
       pid=st.integers(1, 65535), payload=st.binary(max_size=500))
def test_publish_is_what_the_broker_encodes(raw: Any, topic: str, pid: int, payload: bytes) -> None:
    """The raw publisher's PUBLISH is byte for byte the broker's own encoding of it, and
    the broker's decoder reads it back (3.1.1)."""
    ours = raw.packet(0x32, raw.utf8(topic) + pid.to_bytes(2, "big") + payload)
    assert ours == encode_publish(topic, payload, 1, False, False, pid, NO_PROPERTIES, MQTT_311)
    assert decode(ours, MQTT_311) == [Publish(topic, payload, qos=1, packet_id=pid)]


def test_connect_and_subscribe_decode(raw: Any) -> None:
    """CONNECT (clean session, keep alive) and SUBSCRIBE as the raw clients write them."""
    connect = raw.packet(0x10, raw.utf8("MQTT") + bytes([4, 0x02]) + raw.KEEPALIVE_S.to_bytes(2, "big")
                         + raw.utf8("raw-sub-1"))
    (c,) = decode(connect)
    assert (c.client_id, c.protocol_level, c.clean_start, c.keep_alive) == ("raw-sub-1", 4, True, raw.KEEPALIVE_S)
    (sub,) = decode(raw.packet(0x82, (1).to_bytes(2, "big") + raw.utf8("bench/#") + bytes([1])), MQTT_311)
    assert sub.packet_id == 1 and [(f.topic_filter, f.qos) for f in sub.subscriptions] == [("bench/#", 1)]
