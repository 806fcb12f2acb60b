"""Message <-> Record: the envelope travels as one reserved, last record header."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logbus.core.envelope_pb2 import DeadLetter, UserProperty
from logbus.core.errors import CorruptBatch
from logbus.core.log.batch import Record
from logbus.core.message import ENVELOPE_HEADER, Envelope, Message

_u32 = st.integers(0, 2**32 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)
_text = st.text(max_size=12)

_ENVELOPE_FIELDS: dict[str, st.SearchStrategy[object]] = {
    "protocol": st.sampled_from(list(Envelope.Protocol.values())),
    "exchange": _text,
    "routing_key": _text,
    "mqtt_topic": _text,
    "tag": _text,
    "keys": st.lists(_text, max_size=3),
    "content_type": _text,
    "content_encoding": _text,
    "delivery_mode": _u32,
    "priority": _u32,
    "correlation_id": _text,
    "reply_to": _text,
    "expiration": _text,
    "message_id": _text,
    "type": _text,
    "user_id": _text,
    "app_id": _text,
    "amqp_headers": st.binary(max_size=16),
    "mqtt_qos": _u32,
    "mqtt_retain": st.booleans(),
    "payload_format_indicator": _u32,
    "message_expiry_interval": _u32,
    "response_topic": _text,
    "correlation_data": st.binary(max_size=16),
    "amqp_timestamp": st.integers(0, 2**64 - 1),
    "deliver_at_ms": _i64,
    "delivery_count": _u32,
    "expires_at_ms": _i64,
    "mqtt_client_id": _text,
    "user_properties": st.lists(st.builds(UserProperty, key=_text, value=_text), max_size=3),
    "dead_letter": st.builds(DeadLetter, topic=_text, partition=_u32, offset=st.integers(0, 2**64 - 1), reason=_text,
                             delivery_count=_u32, queue=_text, time_ms=_i64),
}


def test_strategy_covers_every_envelope_field() -> None:
    assert set(_ENVELOPE_FIELDS) == set(Envelope.DESCRIPTOR.fields_by_name)


@st.composite
def envelopes(draw: st.DrawFn) -> Envelope:
    chosen = draw(st.sets(st.sampled_from(sorted(_ENVELOPE_FIELDS))))
    return Envelope(**{name: draw(_ENVELOPE_FIELDS[name]) for name in chosen})


_user_headers = st.lists(
    st.tuples(
        st.text(max_size=10).filter(lambda n: n != ENVELOPE_HEADER),
        st.none() | st.binary(max_size=10),
    ),
    max_size=4,
)

messages = st.builds(
    Message,
    key=st.none() | st.binary(max_size=16),
    value=st.none() | st.binary(max_size=64),
    timestamp=st.none() | st.integers(0, 2**63 - 1),
    headers=_user_headers,
    envelope=envelopes(),
)


@given(messages)
def test_round_trip(msg: Message) -> None:
    record = msg.to_record()
    assert isinstance(record, Record)
    assert (record.key, record.value, record.timestamp) == (msg.key, msg.value, msg.timestamp)
    assert record.headers[: len(msg.headers)] == msg.headers
    back = Message.from_record(record)
    assert back == msg
    for name in ("priority", "delivery_mode", "mqtt_qos", "payload_format_indicator"):
        assert back.envelope.HasField(name) == msg.envelope.HasField(name)


@given(messages)
def test_envelope_header_is_last_and_only_when_non_empty(msg: Message) -> None:
    headers = msg.to_record().headers
    if msg.envelope == Envelope():
        assert headers == msg.headers
    else:
        assert len(headers) == len(msg.headers) + 1
        assert headers[-1] == (ENVELOPE_HEADER, msg.envelope.SerializeToString())


def test_optional_zero_is_kept() -> None:
    msg = Message(b"k", b"v", envelope=Envelope(priority=0, mqtt_qos=0))
    back = Message.from_record(msg.to_record())
    assert back.envelope.HasField("priority") and back.envelope.priority == 0
    assert back.envelope.HasField("mqtt_qos")
    assert not back.envelope.HasField("delivery_mode")


def test_plain_record_gives_empty_envelope() -> None:
    record = Record(b"k", b"v", 123, [("trace", b"1"), ("null", None)])
    msg = Message.from_record(record)
    assert msg == Message(b"k", b"v", 123, [("trace", b"1"), ("null", None)], Envelope())
    assert msg.envelope.ByteSize() == 0
    assert Message.from_record(Record(None, None)) == Message()


def test_empty_envelope_writes_no_reserved_header() -> None:
    record = Message(b"k", b"v", 5, [("a", b"1")]).to_record()
    assert record == Record(b"k", b"v", 5, [("a", b"1")])
    assert Message().to_record() == Record(None, None, None, [])


def test_from_record_never_aliases_record_default_headers() -> None:
    msg = Message.from_record(Record(b"k", b"v"))
    msg.headers.append(("x", b"1"))
    assert Record(b"k", b"v").headers == []


@pytest.mark.parametrize(
    "data",
    [b"\xff\xff\xff", b"\x0a\x05ab", b"\x12\x02\xc3\x28", None],
    ids=["bad-tag", "truncated", "invalid-utf8", "no-value"],
)
def test_garbage_envelope_header_raises_corrupt_batch(data: bytes | None) -> None:
    record = Record(b"k", b"v", 1, [("user", b"1"), (ENVELOPE_HEADER, data)])
    with pytest.raises(CorruptBatch, match=ENVELOPE_HEADER):
        Message.from_record(record)


def test_reserved_header_not_last_raises_corrupt_batch() -> None:
    data = Envelope(tag="t").SerializeToString()
    record = Record(b"k", b"v", 1, [(ENVELOPE_HEADER, data), ("user", b"1")])
    with pytest.raises(CorruptBatch, match="last"):
        Message.from_record(record)


def test_reserved_name_in_user_headers_is_rejected() -> None:
    msg = Message(b"k", b"v", headers=[("ok", b"1"), (ENVELOPE_HEADER, b"x")])
    with pytest.raises(ValueError, match="reserved"):
        msg.to_record()
