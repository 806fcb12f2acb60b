"""The AMQP codec's protocol header, limits checked before buffering, and protocol
errors with their reply codes. Encoders, decoders and chunking are in test_amqp_codec.py."""

from __future__ import annotations

import struct

import pytest
from pamqp import body as pbody
from pamqp import commands, frame, header

from logbus.gateway.amqp.codec import (
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    Ack,
    AMQPChannelError,
    AMQPConnectionError,
    BadProtocolHeader,
    ChannelFailed,
    Decoder,
    Heartbeat,
    LocalProtocolError,
    Publish,
    encode_method,
)
from tests.unit.test_amqp_codec import PP, marshal, method_fields, pamqp_content

# -- protocol header --------------------------------------------------------------------------


@pytest.mark.parametrize("greeting", [b"AMQP\x00\x00\x09\x00", b"AMQP\x01\x01\x00\x0a", b"GET / HTTP/1.1\r\n", b"\x16\x03\x01"])
def test_a_wrong_protocol_header_is_answered_with_ours(greeting: bytes) -> None:
    with pytest.raises(BadProtocolHeader) as e:
        Decoder().feed(greeting)  # refused at the first wrong byte, not after 8
    assert e.value.reply == b"AMQP\x00\x00\x09\x01"


def test_protocol_header_in_pieces() -> None:
    dec = Decoder()
    assert dec.feed(b"AM") == [] and dec.feed(b"QP\x00\x00\x09") == []
    assert dec.feed(b"\x01" + HEARTBEAT_FRAME) == [Heartbeat()]


# -- limits, checked before buffering ------------------------------------------------------------


def test_frame_size_is_checked_against_frame_max_before_the_payload() -> None:
    dec = Decoder()
    dec.feed(PROTOCOL_HEADER)
    with pytest.raises(AMQPConnectionError) as e:
        dec.feed(struct.pack(">BHI", 3, 1, 4097))  # 4096 until tuned; no payload sent
    assert e.value.reply_code == 501 and "frame_too_large" in e.value.reply_text
    tuned = Decoder(expect_protocol_header=False)
    tuned.frame_max = 131072
    assert tuned.frame_max == 131072
    assert tuned.feed(struct.pack(">BHI", 3, 1, 100000) + b"\x00" * 10) == [] and tuned.buffered == 17
    with pytest.raises(LocalProtocolError):
        tuned.frame_max = 0
    with pytest.raises(AMQPConnectionError) as e:
        Decoder(expect_protocol_header=False).feed(b"\x09\x00\x00\x00\x00\x00\x05")  # unknown type: no payload needed
    assert e.value.reply_code == 501


def test_a_message_over_max_message_size_fails_its_channel_only() -> None:
    dec = Decoder(max_message_size=10_000, expect_protocol_header=False)
    head = marshal(commands.Basic.Publish(0, "ex", "rk"), 7) + marshal(header.ContentHeader(0, 10_001, PP()), 7)
    [failed] = dec.feed(head)  # refused on the header, before any body byte
    assert isinstance(failed, ChannelFailed) and isinstance(failed.error, AMQPChannelError)
    err = failed.error
    assert (err.hard, err.reply_code, err.channel, err.class_id, err.method_id) == (False, 406, 7, 60, 40)
    assert err.reply_text.startswith("PRECONDITION_FAILED - message size 10001")
    close = frame.unmarshal(err.close_frame())
    assert close[1] == 7 and method_fields(close[2]) == ("Channel.Close", {"reply_code": 406, "reply_text": err.reply_text, "class_id": 60, "method_id": 40})
    bodies = b"".join(marshal(pbody.ContentBody(b"x" * 4000), 7) for _ in range(2)) + marshal(pbody.ContentBody(b"x" * 2001), 7)
    assert dec.feed(bodies) == [] and dec.buffered == 0  # skipped, not kept
    ok = pamqp_content(7, commands.Basic.Publish(0, "ex", "rk"), PP(), b"y", 4096) + marshal(commands.Basic.Ack(1), 8)
    assert [type(e) for e in dec.feed(ok)] == [Publish, Ack]


def test_content_held_for_a_connection_is_bounded() -> None:
    dec = Decoder(max_message_size=6000, max_pending_content=10_000, expect_protocol_header=False)
    for ch in (1, 2):
        assert dec.feed(marshal(commands.Basic.Publish(), ch) + marshal(header.ContentHeader(0, 5000, PP()), ch)) == []
    dec.feed(marshal(pbody.ContentBody(b"x" * 4000), 1))
    [failed] = dec.feed(marshal(commands.Basic.Publish(), 3) + marshal(header.ContentHeader(0, 5000, PP()), 3))
    assert (failed.error.reply_code, failed.error.channel) == (311, 3) and dec.buffered == 4000
    [done] = dec.feed(marshal(pbody.ContentBody(b"x" * 1000), 1))
    assert len(done.body) == 5000 and dec.buffered == 0


