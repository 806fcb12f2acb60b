"""The compiled record walk (kernel.scan) against damaged records: a batch whose CRC is
valid but whose records do not parse is refused with MalformedRecords, never read past
its bytes, never turned into wrong rows silently."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from logbus.core.log.format import CRC_AT, CRC_START, HEADER_SIZE, RECORDS_COUNT_AT, validate
from logbus.spark import kernel
from logbus.spark import schema as S
from logbus.spark.decode import MalformedRecords, decode_chunk
from tests.unit.format_reader import r_batch_at, r_records

ALL = S.columns(True)


def batch(records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 2**31 - 1)
    for i, (k, v, hs) in enumerate(records):
        builder.append(i, 1_000 + i, k, v, hs)
    return bytes(builder.build())


def with_crc(data: bytearray) -> bytes:
    """The batch with its CRC made right again: damage that only the records show."""
    struct.pack_into(">I", data, CRC_AT, crc32c(bytes(data[CRC_START:])))
    return bytes(data)


def decode(data: bytes) -> object:
    b = validate(data, 0, len(data))
    return decode_chunk(data, [b], 0, 2**62, "t", 0, ALL)


records = st.lists(st.tuples(st.none() | st.binary(max_size=30), st.none() | st.binary(max_size=60),
                             st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=10)),
                                      max_size=3)), min_size=1, max_size=12)


@settings(max_examples=300)
@given(recs=records, edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4))
def test_damaged_records_are_refused_or_read_whole(recs: list, edits: list[tuple[int, int]]) -> None:
    whole = bytearray(batch(recs))
    for at, byte in edits:
        whole[HEADER_SIZE + at % (len(whole) - HEADER_SIZE)] = byte
    data = with_crc(whole)
    try:
        rb = decode(data)
    except MalformedRecords as e:
        assert str(e)
        return
    # the bytes still parse as records: the rows are exactly what the spec's reader
    # (tests/unit/format_reader.py, record by record) reads from them
    rbatch = r_batch_at(data, 0)
    assert rb is not None and rbatch is not None
    try:
        expect = r_records(rbatch)
    except UnicodeDecodeError:  # a header key that is not UTF-8: decoded leniently here
        expect = None
    got = rb.to_pylist()
    assert len(got) == len(recs)
    if expect is not None:
        assert [(r["offset"], round(r["timestamp"].timestamp() * 1000), r["key"], r["value"],
                 [(h["key"], h["value"]) for h in r["headers"]]) for r in got] == [
            (r.offset, r.timestamp, r.key, r.value, r.headers) for r in expect]


@pytest.mark.parametrize("count, message", [(3, "past the end of its batch"), (1, "do not end where their batch ends")])
def test_a_record_count_that_lies(count: int, message: str) -> None:
    data = bytearray(batch([(b"k", b"v", [])] * 2))
    struct.pack_into(">i", data, RECORDS_COUNT_AT, count)
    with pytest.raises(MalformedRecords, match=message):
        decode(with_crc(data))


def test_a_length_that_runs_past_the_batch() -> None:
    data = bytearray(batch([(b"k", b"v" * 20, [])]))
    data[HEADER_SIZE] = 0x7E  # zigzag 63: longer than the 27 bytes left
    with pytest.raises(MalformedRecords, match="past the end of its batch"):
        decode(with_crc(data))


def test_a_value_longer_than_its_record() -> None:
    data = bytearray(batch([(b"k", b"v" * 20, []), (b"k", b"w", [])]))
    # length, attributes, timestampDelta, offsetDelta, keyLength, key: the value's length at +6
    assert data[HEADER_SIZE + 6] == 40  # zigzag 20
    data[HEADER_SIZE + 6] = 60
    with pytest.raises(MalformedRecords, match="run past the record's length"):
        decode(with_crc(data))


def test_views_of_short_long_and_null_strings() -> None:
    a = np.frombuffer(b"0123456789abcdefghij", np.uint8)
    v = kernel.views(a, np.array([0, 2, 5, 0]), np.array([3, 15, -1, 0]))
    words = v.view(np.int32)
    assert words[:, 0].tolist() == [3, 15, 0, 0]
    assert bytes(v[0, 4:]) == b"012" + bytes(9)
    assert bytes(v[1, 4:8]) == b"2345" and words[1, 2] == 0 and words[1, 3] == 2
    assert not v[2:].any()
