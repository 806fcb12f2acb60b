"""Kafka framing and request parsing, sans I/O, with kafka-python's client-side
encoders as the peer."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest

from logbus.gateway.kafka.codec import (
    FrameDecoder,
    FrameTooLarge,
    KafkaProtocolError,
    MalformedFrame,
    UnknownApi,
    UnsupportedVersion,
    frame_response,
    parse_request,
)

SUPPORTED = {18: (ApiVersionsRequest, ApiVersionsResponse, 0, 3)}


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def api_versions_frame(version: int = 3, correlation_id: int = 7) -> bytes:
    r = ApiVersionsRequest(version=version, client_software_name="t", client_software_version="1")
    r.with_header(correlation_id=correlation_id, client_id="test")
    return bytes(r.encode(header=True))


@given(st.lists(st.binary(max_size=50), max_size=10), st.data())
def test_frames_survive_any_chunking(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(framed(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    dec = FrameDecoder(max_frame=1000)
    out: list[bytes] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        out += dec.feed(stream[prev:cut])
        prev = cut
    assert out == payloads and dec.buffered == 0


def test_size_is_checked_before_the_body_arrives() -> None:
    dec = FrameDecoder(max_frame=100)
    with pytest.raises(FrameTooLarge):
        dec.feed(struct.pack(">i", 101))  # no body sent: refused at once, nothing allocated
    with pytest.raises(MalformedFrame):
        FrameDecoder().feed(struct.pack(">i", -5))
    dec2 = FrameDecoder(max_frame=100)
    assert dec2.feed(struct.pack(">i", 10) + b"abc") == [] and dec2.buffered == 7


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_garbage_raises_only_protocol_errors(data: bytes) -> None:
    try:
        for frame in FrameDecoder(max_frame=200).feed(data):
            parse_request(frame, SUPPORTED)
    except KafkaProtocolError:
        pass


def test_parse_request_and_answer() -> None:
    req = parse_request(api_versions_frame(3, 42), SUPPORTED)
    assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == (18, 3, 42, "test")
    resp = ApiVersionsResponse(error_code=0, api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=3)])
    out = frame_response(resp, 3, 42)
    back = ApiVersionsResponse.decode(out[4:], version=3, header=True)
    assert back.header.correlation_id == 42 and back.api_keys[0].max_version == 3


def test_unknown_and_unsupported_and_truncated() -> None:
    with pytest.raises(UnknownApi):
        parse_request(struct.pack(">hhi", 999, 0, 1) + b"\x00\x00", SUPPORTED)
    with pytest.raises(UnsupportedVersion) as e:
        parse_request(api_versions_frame(4, 9), SUPPORTED)
    assert e.value.correlation_id == 9
    with pytest.raises(MalformedFrame):
        parse_request(b"\x00\x12", SUPPORTED)
    r = MetadataRequest(version=1, topics=[MetadataRequest.MetadataRequestTopic(name="t")])
    r.with_header(correlation_id=1, client_id="c")
    frame = bytes(r.encode(header=True))
    with pytest.raises(MalformedFrame):
        parse_request(frame[:-3], {3: (MetadataRequest, None, 0, 9)})


fetch_parts = st.lists(
    st.builds(
        lambda i, e, hw, start, recs: (i, e, hw, start, recs),
        st.integers(0, 100), st.sampled_from([0, 1, 3]), st.integers(0, 2**40), st.integers(0, 2**40),
        st.binary(max_size=40),
    ),
    max_size=4,
)


@given(
    st.integers(4, 11),
    st.integers(0, 2**31 - 1),
    st.lists(st.tuples(st.text(min_size=1, max_size=10), fetch_parts), max_size=3),
)
def test_fast_fetch_response_matches_kafka_python(version: int, cid: int, topics: list) -> None:
    from kafka.protocol.consumer import FetchResponse

    from logbus.gateway.kafka.codec import FetchPartition, encode_fetch_response

    fast = encode_fetch_response(
        version, cid, 0,
        [(name, [FetchPartition(i, e, hw, hw, start, recs) for i, e, hw, start, recs in parts]) for name, parts in topics],
    )
    T = FetchResponse.FetchableTopicResponse
    P = T.PartitionData
    reference = FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=0,
        responses=[
            T(topic=name, partitions=[
                P(partition_index=i, error_code=e, high_watermark=hw, last_stable_offset=hw, log_start_offset=start,
                  aborted_transactions=[], preferred_read_replica=-1, records=recs)
                for i, e, hw, start, recs in parts
            ])
            for name, parts in topics
        ],
    )
    assert b"".join(fast) == frame_response(reference, version, cid)


def test_a_response_that_cannot_be_encoded_closes_the_connection(tmp_path: Any) -> None:
    """The shell must not leave later responses stuck behind a failed one."""
    from twisted.internet.testing import StringTransport

    from logbus.core.broker import Broker
    from logbus.gateway.kafka.handlers import KafkaHandlers
    from logbus.gateway.kafka.protocol import KafkaProtocol
    from tests.loop import LoopReactor

    loop = LoopReactor()
    broker = Broker(tmp_path, reactor=loop)
    broker.start()
    try:
        handlers = KafkaHandlers(broker.doors, broker.streams, broker.topics, broker.access, loop)
        handlers.register(ApiVersionsRequest, ApiVersionsResponse, 0, 3,
                          lambda req, adv: ApiVersionsResponse(error_code=0, api_keys=[("not", "a", "struct")]))
        proto = KafkaProtocol(handlers, 1 << 20)
        transport = StringTransport()
        proto.makeConnection(transport)
        proto.dataReceived(struct.pack(">i", len(api_versions_frame(3, 1))) + api_versions_frame(3, 1))
        assert transport.disconnecting and transport.value() == b""
    finally:
        broker.stop()