# -- protocol errors and their codes ---------------------------------------------------------------


def publish_head(ch: int = 1, size: int = 3) -> bytes:
    return marshal(commands.Basic.Publish(0, "ex", "rk"), ch) + marshal(header.ContentHeader(0, size, PP()), ch)


def cut_short(frame_bytes: bytes, n: int) -> bytes:
    """The frame with its last n payload bytes gone (and its size fixed)."""
    payload = frame_bytes[7:-1][:-n]
    return frame_bytes[:3] + struct.pack(">I", len(payload)) + payload + b"\xce"


@pytest.mark.parametrize(
    "wire, code, ids",
    [
        (HEARTBEAT_FRAME[:-1] + b"\x00", 501, (0, 0)),  # bad frame end
        (b"\x08\x00\x00\x00\x00\x00\x01x\xce", 501, (0, 0)),  # heartbeat with a payload
        (b"\x08\x00\x01\x00\x00\x00\x00\xce", 505, (0, 0)),  # heartbeat off channel 0
        (marshal(pbody.ContentBody(b"x"), 1), 505, (0, 0)),  # body with no method
        (marshal(commands.Basic.Publish(), 1) + marshal(commands.Basic.Ack(1), 1), 505, (60, 40)),
        (publish_head() + marshal(commands.Basic.Ack(1), 1), 505, (60, 40)),  # method inside content
        (publish_head() + publish_head()[-22:], 505, (60, 40)),  # a second header
        (marshal(commands.Basic.Publish(), 1) + struct.pack(">BHIHHQH", 2, 1, 14, 50, 0, 0, 0) + b"\xce", 505, (60, 40)),
        (publish_head(size=3) + marshal(pbody.ContentBody(b"four"), 1), 501, (60, 40)),  # past body size
        (struct.pack(">BHIHH", 1, 1, 4, 60, 99) + b"\xce", 540, (60, 99)),  # unknown method
        (struct.pack(">BHIHH", 1, 1, 4, 77, 10) + b"\xce", 540, (77, 10)),  # unknown class
        (marshal(commands.Connection.TuneOk(), 1), 504, (10, 31)),
        (marshal(commands.Basic.Publish(), 0), 504, (60, 40)),
        (cut_short(marshal(commands.Basic.Publish(), 1), 1), 501, (60, 40)),  # fields cut short
        (cut_short(marshal(commands.Basic.Ack(1), 1), 1), 501, (60, 80)),
        (cut_short(marshal(commands.Queue.Declare(queue="q"), 1), 2), 501, (50, 10)),
        (cut_short(marshal(commands.Basic.Qos(0, 1), 1), 2), 501, (60, 10)),
        (publish_head()[:-3] + b"\x00\x01\xce", 501, (60, 40)),  # undefined property flag
        (cut_short(publish_head(), 1), 501, (60, 40)),  # properties cut short
        (cut_short(publish_head(), 2), 501, (60, 40)),  # content header cut short
        (marshal(commands.Basic.Publish(), 1) + struct.pack(">BHIHHQH", 2, 1, 14, 60, 1, 0, 0) + b"\xce", 505, (60, 40)),
        (struct.pack(">BHIH", 1, 1, 2, 60) + b"\xce", 501, (0, 0)),  # method frame too short
    ],
)
def test_protocol_errors_carry_their_reply_codes(wire: bytes, code: int, ids: tuple[int, int]) -> None:
    ack = marshal(commands.Basic.Ack(42), 9)
    dec = Decoder(expect_protocol_header=False)
    with pytest.raises(AMQPConnectionError) as e:
        dec.feed(ack + wire)
    err = e.value
    assert err.hard and (err.reply_code, err.class_id, err.method_id) == (code, *ids), err.reply_text
    assert err.events == [Ack(9, 42, False)]  # decoded before the error, not lost
    close = frame.unmarshal(err.close_frame())[2]
    assert method_fields(close) == ("Connection.Close", {"reply_code": code, "reply_text": err.reply_text, "class_id": ids[0], "method_id": ids[1]})
    with pytest.raises(AMQPConnectionError):
        dec.feed(b"")


def test_reply_text_is_a_valid_shortstr() -> None:
    err = AMQPConnectionError(501, "é" * 300)
    assert len(err.reply_text.encode()) <= 255 and err.reply_text.startswith("FRAME_ERROR - é")
    assert encode_method(0, err.close_method())
